//! Import of the ONNX operators computed by whole-tensor host ops with only attributes to read:
//! Einsum, MelWeightMatrix, TfIdfVectorizer and the training domain's optimizer steps.

use super::attrs::Attrs;
use super::builder::Mapped;
use super::ops::unsupported;
use cyb_graph::{HostOp, NodeOp, Optimizer, TfIdfMode, TfIdfSpec, ValueId};
use cyb_tensor::Result;

fn host(h: HostOp) -> NodeOp {
    NodeOp::Host(h)
}

pub(crate) fn map(name: &str, t: &str, a: &Attrs, ins: Vec<Option<ValueId>>) -> Result<Mapped> {
    match t {
        "Adagrad" => Ok((
            host(HostOp::Optimizer(Optimizer::Adagrad {
                decay_factor: a.f("decay_factor", 0.0),
                epsilon: a.f("epsilon", 1e-6),
                norm_coefficient: a.f("norm_coefficient", 0.0),
            })),
            ins,
        )),
        "Adam" => Ok((
            host(HostOp::Optimizer(Optimizer::Adam {
                alpha: a.f("alpha", 0.9),
                beta: a.f("beta", 0.999),
                epsilon: a.f("epsilon", 1e-6),
                norm_coefficient: a.f("norm_coefficient", 0.0),
                norm_coefficient_post: a.f("norm_coefficient_post", 0.0),
            })),
            ins,
        )),
        "Momentum" => {
            let nesterov = match a.s("mode").as_deref() {
                Some("nesterov") => true,
                Some("standard") | None => false,
                Some(m) => return Err(unsupported(name, t, &format!("mode {m:?}"))),
            };
            Ok((
                host(HostOp::Optimizer(Optimizer::Momentum {
                    alpha: a.f("alpha", 0.0),
                    beta: a.f("beta", 0.0),
                    norm_coefficient: a.f("norm_coefficient", 0.0),
                    nesterov,
                })),
                ins,
            ))
        }
        "TfIdfVectorizer" => {
            if a.has("pool_strings") {
                return Err(unsupported(name, t, "string pool (STRING tensors)"));
            }
            let mode = match a.s("mode").as_deref() {
                Some("TF") => TfIdfMode::Tf,
                Some("IDF") => TfIdfMode::Idf,
                Some("TFIDF") => TfIdfMode::TfIdf,
                m => return Err(unsupported(name, t, &format!("mode {m:?}"))),
            };
            let size = |k: &str| usize::try_from(a.i(k, 0)).unwrap_or(0);
            let spec = TfIdfSpec {
                mode,
                min_gram_length: size("min_gram_length"),
                max_gram_length: size("max_gram_length"),
                max_skip_count: size("max_skip_count"),
                ngram_counts: a.ints("ngram_counts").unwrap_or_default(),
                ngram_indexes: a.ints("ngram_indexes").unwrap_or_default(),
                pool: a.ints("pool_int64s").unwrap_or_default(),
                weights: a.floats("weights"),
            };
            Ok((host(HostOp::TfIdf(spec)), ins))
        }
        "MelWeightMatrix" => {
            let dtype = super::tensor::dtype_of(a.i("output_datatype", 1) as i32, name)?;
            Ok((host(HostOp::MelWeightMatrix { dtype }), ins))
        }
        "Einsum" => {
            let equation = a
                .s("equation")
                .ok_or_else(|| unsupported(name, t, "no equation"))?;
            Ok((host(HostOp::Einsum { equation }), ins))
        }
        other => Err(unsupported(name, other, "operator not supported")),
    }
}
