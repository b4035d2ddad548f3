//! Backends by name, as the CLI's `--backend` and `cyb-llm backends` see them.

use crate::{Backend, ReferenceBackend};
use cyb_tensor::{Error, Result};
use std::sync::Arc;

/// One backend and whether this build and machine can run it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendDescription {
    pub name: &'static str,
    pub available: bool,
    /// What it is, or why it cannot be used here.
    pub detail: String,
}

/// Every backend name cyb-llm knows, in the default preference order.
pub fn available_backends() -> Vec<BackendDescription> {
    let mut v = vec![BackendDescription {
        name: "reference",
        available: true,
        detail: "portable CPU reference (cyb-ops); the oracle and last fallback of every chain"
            .into(),
    }];
    for name in ["cpu", "wgpu", "cuda", "honeycrisp", "nox"] {
        v.push(BackendDescription {
            name,
            available: false,
            detail: unavailable_reason(name).to_string(),
        });
    }
    v
}

fn unavailable_reason(name: &str) -> &'static str {
    match name {
        "cpu" => "the fast CPU backend (SIMD kernels) is not part of this build yet",
        "wgpu" => "the wgpu GPU backend is not part of this build yet",
        "cuda" => "the CUDA backend is not part of this build (it will sit behind the `cuda` cargo feature)",
        "honeycrisp" => "honeycrisp (Metal + Apple Neural Engine) runs only on macOS on Apple silicon",
        "nox" => "nox is not available: it needs the Nox runtime, which does not exist for this platform",
        _ => "unknown backend",
    }
}

/// The backend called `name`, or a `BackendInit` error saying why it cannot be used.
pub fn create_backend(name: &str) -> Result<Arc<dyn Backend>> {
    match name {
        "reference" | "ref" => Ok(Arc::new(ReferenceBackend)),
        known @ ("cpu" | "wgpu" | "wgpu+rs" | "cuda" | "honeycrisp" | "nox") => {
            let key = if known == "wgpu+rs" { "wgpu" } else { known };
            Err(Error::BackendInit {
                backend: key.to_string(),
                reason: unavailable_reason(key).to_string(),
            })
        }
        other => Err(Error::BackendInit {
            backend: other.to_string(),
            reason: format!(
                "unknown backend; known: {}",
                available_backends()
                    .iter()
                    .map(|b| b.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}
