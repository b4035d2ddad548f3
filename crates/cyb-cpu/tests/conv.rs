//! `Conv` on the GEMM against the reference on odd sizes: 1-D and 2-D, strides, dilations,
//! explicit and "same" padding, with and without bias, a batch of two; 1 and 3 threads
//! bit-identical. Grouped convolutions are left to the reference.

mod common;
use common::{backends, check, Rng};
use cyb_backend::Backend;
use cyb_ops::{Op, PadSpec};
use cyb_tensor::{Tensor, TensorInfo};

fn t(rng: &mut Rng, dims: &[usize]) -> Tensor {
    Tensor::from_f32(dims, &rng.vec(dims.iter().product())).unwrap()
}

fn conv(strides: &[usize], dilations: &[usize], pads: PadSpec, group: usize) -> Op {
    Op::Conv {
        strides: strides.to_vec(),
        dilations: dilations.to_vec(),
        pads,
        group,
    }
}

#[test]
fn one_dimensional() {
    let mut rng = Rng::new(31);
    let (x, w, b) = (
        t(&mut rng, &[2, 3, 37]),
        t(&mut rng, &[5, 3, 4]),
        t(&mut rng, &[5]),
    );
    let op = conv(&[3], &[2], PadSpec::Explicit(vec![2, 1]), 1);
    check(&op, &[x.clone(), w.clone(), b], 1e-5, "conv1d with bias");
    check(&op, &[x, w], 1e-5, "conv1d");
    // A short-time Fourier transform as Silero VAD computes it: 258 filters of 256 taps.
    let (x, w) = (t(&mut rng, &[1, 1, 640]), t(&mut rng, &[258, 1, 256]));
    check(
        &conv(&[128], &[1], PadSpec::Explicit(vec![0, 0]), 1),
        &[x, w],
        1e-5,
        "stft",
    );
    let (x, w, b) = (
        t(&mut rng, &[1, 129, 4]),
        t(&mut rng, &[128, 129, 3]),
        t(&mut rng, &[128]),
    );
    let op = conv(&[1], &[1], PadSpec::Explicit(vec![1, 1]), 1);
    check(&op, &[x, w, b], 1e-5, "conv1d, kernel 3, padding 1");
}

#[test]
fn two_dimensional() {
    let mut rng = Rng::new(32);
    let (x, w, b) = (
        t(&mut rng, &[2, 3, 11, 13]),
        t(&mut rng, &[7, 3, 3, 2]),
        t(&mut rng, &[7]),
    );
    let op = conv(&[2, 1], &[1, 2], PadSpec::Explicit(vec![1, 0, 2, 1]), 1);
    check(&op, &[x.clone(), w.clone(), b.clone()], 1e-5, "conv2d");
    check(
        &conv(&[2, 3], &[], PadSpec::SameUpper, 1),
        &[x.clone(), w.clone(), b.clone()],
        1e-5,
        "conv2d same upper",
    );
    check(
        &conv(&[], &[], PadSpec::SameLower, 1),
        &[x, w, b],
        1e-5,
        "conv2d same lower",
    );
}

#[test]
fn grouped_convolutions_fall_back() {
    let mut rng = Rng::new(33);
    let (x, w) = (t(&mut rng, &[1, 4, 9]), t(&mut rng, &[6, 2, 3]));
    let op = conv(&[1], &[1], PadSpec::Explicit(vec![0, 0]), 2);
    let infos: Vec<TensorInfo> = [x, w].iter().map(Tensor::info).collect();
    for (_, one, _) in backends(Default::default()) {
        assert!(!one.supports(&op, &infos));
    }
}
