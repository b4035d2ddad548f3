//! ONNX import: a `.onnx` file (protobuf `ModelProto`) becomes a [`cyb_graph::Graph`].
//!
//! Supported: the default domain at opsets 7–21 for the operators in `ops.rs` (the rest give
//! `UnsupportedOp` naming the node and op type), initializers (kept in the file mapping when
//! aligned), external data files. Malformed or hostile files give `Error::Format`, never a
//! panic. Import only converts: type inference, constant folding and the other load-time passes
//! are `cyb_graph::prepare`, which the runtime runs (folding executes ops, which a format crate
//! does not).

mod attrs;
mod builder;
mod ops;
mod ops_host;
mod ops_nn;
pub mod proto;
mod tensor;

use crate::map_file;
use bytes::Bytes;
use cyb_graph::{Dim, Graph, ValueType};
use cyb_tensor::{Error, Result, Tensor};
use prost::Message;
use std::collections::HashMap;
use std::path::Path;

pub use proto::{ModelProto, TensorProto};

/// The lowest and highest default-domain opset import accepts. Below opset 7 only the operators
/// whose meaning has not changed since (see `ops::SAME_SINCE_OPSET_1`) are accepted.
pub const OPSETS: std::ops::RangeInclusive<i64> = 1..=21;

/// Reads `path` into a graph exactly as the file describes it (no folding).
pub fn read_onnx(path: &Path) -> Result<Graph> {
    let model = decode_model(path)?;
    build(&model, path)
}

/// Reads a serialized `TensorProto` (the `.pb` files of ONNX's test data) with its name.
pub fn read_tensor_pb(path: &Path) -> Result<(String, Tensor)> {
    let bytes = mapped(path)?;
    let t = TensorProto::decode(bytes)
        .map_err(|e| format_err(path, format!("not a TensorProto: {e}")))?;
    let tensor = tensor::to_tensor(&t, path, path.parent())?;
    Ok((t.name.clone(), tensor))
}

/// Decodes the model protobuf from a mapping of `path`.
pub fn decode_model(path: &Path) -> Result<ModelProto> {
    let bytes = mapped(path)?;
    ModelProto::decode(bytes).map_err(|e| format_err(path, format!("not an ONNX model: {e}")))
}

/// The model's `metadata_props` (key, value) in file order.
pub fn metadata(path: &Path) -> Result<Vec<(String, String)>> {
    Ok(decode_model(path)?
        .metadata_props
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect())
}

/// Decodes a model from bytes (tests and fuzzing); `path` only names it in errors.
pub fn graph_from_bytes(bytes: &[u8], path: &Path) -> Result<Graph> {
    let model = ModelProto::decode(Bytes::copy_from_slice(bytes))
        .map_err(|e| format_err(path, format!("not an ONNX model: {e}")))?;
    build(&model, path)
}

/// The file as `Bytes` over its mapping, so decoded `bytes` fields point into it.
fn mapped(path: &Path) -> Result<Bytes> {
    struct Owner(crate::SharedBytes);
    impl AsRef<[u8]> for Owner {
        fn as_ref(&self) -> &[u8] {
            (*self.0).as_ref()
        }
    }
    Ok(Bytes::from_owner(Owner(map_file(path)?)))
}

pub(crate) fn format_err(path: &Path, reason: String) -> Error {
    Error::Format {
        file: path.to_path_buf(),
        offset: 0,
        reason,
    }
}

/// The graph of a model built in memory (the graph templates of PyTorch checkpoints);
/// `path` names it in errors.
pub fn graph_from_model(model: &ModelProto, path: &Path) -> Result<Graph> {
    build(model, path)
}

