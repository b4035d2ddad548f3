//! Runs one case on one target and compares it with the reference.

use crate::{Case, Target};
use cyb_backend::Dispatcher;
use cyb_tensor::{Result, Tensor, TensorInfo};
use std::sync::Arc;

/// What a target did with a case.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// Ran on the target and matched the reference.
    Native,
    /// The target declined it (`supports` false, or `execute` declined): the dispatcher would
    /// send it further along the chain.
    FellBack,
    /// Ran on the target and gave an error or a wrong result.
    Failed(String),
}

/// The reference's outputs of `case`.
pub fn reference(case: &Case) -> Result<Vec<Tensor>> {
    cyb_ops::reference::execute(&case.op, &case.inputs)
}

/// Runs `case` on `target` and checks it against `want` (the reference's outputs).
pub fn run_case(target: &Target, case: &Case, want: &[Tensor]) -> Outcome {
    let infos: Vec<TensorInfo> = case.inputs.iter().map(Tensor::info).collect();
    if !target.backend.supports(&case.op, &infos) {
        return Outcome::FellBack;
    }
    let got = match outputs(&target.backend, case) {
        Ok(Some(got)) => got,
        Ok(None) => return Outcome::FellBack,
        Err(e) => return Outcome::Failed(format!("error: {e}")),
    };
    if let Err(e) = compare(&got, want, case.tol) {
        return Outcome::Failed(e);
    }
    if let Some(twin) = &target.twin {
        match outputs(twin, case) {
            Ok(Some(one)) => {
                if !bit_identical(&got, &one) {
                    return Outcome::Failed("1 and 3 threads give different bits".into());
                }
            }
            Ok(None) => return Outcome::Failed("declined with 1 thread only".into()),
            Err(e) => return Outcome::Failed(format!("error with 1 thread: {e}")),
        }
    }
    Outcome::Native
}

/// The outputs on the host, or `None` when the backend declined at `execute`.
fn outputs(backend: &Arc<dyn cyb_backend::Backend>, case: &Case) -> Result<Option<Vec<Tensor>>> {
    let d = Dispatcher::new(vec![backend.clone()]);
    let out = d.run(&case.op, &case.inputs)?;
    if !d.log().fallbacks.is_empty() {
        return Ok(None);
    }
    out.iter()
        .map(|t| d.to_host(t))
        .collect::<Result<_>>()
        .map(Some)
}

/// Each output's dims and dtype equal, values within `tol` (`max|a - b| / max|b|`; integer and
/// boolean outputs exactly).
pub fn compare(got: &[Tensor], want: &[Tensor], tol: f32) -> std::result::Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} outputs, reference {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g.dims() != w.dims() || g.dtype() != w.dtype() {
            return Err(format!(
                "output {i} is {} {:?}, reference {} {:?}",
                g.dtype(),
                g.dims(),
                w.dtype(),
                w.dims()
            ));
        }
        let exact = !w.dtype().is_float();
        let (g, w) = (
            g.to_f32_vec().map_err(|e| e.to_string())?,
            w.to_f32_vec().map_err(|e| e.to_string())?,
        );
        let e = rel_err(&g, &w);
        let tol = if exact { 0.0 } else { tol };
        if e > tol {
            return Err(format!("output {i}: relative error {e:.3e} > {tol:.0e}"));
        }
    }
    Ok(())
}

/// `max|a - b| / max|b|` (NaN where one is NaN and the other not: infinite; both NaN or equal
/// infinities: no difference).
pub fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    if got.len() != want.len() {
        return f32::INFINITY;
    }
    let scale = want
        .iter()
        .filter(|v| v.is_finite())
        .fold(0f32, |m, v| m.max(v.abs()));
    let diff = got.iter().zip(want).fold(0f32, |m, (a, b)| {
        if a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()) || a == b {
            m
        } else if !a.is_finite() || !b.is_finite() {
            f32::INFINITY
        } else {
            m.max((a - b).abs())
        }
    });
    if diff == 0.0 {
        0.0
    } else {
        diff / scale.max(f32::MIN_POSITIVE)
    }
}

fn bit_identical(a: &[Tensor], b: &[Tensor]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.dtype() == y.dtype() && x.host_bytes() == y.host_bytes())
}
