//! The graph's text form (docs/graph-format.md): what `cyb-llm graph` prints and what the
//! `~~~graph` section of a `.model` file holds. Writing then parsing gives an equal graph.

use crate::graph::{graph_err, Dim, Graph, Node, NodeOp, ValueType};
use crate::text_value::{is_ident, write as write_value, Parser};
use cyb_tensor::{DType, Error, Result, Tensor};
use std::collections::HashMap;
use std::fmt::Write as _;

/// Constants with at most this many elements are written inline; larger ones as `@` (their
/// bytes live in the container's tensor section, or are supplied to [`parse_graph`]).
pub const INLINE_CONSTANT_LIMIT: usize = 64;

/// Characters allowed in unquoted value names besides `[A-Za-z0-9_]`.
const NAME_EXTRA: &str = "./-";

/// The text form of `g`. Fails only for op parameters JSON cannot hold (NaN or infinite floats).
pub fn write_graph(g: &Graph) -> Result<String> {
    write_graph_limit(g, INLINE_CONSTANT_LIMIT)
}

/// The text form with constants of up to `inline_limit` elements written inline.
pub(crate) fn write_graph_limit(g: &Graph, inline_limit: usize) -> Result<String> {
    let mut s = String::from("graph {\n");
    for v in &g.values {
        s.push_str("  value ");
        push_name(&v.name, &mut s);
        if let Some(t) = &v.ty {
            s.push_str(": ");
            push_type(t, &mut s);
        }
        s.push('\n');
    }
    for &i in &g.inputs {
        s.push_str("  input ");
        push_name(g.name_of(i), &mut s);
        s.push('\n');
    }
    for (&id, t) in &g.constants {
        s.push_str("  const ");
        push_name(g.name_of(id), &mut s);
        s.push_str(" = ");
        push_constant(t, inline_limit, &mut s);
        s.push('\n');
    }
    for n in &g.nodes {
        s.push_str("  node ");
        push_name(&n.name, &mut s);
        s.push_str(": ");
        for (i, &o) in n.outputs.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            push_name(g.name_of(o), &mut s);
        }
        s.push_str(" = ");
        let v = serde_json::to_value(&n.op).map_err(|e| node_text_err(n, e.to_string()))?;
        let (kw, inner) = match (&n.op, v) {
            (NodeOp::Op(_), serde_json::Value::Object(mut m)) => ("op ", m.remove("Op")),
            (NodeOp::Host(_), serde_json::Value::Object(mut m)) => ("host ", m.remove("Host")),
            _ => ("", None),
        };
        let inner = inner.ok_or_else(|| node_text_err(n, "op has no text form".into()))?;
        let back: Option<NodeOp> = serde_json::from_value(serde_json::Value::Object(
            [(
                if kw == "op " { "Op" } else { "Host" }.to_string(),
                inner.clone(),
            )]
            .into_iter()
            .collect(),
        ))
        .ok();
        if back.as_ref() != Some(&n.op) {
            return Err(node_text_err(n, "a parameter is NaN or infinite".into()));
        }
        s.push_str(kw);
        write_value(&inner, &mut s);
        s.push('(');
        for (i, x) in n.inputs.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            match x {
                Some(id) => push_name(g.name_of(*id), &mut s),
                None => s.push('_'),
            }
        }
        s.push_str(")\n");
    }
    for &o in &g.outputs {
        s.push_str("  output ");
        push_name(g.name_of(o), &mut s);
        s.push('\n');
    }
    s.push_str("}\n");
    Ok(s)
}

fn node_text_err(n: &Node, reason: String) -> Error {
    Error::invalid(format!("node {} ({})", n.name, n.op.name()), reason)
}

fn push_name(n: &str, s: &mut String) {
    let plain = !n.is_empty()
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || NAME_EXTRA.contains(c))
        && !n.starts_with(|c: char| c.is_ascii_digit() || NAME_EXTRA.contains(c))
        && !matches!(n, "_" | "null" | "true" | "false");
    if plain {
        s.push_str(n);
    } else {
        s.push_str(&serde_json::Value::String(n.to_string()).to_string());
    }
}