fn build(model: &ModelProto, path: &Path) -> Result<Graph> {
    let mut opset = None;
    for o in &model.opset_import {
        if o.domain.is_empty() || o.domain == "ai.onnx" {
            opset = Some(o.version);
        }
    }
    // IR version 2 files have no opset_import; they are opset 1.
    let opset = opset.unwrap_or(1);
    if !OPSETS.contains(&opset) {
        return Err(Error::UnsupportedOp {
            op: format!("ONNX default-domain opset {opset} (supported: {OPSETS:?})"),
            backend: "onnx-import".into(),
            input_dtype: cyb_tensor::DType::F32,
        });
    }
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| format_err(path, "model has no graph".into()))?;
    let mut b = builder::Builder::new(path, opset);
    for init in &graph.initializer {
        if b.ids.contains_key(&init.name) {
            return Err(format_err(
                path,
                format!("initializer {:?} defined twice", init.name),
            ));
        }
        let t = tensor::to_tensor(init, path, path.parent())?;
        let id = b.g.add_constant(&init.name, t);
        b.ids.insert(init.name.clone(), id);
    }
    if !graph.sparse_initializer.is_empty() {
        return Err(Error::UnsupportedOp {
            op: "ONNX sparse_initializer".into(),
            backend: "onnx-import".into(),
            input_dtype: cyb_tensor::DType::F32,
        });
    }
    for vi in &graph.input {
        // Before IR 4, initializers were also listed as inputs (with a default value).
        if b.ids.contains_key(&vi.name) {
            continue;
        }
        let ty = value_type(vi, path)?;
        let id = b.g.add_value(&vi.name, ty);
        b.g.inputs.push(id);
        b.ids.insert(vi.name.clone(), id);
    }
    let mut declared: HashMap<&str, Option<ValueType>> = HashMap::new();
    for vi in graph.value_info.iter().chain(&graph.output) {
        declared.insert(vi.name.as_str(), value_type(vi, path)?);
    }
    for (i, node) in graph.node.iter().enumerate() {
        b.node(node, i)?;
    }
    for vi in &graph.output {
        let id = *b.ids.get(&vi.name).ok_or_else(|| {
            format_err(
                path,
                format!("graph output {:?} is never computed", vi.name),
            )
        })?;
        b.g.outputs.push(id);
    }
    // Declared types of intermediate values and outputs, where the graph has none.
    for (name, ty) in declared {
        if let (Some(&id), Some(ty)) = (b.ids.get(name), ty) {
            let v = &mut b.g.values[id];
            if v.ty.is_none() && !b.g.constants.contains_key(&id) {
                v.ty = Some(ty);
            }
        }
    }
    b.g.validate()?;
    Ok(b.g)
}

pub(crate) fn value_type(vi: &proto::ValueInfoProto, path: &Path) -> Result<Option<ValueType>> {
    let Some(tp) = &vi.r#type else {
        return Ok(None);
    };
    let Some(tt) = &tp.tensor_type else {
        return Err(Error::UnsupportedOp {
            op: format!(
                "ONNX non-tensor value {:?} (sequence, map or optional)",
                vi.name
            ),
            backend: "onnx-import".into(),
            input_dtype: cyb_tensor::DType::F32,
        });
    };
    let dtype = tensor::dtype_of(tt.elem_type, &vi.name)?;
    let dims = match &tt.shape {
        None => None,
        Some(s) => Some(
            s.dim
                .iter()
                .enumerate()
                .map(|(i, d)| match (&d.dim_value, &d.dim_param) {
                    (Some(v), _) if *v >= 0 => Ok(Dim::Fixed(*v as usize)),
                    (Some(v), _) => Err(format_err(path, format!("{:?} has dim {v}", vi.name))),
                    (None, Some(p)) if !p.is_empty() => Ok(Dim::Sym(p.clone())),
                    // An unnamed unknown dim: a symbol of its own.
                    _ => Ok(Dim::Sym(format!("{}_d{i}", vi.name))),
                })
                .collect::<Result<Vec<_>>>()?,
        ),
    };
    Ok(Some(ValueType { dtype, dims }))
}
