//! `Runtime`: the backend chain and options shared by every model it loads.

use crate::Model;
use cyb_backend::{create_backend, Backend, Dispatcher};
use cyb_tensor::{Error, Result};
use std::path::Path;
use std::sync::Arc;

/// Which code runs a model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExecPath {
    /// Curated family code when the architecture is known, else the graph path.
    #[default]
    Auto,
    /// Hand-written family code (`cyb-models`).
    Curated,
    /// The graph executor over a graph IR.
    Graph,
}

impl ExecPath {
    /// Parses `auto`, `curated` or `graph`.
    pub fn parse(s: &str) -> Result<ExecPath> {
        match s {
            "auto" => Ok(ExecPath::Auto),
            "curated" => Ok(ExecPath::Curated),
            "graph" => Ok(ExecPath::Graph),
            other => Err(Error::InvalidConfig {
                field: "path".into(),
                reason: format!("unknown execution path {other:?}; use auto, curated or graph"),
            }),
        }
    }
}

/// Options of a [`Runtime`].
#[derive(Clone, Debug, Default)]
pub struct RuntimeOptions {
    /// The preferred backend by name (`cyb-llm backends` lists them); `None` picks the default.
    pub backend: Option<String>,
    pub path: ExecPath,
}

/// Loads models and owns the dispatcher their ops run through.
pub struct Runtime {
    dispatcher: Arc<Dispatcher>,
    options: RuntimeOptions,
}

impl Runtime {
    /// A runtime with the chosen backend first and the CPU reference as the last fallback.
    /// A backend that cannot run here is an `Error::BackendInit` saying why.
    pub fn new(options: RuntimeOptions) -> Result<Runtime> {
        let mut chain: Vec<Arc<dyn Backend>> = Vec::new();
        cyb_cpu::register();
        cyb_wgpu::register();
        // The fast CPU backend is the default; `--backend reference` runs the reference alone.
        let default = cyb_backend::is_registered("cpu").then(|| "cpu".to_string());
        if let Some(name) = options.backend.clone().or(default) {
            let b = create_backend(&name)?;
            let gpu = b.name() == "wgpu";
            if b.name() != "reference" {
                chain.push(b);
            }
            // Ops the GPU lacks fall back to the fast CPU kernels before the reference.
            if gpu && cyb_backend::is_registered("cpu") {
                chain.push(create_backend("cpu")?);
            }
        }
        Ok(Runtime {
            dispatcher: Arc::new(Dispatcher::new(chain)),
            options,
        })
    }

    /// A runtime whose ops go to `backends` in order of preference (the CPU reference is
    /// always the last fallback): for a backend configured beyond what its name selects, e.g.
    /// `cyb_cpu::CpuBackend::with_activations` with another thread count or activation width.
    pub fn with_backends(backends: Vec<Arc<dyn Backend>>, options: RuntimeOptions) -> Runtime {
        Runtime {
            dispatcher: Arc::new(Dispatcher::new(backends)),
            options,
        }
    }

    /// Every backend this build knows and whether it can run here (the built-in ones
    /// registered first).
    pub fn available_backends() -> Vec<cyb_backend::BackendDescription> {
        cyb_cpu::register();
        cyb_wgpu::register();
        cyb_backend::available_backends()
    }

    /// The GPU adapters wgpu finds here, one line each with their limits.
    pub fn wgpu_adapters() -> Vec<String> {
        cyb_wgpu::describe_adapters()
    }

    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.dispatcher
    }

    pub fn options(&self) -> &RuntimeOptions {
        &self.options
    }

    /// Loads a model file (GGUF) or directory (Hugging Face): weights stay in the file
    /// mapping, the tokenizer and chat template come from the same source.
    pub fn load(&self, path: impl AsRef<Path>) -> Result<Model> {
        Model::load(path.as_ref(), self.dispatcher.clone(), self.options.path)
    }
}
