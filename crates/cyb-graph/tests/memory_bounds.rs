//! Shapes that come from a graph's data (the dims of an `Expand`, the count of a `Range`, an
//! outer product of two long vectors) can ask for more memory than the machine has. Each such
//! node is refused with `OutOfMemory` naming it, before anything is allocated, instead of
//! aborting the process or being killed once the pages are touched.

use cyb_backend::Dispatcher;
use cyb_graph::{Executor, Graph, HostOp, NodeOp, SubGraph};
use cyb_ops::{BinaryFn, Op};
use cyb_tensor::{DType, Error, Tensor};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// One node `op` over the constants `args`, its output the graph's output.
fn one_node(op: NodeOp, args: Vec<Tensor>) -> Graph {
    let mut g = Graph::default();
    let ins = args
        .into_iter()
        .enumerate()
        .map(|(i, t)| Some(g.add_constant(&format!("arg{i}"), t)))
        .collect();
    let y = g.add_node("hostile", op, ins, &["y"])[0];
    g.outputs.push(y);
    g
}

fn run(g: &Graph) -> Result<Vec<(String, Tensor)>, Error> {
    // The reference backend alone: the check sits in the executor, before any backend.
    let backends = Dispatcher::reference();
    let exec = Executor::new(g, &backends)?;
    exec.run(&HashMap::new()).map(|(outs, _)| outs)
}

fn refused(g: Graph) -> String {
    let t0 = Instant::now();
    let e = run(&g).expect_err("a node larger than memory ran");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let text = e.to_string();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{text}");
    assert!(text.contains("node hostile"), "{text}");
    text
}

fn ints(v: &[i64]) -> Tensor {
    Tensor::from_i64(&[v.len()], v).unwrap()
}

fn scalar(v: i64) -> Tensor {
    Tensor::from_i64(&[], &[v]).unwrap()
}

#[test]
fn shapes_from_data_are_checked_against_memory() {
    let huge = [100_000, 100_000, 100];
    refused(one_node(
        NodeOp::Host(HostOp::ConstantOfShape {
            dtype: DType::F32,
            value: 1.0,
            int_value: 0,
        }),
        vec![ints(&huge)],
    ));
    let one = Tensor::from_f32(&[1], &[1.0]).unwrap();
    let text = refused(one_node(
        NodeOp::Host(HostOp::Expand),
        vec![one.clone(), ints(&huge)],
    ));
    assert!(text.contains("[100000, 100000, 100]"), "{text}");
    refused(one_node(
        NodeOp::Host(HostOp::Tile),
        vec![one.clone(), ints(&[1 << 40])],
    ));
    refused(one_node(
        NodeOp::Host(HostOp::Range),
        vec![scalar(0), scalar(1 << 50), scalar(1)],
    ));
    // An outer product of two 4 MB vectors is 4 TB.
    let n = 1 << 20;
    let col = Tensor::from_f32(&[n, 1], &vec![1.0; n]).unwrap();
    let row = Tensor::from_f32(&[1, n], &vec![1.0; n]).unwrap();
    refused(one_node(
        NodeOp::Host(HostOp::MatMul),
        vec![col.clone(), row.clone()],
    ));
    refused(one_node(
        NodeOp::Op(Op::Binary { f: BinaryFn::Add }),
        vec![col, row],
    ));
}

#[test]
fn shapes_that_fit_still_run() {
    let one = Tensor::from_f32(&[1], &[2.0]).unwrap();
    let outs = run(&one_node(
        NodeOp::Host(HostOp::Expand),
        vec![one, ints(&[3, 4])],
    ))
    .unwrap();
    assert_eq!(outs[0].1.dims(), &[3, 4]);
    assert_eq!(outs[0].1.to_f32_vec().unwrap(), vec![2.0; 12]);
    let outs = run(&one_node(
        NodeOp::Host(HostOp::Range),
        vec![scalar(2), scalar(8), scalar(3)],
    ))
    .unwrap();
    assert_eq!(outs[0].1.to_i64_vec().unwrap(), vec![2, 5]);
}

/// A `Loop` without a trip count whose body emits 16 MiB per iteration as a scan output: the
/// scans are counted as they grow, and the loop stops once they would not fit.
#[test]
fn a_loop_cannot_scan_more_than_memory() {
    let mut body = Graph::default();
    let iter = body.add_value("i", None);
    let cond = body.add_value("cond", None);
    body.inputs.extend([iter, cond]);
    let keep = body.add_node(
        "keep",
        NodeOp::Host(HostOp::Identity),
        vec![Some(cond)],
        &["c"],
    )[0];
    let block = body.add_constant("block", Tensor::zeros(&[4 << 20], DType::F32).unwrap());
    body.outputs.extend([keep, block]);
    let g = one_node(
        NodeOp::Host(HostOp::Loop {
            body: SubGraph(Box::new(body)),
            n_carried: 0,
        }),
        vec![],
    );
    let text = refused(g);
    assert!(text.contains("scan outputs"), "{text}");
}
