//! Backends by name, as the CLI's `--backend` and `cyb-llm backends` see them.
//!
//! Backend crates sit below this one's users but depend on it for the trait, so they cannot be
//! named here; instead each registers a factory at start-up ([`register_backend`], called by
//! cyb-runtime), and a registered backend is "available".

use crate::{Backend, ReferenceBackend};
use cyb_tensor::{Error, Result};
use std::sync::{Arc, PoisonError, RwLock};

/// Makes a backend; an `Error::BackendInit` says why it cannot run here.
pub type BackendFactory = fn() -> Result<Arc<dyn Backend>>;

struct Registered {
    name: &'static str,
    detail: &'static str,
    factory: BackendFactory,
}

static REGISTERED: RwLock<Vec<Registered>> = RwLock::new(Vec::new());

/// Makes `name` available to [`create_backend`]; registering a name again replaces it.
pub fn register_backend(name: &'static str, detail: &'static str, factory: BackendFactory) {
    let mut r = REGISTERED.write().unwrap_or_else(PoisonError::into_inner);
    r.retain(|b| b.name != name);
    r.push(Registered {
        name,
        detail,
        factory,
    });
}

/// True if a backend called `name` has been registered.
pub fn is_registered(name: &str) -> bool {
    let r = REGISTERED.read().unwrap_or_else(PoisonError::into_inner);
    r.iter().any(|b| b.name == name)
}

fn registered(name: &str) -> Option<(&'static str, BackendFactory)> {
    let r = REGISTERED.read().unwrap_or_else(PoisonError::into_inner);
    r.iter()
        .find(|b| b.name == name)
        .map(|b| (b.detail, b.factory))
}

/// One backend and whether this build and machine can run it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendDescription {
    pub name: &'static str,
    pub available: bool,
    /// What it is, or why it cannot be used here.
    pub detail: String,
}

/// Every backend name cyb-llm knows: the reference, then the others in preference order (the
/// first registered one is the default).
pub fn available_backends() -> Vec<BackendDescription> {
    let mut v = vec![BackendDescription {
        name: "reference",
        available: true,
        detail: "portable CPU reference (cyb-ops); the oracle and last fallback of every chain \
                 (`--backend reference` runs only it)"
            .into(),
    }];
    for name in ["cpu", "wgpu", "cuda", "honeycrisp", "nox"] {
        let (available, detail) = match registered(name) {
            Some((detail, _)) => (true, detail.to_string()),
            None => (false, unavailable_reason(name).to_string()),
        };
        v.push(BackendDescription {
            name,
            available,
            detail,
        });
    }
    v
}

fn unavailable_reason(name: &str) -> &'static str {
    match name {
        "cpu" => "the fast CPU backend (cyb-cpu) was not registered by this program",
        "wgpu" => "this build has no wgpu backend (built without the `wgpu` cargo feature)",
        "cuda" => "the CUDA backend is not part of this build (it will sit behind the `cuda` cargo feature)",
        "honeycrisp" => "honeycrisp (Metal + Apple Neural Engine) runs only on macOS on Apple silicon",
        "nox" => "nox is not available: it needs the Nox runtime, which does not exist for this platform",
        _ => "unknown backend",
    }
}

/// The backend called `name`, or a `BackendInit` error saying why it cannot be used.
pub fn create_backend(name: &str) -> Result<Arc<dyn Backend>> {
    let key = if name == "wgpu+rs" { "wgpu" } else { name };
    if let Some((_, factory)) = registered(key) {
        return factory();
    }
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
