//! `Conv` on the GEMM against the reference on odd sizes: 1-D and 2-D, strides, dilations,
//! explicit and "same" padding, with and without bias, a batch of two; 1 and 3 threads
//! bit-identical. Grouped convolutions of up to 8 channels per group (depthwise ones among
//! them) run directly on one or two spatial dims; others are left to the reference.

mod common;
use common::{backends, check, Rng};
use cyb_backend::Backend;
use cyb_ops::{LinearAct, Op, PadSpec};
use cyb_tensor::{Tensor, TensorInfo};

fn t(rng: &mut Rng, dims: &[usize]) -> Tensor {
    Tensor::from_f32(dims, &rng.vec(dims.iter().product())).unwrap()
}

fn conv(strides: &[usize], dilations: &[usize], pads: PadSpec, group: usize) -> Op {
    conv_act(strides, dilations, pads, group, LinearAct::None)
}

fn conv_act(
    strides: &[usize],
    dilations: &[usize],
    pads: PadSpec,
    group: usize,
    act: LinearAct,
) -> Op {
    Op::Conv {
        strides: strides.to_vec(),
        dilations: dilations.to_vec(),
        pads,
        group,
        act,
    }
}

/// A fused activation on every path: the panel GEMM (with and without bias, a partial last
/// panel), the grouped kernel, the window-matrix GEMM (3-D).
#[test]
fn fused_activations() {
    let mut rng = Rng::new(37);
    for act in [LinearAct::Silu, LinearAct::Relu, LinearAct::Tanh] {
        let x = t(&mut rng, &[1, 5, 9, 11]);
        let (w, b) = (t(&mut rng, &[14, 5, 3, 3]), t(&mut rng, &[14]));
        let op = conv_act(&[1, 2], &[1, 1], PadSpec::SameUpper, 1, act);
        check(&op, &[x.clone(), w.clone(), b], 1e-5, "conv + act");
        check(&op, &[x.clone(), w], 1e-5, "conv + act, no bias");
        let (w, b) = (t(&mut rng, &[5, 1, 3, 3]), t(&mut rng, &[5]));
        let op = conv_act(&[1, 1], &[1, 1], PadSpec::SameUpper, 5, act);
        check(&op, &[x, w, b], 1e-5, "depthwise + act");
        let (x, w) = (t(&mut rng, &[1, 2, 4, 5, 6]), t(&mut rng, &[3, 2, 2, 2, 2]));
        let op = conv_act(&[1, 1, 1], &[], PadSpec::Explicit(vec![]), 1, act);
        check(&op, &[x, w], 1e-5, "3-D conv + act");
        // One and two output positions (a recurrent model's conv over its last frames): the
        // window-matrix path.
        for len in [3, 4] {
            let (x, w, b) = (
                t(&mut rng, &[1, 9, len]),
                t(&mut rng, &[20, 9, 3]),
                t(&mut rng, &[20]),
            );
            let op = conv_act(&[1], &[], PadSpec::Explicit(vec![0, 0]), 1, act);
            check(&op, &[x, w, b], 1e-5, "conv over few positions + act");
        }
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

/// Sizes that span several panels of output positions (with a partial last one), more kernel
/// rows than one register tile, and windows that cross the image's edges and output rows.
#[test]
fn many_positions_and_channels() {
    let mut rng = Rng::new(33);
    let (x, w, b) = (
        t(&mut rng, &[2, 20, 9, 37]),
        t(&mut rng, &[29, 20, 3, 3]),
        t(&mut rng, &[29]),
    );
    let same = PadSpec::Explicit(vec![1, 1, 1, 1]);
    check(
        &conv(&[1, 1], &[1, 1], same.clone(), 1),
        &[x.clone(), w, b.clone()],
        1e-5,
        "3x3",
    );
    let w = t(&mut rng, &[29, 20, 3, 3]);
    check(
        &conv(&[2, 2], &[1, 1], same, 1),
        &[x.clone(), w, b.clone()],
        1e-5,
        "3x3 stride 2",
    );
    let w = t(&mut rng, &[29, 20, 1, 1]);
    let none = PadSpec::Explicit(vec![0, 0, 0, 0]);
    check(
        &conv(&[1, 1], &[1, 1], none, 1),
        &[x, w, b],
        1e-5,
        "pointwise",
    );
    let (x, w) = (t(&mut rng, &[1, 16, 70]), t(&mut rng, &[40, 16, 5]));
    check(
        &conv(&[1], &[2], PadSpec::SameUpper, 1),
        &[x, w],
        1e-5,
        "1-D, dilated",
    );
}

#[test]
fn grouped_convolutions() {
    let mut rng = Rng::new(34);
    // Depthwise 2-D as in mobile CNNs: stride 1 and 2, a dilation, explicit and same padding.
    let (x, w, b) = (
        t(&mut rng, &[2, 6, 13, 11]),
        t(&mut rng, &[6, 1, 3, 3]),
        t(&mut rng, &[6]),
    );
    for (strides, dilations, pads, what) in [
        (
            vec![1, 1],
            vec![],
            PadSpec::Explicit(vec![1, 1, 1, 1]),
            "depthwise 3x3",
        ),
        (
            vec![2, 2],
            vec![],
            PadSpec::Explicit(vec![1, 1, 1, 1]),
            "depthwise stride 2",
        ),
        (
            vec![1, 2],
            vec![2, 1],
            PadSpec::Explicit(vec![2, 0, 1, 3]),
            "dilated, odd pads",
        ),
        (vec![2, 1], vec![], PadSpec::SameUpper, "same upper"),
    ] {
        let op = conv(&strides, &dilations, pads, 6);
        check(&op, &[x.clone(), w.clone(), b.clone()], 1e-5, what);
        check(&op, &[x.clone(), w.clone()], 1e-5, what);
    }
    // A depth multiplier (two outputs per input channel), 5x5 taps wider than the padding.
    let (w2, b2) = (t(&mut rng, &[12, 1, 5, 5]), t(&mut rng, &[12]));
    let op = conv(&[1, 1], &[], PadSpec::Explicit(vec![2, 2, 2, 2]), 6);
    check(&op, &[x.clone(), w2, b2], 1e-5, "depth multiplier 2");
    // Two groups of three channels; 1-D groups of two.
    let (w3, b3) = (t(&mut rng, &[4, 3, 3, 2]), t(&mut rng, &[4]));
    let op = conv(&[1, 2], &[], PadSpec::Explicit(vec![0, 1, 2, 0]), 2);
    check(&op, &[x, w3, b3], 1e-5, "two groups");
    let (x1, w1) = (t(&mut rng, &[1, 4, 29]), t(&mut rng, &[6, 2, 3]));
    let op = conv(&[2], &[1], PadSpec::Explicit(vec![1, 1]), 2);
    check(&op, &[x1, w1], 1e-5, "1-D groups");
    // A kernel wider than the padded input leaves whole rows outside.
    let (x4, w4) = (t(&mut rng, &[1, 3, 2, 3]), t(&mut rng, &[3, 1, 3, 5]));
    let op = conv(&[1, 1], &[], PadSpec::Explicit(vec![1, 2, 1, 2]), 3);
    check(&op, &[x4, w4], 1e-5, "kernel past the image");
}

#[test]
fn grouped_convolutions_fall_back() {
    // Sixteen channels per group: the reference's.
    let mut rng = Rng::new(33);
    let (x, w) = (t(&mut rng, &[1, 32, 9]), t(&mut rng, &[6, 16, 3]));
    let op = conv(&[1], &[1], PadSpec::Explicit(vec![0, 0]), 2);
    let infos: Vec<TensorInfo> = [x, w].iter().map(Tensor::info).collect();
    for (_, one, _) in backends(Default::default()) {
        assert!(!one.supports(&op, &infos));
    }
}

fn conv_t(
    strides: &[usize],
    dilations: &[usize],
    pads: &[usize],
    out_pad: &[usize],
    group: usize,
) -> Op {
    Op::ConvTranspose {
        strides: strides.to_vec(),
        dilations: dilations.to_vec(),
        pads: pads.to_vec(),
        output_padding: out_pad.to_vec(),
        group,
    }
}

#[test]
fn transposed_convolutions() {
    let mut rng = Rng::new(35);
    let x = t(&mut rng, &[2, 4, 7, 9]);
    // 2x upsampling (a segmentation head), with and without bias.
    let (w, b) = (t(&mut rng, &[4, 3, 2, 2]), t(&mut rng, &[3]));
    let op = conv_t(&[2, 2], &[1, 1], &[0, 0, 0, 0], &[0, 0], 1);
    check(&op, &[x.clone(), w.clone(), b], 1e-5, "upsample 2x");
    check(&op, &[x.clone(), w], 1e-5, "upsample 2x, no bias");
    // Kernel 3, stride 2, padding 1, output padding 1; a dilation; two groups.
    let w3 = t(&mut rng, &[4, 5, 3, 3]);
    let op = conv_t(&[2, 2], &[1, 1], &[1, 1, 1, 1], &[1, 1], 1);
    check(
        &op,
        &[x.clone(), w3.clone()],
        1e-5,
        "stride 2, pads, output padding",
    );
    let op = conv_t(&[1, 2], &[2, 1], &[2, 0, 1, 1], &[0, 1], 1);
    check(&op, &[x.clone(), w3], 1e-5, "dilated, odd pads");
    let (wg, bg) = (t(&mut rng, &[4, 3, 3, 2]), t(&mut rng, &[6]));
    let op = conv_t(&[2, 1], &[1, 1], &[0, 1, 1, 0], &[1, 0], 2);
    check(&op, &[x, wg, bg], 1e-5, "two groups");
    // 1-D.
    let (x1, w1) = (t(&mut rng, &[1, 3, 11]), t(&mut rng, &[3, 2, 4]));
    let op = conv_t(&[3], &[1], &[1, 2], &[0], 1);
    check(&op, &[x1, w1], 1e-5, "1-D");
}

fn pool(
    kind: cyb_ops::PoolKind,
    kernel: &[usize],
    strides: &[usize],
    pads: PadSpec,
    ceil_mode: bool,
) -> Op {
    Op::Pool {
        kind,
        kernel: kernel.to_vec(),
        strides: strides.to_vec(),
        dilations: vec![],
        pads,
        ceil_mode,
    }
}

/// Max and average pooling against the reference: 1-D and 2-D, strides, padding on either
/// side, ceil mode (windows past the padding), with and without counting the padding, and a
/// global average.
#[test]
fn pooling() {
    use cyb_ops::PoolKind::{Avg, Max};
    let mut rng = Rng::new(36);
    let x2 = t(&mut rng, &[2, 5, 13, 17]);
    let x1 = t(&mut rng, &[2, 3, 29]);
    let pads = PadSpec::Explicit(vec![1, 0, 2, 1]);
    for kind in [
        Max,
        Avg {
            count_include_pad: false,
        },
        Avg {
            count_include_pad: true,
        },
    ] {
        for ceil in [false, true] {
            let op = pool(kind, &[3, 2], &[2, 3], pads.clone(), ceil);
            check(&op, std::slice::from_ref(&x2), 1e-6, "2-D pool");
            let op = pool(kind, &[4], &[3], PadSpec::Explicit(vec![2, 1]), ceil);
            check(&op, std::slice::from_ref(&x1), 1e-6, "1-D pool");
        }
        let op = pool(kind, &[13, 17], &[], PadSpec::Explicit(vec![0; 4]), false);
        check(&op, std::slice::from_ref(&x2), 1e-6, "global pool");
    }
    let op = pool(Max, &[3, 3], &[1, 1], PadSpec::SameUpper, false);
    check(&op, &[t(&mut rng, &[1, 64, 40, 40])], 0.0, "large max pool");
    // Stride 1 (whole rows of taps at once), with begin pads larger than the end pads: the
    // same folds in the same order as the reference, so the same bits.
    let x = t(&mut rng, &[1, 6, 11, 9]);
    for kind in [
        Max,
        Avg {
            count_include_pad: false,
        },
        Avg {
            count_include_pad: true,
        },
    ] {
        let op = pool(
            kind,
            &[5, 4],
            &[1, 1],
            PadSpec::Explicit(vec![2, 3, 1, 0]),
            false,
        );
        check(&op, std::slice::from_ref(&x), 0.0, "stride-1 pool");
    }
}
