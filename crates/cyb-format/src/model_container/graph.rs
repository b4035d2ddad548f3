//! A `.model` holding a graph (`source = "graph"`): the `~~~graph` section is the graph's text
//! form, and its constants written as `@` are tensors of the container, used in place from the
//! mapping.

use super::{header, parse_header, ContainerInfo};
use crate::cursor::format_error;
use crate::mapping::{map_file, SharedBytes};
use cyb_graph::Graph;
use cyb_tensor::{Result, Storage, Tensor};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// A graph read from a `.model` file.
#[derive(Debug)]
pub struct GraphModel {
    pub graph: Graph,
    pub info: Arc<ContainerInfo>,
}

/// Maps and opens the graph `.model` at `path`.
pub fn open_graph(path: impl AsRef<Path>) -> Result<GraphModel> {
    let path = path.as_ref();
    graph_from_bytes(map_file(path)?, path)
}

/// Opens a graph `.model` from shared bytes; `path` names it in errors.
pub fn graph_from_bytes(bytes: SharedBytes, path: &Path) -> Result<GraphModel> {
    let (info, _config) = parse_header(&bytes, path)?;
    if info.source != "graph" {
        return Err(format_error(
            path,
            0,
            format!(
                "this .model holds a {} model, not a graph (config source {:?})",
                info.source, info.source
            ),
        ));
    }
    let text = info.graph.as_deref().ok_or_else(|| {
        format_error(
            path,
            0,
            "config source is \"graph\" but there is no graph section",
        )
    })?;
    let mut tensors: HashMap<&str, Tensor> = HashMap::with_capacity(info.tensors.len());
    for e in &info.tensors {
        let dtype = header::type_info(&e.type_name)
            .and_then(|t| t.dtype)
            .ok_or_else(|| {
                format_error(
                    path,
                    e.file_offset,
                    format!(
                        "tensor {:?}: {} cannot be computed with",
                        e.name, e.type_name
                    ),
                )
            })?;
        let storage = Storage::Shared {
            owner: bytes.clone(),
            offset: e.file_offset,
            len: e.byte_len,
        };
        let t = Tensor::new(e.shape.clone(), dtype, storage).map_err(|err| {
            format_error(path, e.file_offset, format!("tensor {:?}: {err}", e.name))
        })?;
        tensors.insert(e.name.as_str(), t);
    }
    let graph = cyb_graph::parse_graph(text, &|name| tensors.get(name).cloned())
        .map_err(|e| format_error(path, 0, format!("section \"graph\": {e}")))?;
    // Every tensor must be a constant of the graph: an unreferenced one would be data the root
    // commits to but nothing reads, which the writer never produces.
    let constants: std::collections::HashSet<&str> = graph
        .constants
        .keys()
        .map(|&id| graph.name_of(id))
        .collect();
    for e in &info.tensors {
        if !constants.contains(e.name.as_str()) {
            return Err(format_error(
                path,
                e.file_offset,
                format!("tensor {:?} is not a constant of the graph", e.name),
            ));
        }
    }
    Ok(GraphModel { graph, info })
}

/// A graph from a `.model` file (as imported) or an ONNX file (as the file describes it), chosen
/// by the file's first bytes; `cyb_graph::prepare` readies either to run.
pub fn load_graph(path: &Path) -> Result<Graph> {
    let mut magic = [0u8; 10];
    let n = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut magic))
        .map_err(|source| cyb_tensor::Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if super::has_model_magic(magic.get(..n).unwrap_or_default()) {
        return open_graph(path).map(|m| m.graph);
    }
    crate::onnx::read_onnx(path)
}
