//! An ONNX file as the runtime runs it: imported, then readied by `cyb_graph::prepare`.

use cyb_graph::Graph;
use std::path::Path;

pub fn load_onnx(path: &Path) -> cyb_tensor::Result<Graph> {
    let mut g = cyb_format::onnx::read_onnx(path)?;
    cyb_graph::prepare(&mut g)?;
    Ok(g)
}
