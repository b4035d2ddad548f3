//! Control flow: `If` and `Loop` nodes hold subgraphs. A subgraph's inputs are its formal
//! inputs (for `Loop`: iteration number, condition, loop-carried values) followed by the outer
//! values it reads, which import turns into explicit node inputs. In the text form a subgraph
//! is a string holding its own text form, every constant inline.

use crate::exec::Executor;
use crate::graph::Graph;
use crate::host_op::{req, HostRun};
use crate::text::{parse_graph, write_graph_limit};
use cyb_ops::Op;
use cyb_tensor::{Error, Result, Tensor};

/// A graph nested in a node.
#[derive(Clone, Debug, PartialEq)]
pub struct SubGraph(pub Box<Graph>);

impl serde::Serialize for SubGraph {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let text = write_graph_limit(&self.0, usize::MAX).map_err(serde::ser::Error::custom)?;
        s.serialize_str(&text)
    }
}

impl<'de> serde::Deserialize<'de> for SubGraph {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<SubGraph, D::Error> {
        let text = String::deserialize(d)?;
        let g = parse_graph(&text, &|_| None).map_err(serde::de::Error::custom)?;
        Ok(SubGraph(Box::new(g)))
    }
}

/// An executor for subgraph `k` of the node `r` runs: on the plan its executor made, or planned
/// now (outside an executor: folding, type inference).
fn body_executor<'a>(r: &HostRun<'a>, body: &'a Graph, k: usize) -> Result<Executor<'a>> {
    match r.bodies.get(k) {
        Some(plan) => Executor::with_plan(body, plan, r.d),
        None => Executor::new(body, r.d),
    }
}

fn truthy(r: &HostRun, t: &Tensor) -> Result<bool> {
    let v = r.d.to_host(t)?.to_i64_vec()?;
    v.first()
        .map(|&b| b != 0)
        .ok_or_else(|| Error::invalid("if", "empty condition"))
}

/// `If`: inputs `cond, captured..`; runs one branch on the captured values.
pub(crate) fn run_if(
    r: &mut HostRun,
    then_b: &Graph,
    else_b: &Graph,
    inputs: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let cond = truthy(r, req("if", inputs, 0)?)?;
    let captured: Vec<Tensor> = inputs[1..].iter().flatten().cloned().collect();
    let ex = match cond {
        true => body_executor(r, then_b, 0)?,
        false => body_executor(r, else_b, 1)?,
    };
    ex.run_nested(&captured, r.ctx)
}

/// The most iterations a `Loop` may run, against hostile or runaway models.
const MAX_TRIPS: i64 = 1 << 24;

/// `Loop`: inputs `max_trips?, cond?, carried.. (n_carried), captured..`; outputs the final
/// carried values, then each scan output stacked along a new first dim.
pub(crate) fn run_loop(
    r: &mut HostRun,
    body: &Graph,
    n_carried: usize,
    inputs: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let op = "loop";
    let trips = match inputs.first().and_then(Option::as_ref) {
        Some(t) => r.ints(t)?.first().copied().unwrap_or(0),
        None => i64::MAX,
    };
    let mut cond = match inputs.get(1).and_then(Option::as_ref) {
        Some(t) => truthy(r, t)?,
        None => true,
    };
    let mut carried: Vec<Tensor> = (0..n_carried)
        .map(|i| req(op, inputs, 2 + i).cloned())
        .collect::<Result<_>>()?;
    let captured: Vec<Tensor> = inputs
        .iter()
        .skip(2 + n_carried)
        .flatten()
        .cloned()
        .collect();
    let n_scan = body
        .outputs
        .len()
        .checked_sub(1 + n_carried)
        .ok_or_else(|| Error::invalid(op, "body has too few outputs"))?;
    let mut scans: Vec<Vec<Tensor>> = vec![Vec::new(); n_scan];
    let ex = body_executor(r, body, 0)?;
    let mut i = 0i64;
    let mut scanned = 0u128;
    while i < trips && cond {
        if i >= MAX_TRIPS {
            return Err(Error::invalid(
                op,
                format!("more than {MAX_TRIPS} iterations"),
            ));
        }
        let mut args = vec![
            Tensor::from_i64(&[], &[i])?,
            Tensor::from_bytes(&[], cyb_tensor::DType::Bool, &[u8::from(cond)])?,
        ];
        args.extend(carried.iter().cloned());
        args.extend(captured.iter().cloned());
        let out = ex.run_nested(&args, r.ctx)?;
        cond = truthy(r, &out[0])?;
        carried = out[1..1 + n_carried].to_vec();
        for (k, t) in out[1 + n_carried..].iter().enumerate() {
            let mut d = vec![1];
            d.extend_from_slice(t.dims());
            scanned += cyb_tensor::memory::tensor_bytes(t.dims(), t.dtype()).unwrap_or(0);
            scans[k].push(r.reshape(t, &d)?);
        }
        // The scan outputs are kept until the end and then concatenated: twice their size.
        cyb_tensor::memory::check_host_bytes(
            || format!("{op}: scan outputs of {} iterations", i + 1),
            scanned.saturating_mul(2),
        )?;
        i += 1;
    }
    let mut outs = carried;
    for s in scans {
        if s.is_empty() {
            return Err(Error::invalid(
                op,
                "a scan output of a loop that ran zero times has no shape",
            ));
        }
        outs.push(r.one(&Op::Concat { axis: 0 }, &s)?);
    }
    Ok(outs)
}