fn push_type(t: &ValueType, s: &mut String) {
    s.push_str(t.dtype.name());
    if let Some(d) = &t.dims {
        s.push('[');
        for (i, x) in d.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            match x {
                Dim::Fixed(n) => {
                    let _ = write!(s, "{n}");
                }
                Dim::Sym(n) if is_ident(n) => s.push_str(n),
                Dim::Sym(n) => s.push_str(&serde_json::Value::String(n.clone()).to_string()),
            }
        }
        s.push(']');
    }
}

fn push_constant(t: &Tensor, inline_limit: usize, s: &mut String) {
    let Some(bytes) = t.host_bytes() else {
        s.push('@');
        return;
    };
    if t.numel() > inline_limit {
        s.push('@');
    } else if t.dtype().is_integer() {
        let v = t.to_i64_vec().unwrap_or_default();
        let parts: Vec<String> = v.iter().map(i64::to_string).collect();
        let _ = write!(s, "[{}]", parts.join(", "));
    } else {
        s.push_str("hex:");
        for b in bytes {
            let _ = write!(s, "{b:02x}");
        }
    }
}

/// Parses the text form. `external` supplies the bytes of constants written as `@` (by name).
pub fn parse_graph(text: &str, external: &dyn Fn(&str) -> Option<Tensor>) -> Result<Graph> {
    let mut g = Graph::default();
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut lines = text.lines().enumerate().filter(|(_, l)| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#')
    });
    match lines.next() {
        Some((_, l)) if l.trim() == "graph {" => {}
        _ => return Err(graph_err("text does not start with 'graph {'".into())),
    }
    let mut closed = false;
    for (no, line) in lines {
        if closed {
            return Err(line_err(no, "text after the closing '}'".into()));
        }
        if line.trim() == "}" {
            closed = true;
            continue;
        }
        parse_line(line, &mut g, &mut ids, external).map_err(|e| line_err(no, e))?;
    }
    if !closed {
        return Err(graph_err("missing closing '}'".into()));
    }
    g.validate()?;
    Ok(g)
}

fn line_err(no: usize, reason: String) -> Error {
    graph_err(format!("line {}: {reason}", no + 1))
}

fn parse_line(
    line: &str,
    g: &mut Graph,
    ids: &mut HashMap<String, usize>,
    external: &dyn Fn(&str) -> Option<Tensor>,
) -> std::result::Result<(), String> {
    let mut p = Parser::new(line);
    let kw = p.ident_with("").ok_or("expected a keyword")?;
    let lookup =
        |p: &mut Parser, ids: &HashMap<String, usize>| -> std::result::Result<usize, String> {
            let n = p.name(NAME_EXTRA)?;
            ids.get(&n).copied().ok_or(format!("unknown value {n:?}"))
        };
    match kw {
        "value" => {
            let n = p.name(NAME_EXTRA)?;
            let ty = if p.eat(':') {
                Some(parse_type(&mut p)?)
            } else {
                None
            };
            if ids.insert(n.clone(), g.values.len()).is_some() {
                return Err(format!("value {n:?} declared twice"));
            }
            g.add_value(&n, ty);
        }
        "input" => {
            let id = lookup(&mut p, ids)?;
            g.inputs.push(id);
        }
        "output" => {
            let id = lookup(&mut p, ids)?;
            g.outputs.push(id);
        }
        "const" => {
            let id = lookup(&mut p, ids)?;
            p.expect('=')?;
            let name = g.name_of(id).to_string();
            let ty = g.values[id]
                .ty
                .clone()
                .ok_or(format!("constant {name:?} has no type"))?;
            let dims = ty
                .fixed_dims()
                .ok_or(format!("constant {name:?} has symbolic dims"))?;
            let t = if p.eat('@') {
                let t = external(&name).ok_or(format!("no data for constant {name:?}"))?;
                if t.dtype() != ty.dtype || t.dims() != dims.as_slice() {
                    return Err(format!("data for {name:?} is {} {:?}", t.dtype(), t.dims()));
                }
                t
            } else {
                parse_constant(&mut p, ty.dtype, &dims)?
            };
            g.constants.insert(id, t);
        }
        "node" => {
            let name = p.name(NAME_EXTRA)?;
            p.expect(':')?;
            let mut outputs = vec![lookup(&mut p, ids)?];
            while p.eat(',') {
                outputs.push(lookup(&mut p, ids)?);
            }
            p.expect('=')?;
            let which = p.ident_with("").ok_or("expected 'op' or 'host'")?;
            let inner = p.variant()?;
            let key = match which {
                "op" => "Op",
                "host" => "Host",
                w => return Err(format!("expected 'op' or 'host', got {w:?}")),
            };
            let mut m = serde_json::Map::new();
            m.insert(key.to_string(), inner);
            let op: NodeOp =
                serde_json::from_value(serde_json::Value::Object(m)).map_err(|e| e.to_string())?;
            p.expect('(')?;
            let mut inputs = Vec::new();
            if !p.eat(')') {
                loop {
                    if p.peek() == Some('_')
                        && p.rest()
                            .get(1..2)
                            .is_none_or(|c| c == "," || c == ")" || c == " ")
                    {
                        p.pos += 1;
                        inputs.push(None);
                    } else {
                        inputs.push(Some(lookup(&mut p, ids)?));
                    }
                    if p.eat(')') {
                        break;
                    }
                    p.expect(',')?;
                }
            }
            g.nodes.push(Node {
                name,
                op,
                inputs,
                outputs,
            });
        }
        k => return Err(format!("unknown keyword {k:?}")),
    }
    if !p.rest().trim().is_empty() {
        return Err(format!("unexpected text {:?}", p.rest().trim()));
    }
    Ok(())
}

