//! RandomNormalLike / RandomUniformLike (`HostOp::RandomLike`): shape and dtype follow the
//! input, samples follow the distribution, the same seed gives the same values, and symbolic
//! dims that may be equal at run time are not an inference error.

use cyb_backend::Dispatcher;
use cyb_graph::{infer_types, Dim, Executor, Graph, HostOp, NodeOp, RandomDist, ValueType};
use cyb_ops::{BinaryFn, Op};
use cyb_tensor::{DType, Tensor};
use std::collections::HashMap;

fn sample(dist: RandomDist, seed: Option<f32>, n: usize) -> Vec<f32> {
    let mut g = Graph::default();
    let x = g.add_value("x", Some(ValueType::fixed(DType::F32, &[n])));
    g.inputs.push(x);
    let op = HostOp::RandomLike {
        dist,
        seed,
        dtype: None,
    };
    let y = g.add_node("r", NodeOp::Host(op), vec![Some(x)], &["y"])[0];
    g.outputs = vec![y];
    let d = Dispatcher::reference();
    let ex = Executor::new(&g, &d).unwrap();
    let inputs = HashMap::from([("x".to_string(), Tensor::zeros(&[n], DType::F32).unwrap())]);
    let (outs, _) = ex.run(&inputs).unwrap();
    assert_eq!(outs[0].1.dims(), &[n]);
    outs[0].1.to_f32_vec().unwrap()
}

fn mean_std(v: &[f32]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = v.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / n;
    (m, var.sqrt())
}

#[test]
fn normal_and_uniform_samples_follow_their_distribution() {
    let n = 20000;
    let v = sample(
        RandomDist::Normal {
            mean: 2.0,
            scale: 0.5,
        },
        Some(3.0),
        n,
    );
    let (m, s) = mean_std(&v);
    // 20000 samples: the standard error of the mean is 0.5 / 141 ≈ 0.0035.
    assert!((m - 2.0).abs() < 0.02, "mean {m}");
    assert!((s - 0.5).abs() < 0.02, "std {s}");
    assert_eq!(
        v,
        sample(
            RandomDist::Normal {
                mean: 2.0,
                scale: 0.5
            },
            Some(3.0),
            n
        )
    );
    assert_ne!(
        v,
        sample(
            RandomDist::Normal {
                mean: 2.0,
                scale: 0.5
            },
            Some(4.0),
            n
        )
    );

    let u = sample(
        RandomDist::Uniform {
            low: -1.0,
            high: 3.0,
        },
        None,
        n,
    );
    assert!(u.iter().all(|&x| (-1.0..3.0).contains(&x)));
    let (m, s) = mean_std(&u);
    assert!((m - 1.0).abs() < 0.05, "mean {m}");
    // The standard deviation of U(-1, 3) is 4 / sqrt(12).
    assert!((s - 4.0 / 12f64.sqrt()).abs() < 0.03, "std {s}");
}

#[test]
fn distinct_symbols_that_may_match_at_run_time_infer_unknown_dims() {
    let mut g = Graph::default();
    let st = |d: &[&str]| ValueType {
        dtype: DType::F32,
        dims: Some(
            d.iter()
                .map(|s| s.parse().map(Dim::Fixed).unwrap_or(Dim::Sym(s.to_string())))
                .collect(),
        ),
    };
    let a = g.add_value("a", Some(st(&["B", "4", "T"])));
    let b = g.add_value("b", Some(st(&["B", "1", "U"])));
    let c = g.add_value("c", Some(st(&["B", "3", "U"])));
    g.inputs = vec![a, b, c];
    let mul = NodeOp::Op(Op::Binary { f: BinaryFn::Mul });
    let y = g.add_node("m", mul.clone(), vec![Some(a), Some(b)], &["y"])[0];
    g.outputs = vec![y];
    infer_types(&mut g).unwrap();
    assert_eq!(g.values[y].ty.as_ref().map(|t| t.dtype), Some(DType::F32));
    // 4 against 3 fails for every value of the symbols: still an error naming the node.
    g.add_node("bad", mul, vec![Some(a), Some(c)], &["z"]);
    let e = infer_types(&mut g).unwrap_err().to_string();
    assert!(e.contains("bad"), "{e}");
}