/// Axes and directions of a `Scan` (ONNX opset ≥ 9; one entry per scan input or output).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScanSpec {
    pub n_state: usize,
    pub n_scan_inputs: usize,
    pub input_axes: Vec<i64>,
    pub input_reverse: Vec<bool>,
    pub output_axes: Vec<i64>,
    pub output_reverse: Vec<bool>,
}

/// `Scan`: inputs `states.., scan inputs.., captured..`; the body takes `states.., one slice of
/// each scan input.., captured..` and returns `states.., scan output slices..`, which are
/// stacked along their output axes.
pub(crate) fn run_scan(
    r: &mut HostRun,
    body: &Graph,
    s: &ScanSpec,
    inputs: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let op = "scan";
    let all: Vec<Tensor> = inputs.iter().flatten().cloned().collect();
    if all.len() < s.n_state + s.n_scan_inputs || s.n_scan_inputs == 0 {
        return Err(Error::invalid(
            op,
            "fewer inputs than states and scan inputs",
        ));
    }
    let mut states: Vec<Tensor> = all[..s.n_state].to_vec();
    let scan_in = &all[s.n_state..s.n_state + s.n_scan_inputs];
    let captured = &all[s.n_state + s.n_scan_inputs..];
    let axis_of = |v: &[i64], j: usize, rank: usize| -> Result<usize> {
        crate::host_op::axis(op, v.get(j).copied().unwrap_or(0), rank)
    };
    let a0 = axis_of(&s.input_axes, 0, scan_in[0].dims().len())?;
    let len = scan_in[0].dims()[a0];
    let n_out = body
        .outputs
        .len()
        .checked_sub(s.n_state)
        .ok_or_else(|| Error::invalid(op, "body has too few outputs"))?;
    let mut outs: Vec<Vec<Tensor>> = vec![Vec::new(); n_out];
    let ex = body_executor(r, body, 0)?;
    for t in 0..len {
        let mut args = states.clone();
        for (j, x) in scan_in.iter().enumerate() {
            let a = axis_of(&s.input_axes, j, x.dims().len())?;
            if x.dims()[a] != len {
                return Err(Error::invalid(op, "scan inputs differ in length"));
            }
            let i = if s.input_reverse.get(j).copied().unwrap_or(false) {
                len - 1 - t
            } else {
                t
            };
            let idx = Tensor::from_i64(&[], &[i as i64])?;
            args.push(r.one(&Op::Gather { axis: a as isize }, &[x.clone(), idx])?);
        }
        args.extend(captured.iter().cloned());
        let out = ex.run_nested(&args, r.ctx)?;
        states = out[..s.n_state].to_vec();
        for (k, y) in out[s.n_state..].iter().enumerate() {
            outs[k].push(y.clone());
        }
    }
    let mut result = states;
    for (k, mut slices) in outs.into_iter().enumerate() {
        if slices.is_empty() {
            return Err(Error::invalid(op, "a scan of length 0 has no output shape"));
        }
        if s.output_reverse.get(k).copied().unwrap_or(false) {
            slices.reverse();
        }
        let rank = slices[0].dims().len() + 1;
        let a = axis_of(&s.output_axes, k, rank)?;
        let mut parts = Vec::with_capacity(slices.len());
        for y in &slices {
            let mut d = y.dims().to_vec();
            d.insert(a, 1);
            parts.push(r.reshape(y, &d)?);
        }
        result.push(r.one(&Op::Concat { axis: a as isize }, &parts)?);
    }
    Ok(result)
}