fn parse_type(p: &mut Parser) -> std::result::Result<ValueType, String> {
    let d = p.ident_with("").ok_or("expected a dtype")?;
    let dtype = DType::parse(d).ok_or(format!("unknown dtype {d}"))?;
    if !p.eat('[') {
        return Ok(ValueType { dtype, dims: None });
    }
    let mut dims = Vec::new();
    if !p.eat(']') {
        loop {
            let dim = match p.peek() {
                Some(c) if c.is_ascii_digit() => {
                    let n = p.ident_with("").ok_or("expected a dim")?;
                    Dim::Fixed(n.parse().map_err(|_| format!("bad dim {n:?}"))?)
                }
                _ => Dim::Sym(p.name("")?),
            };
            dims.push(dim);
            if p.eat(']') {
                break;
            }
            p.expect(',')?;
        }
    }
    Ok(ValueType {
        dtype,
        dims: Some(dims),
    })
}

fn parse_constant(
    p: &mut Parser,
    dtype: DType,
    dims: &[usize],
) -> std::result::Result<Tensor, String> {
    let n: usize = dims.iter().product();
    if p.eat('[') {
        let mut v: Vec<i64> = Vec::new();
        if !p.eat(']') {
            loop {
                let neg = p.eat('-');
                let s = p.ident_with("").ok_or("expected an integer")?;
                let x: i64 = format!("{}{s}", if neg { "-" } else { "" })
                    .parse()
                    .map_err(|_| format!("bad integer {s:?}"))?;
                v.push(x);
                if p.eat(']') {
                    break;
                }
                p.expect(',')?;
            }
        }
        if v.len() != n || !dtype.is_integer() {
            return Err(format!("{} integers for {dtype} {dims:?}", v.len()));
        }
        return Tensor::from_i64_as(dims, &v, dtype).map_err(|e| e.to_string());
    }
    let h = p.ident_with("").ok_or("expected '[..]', 'hex:..' or '@'")?;
    if h != "hex" || !p.eat(':') {
        return Err("expected '[..]', 'hex:..' or '@'".into());
    }
    let digits = p.ident_with("").unwrap_or("");
    if !digits.len().is_multiple_of(2) {
        return Err("odd number of hex digits".into());
    }
    let bytes: Vec<u8> = (0..digits.len() / 2)
        .map(|i| u8::from_str_radix(&digits[2 * i..2 * i + 2], 16))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| "bad hex digits".to_string())?;
    Tensor::from_bytes(dims, dtype, &bytes).map_err(|e| e.to_string())
}
