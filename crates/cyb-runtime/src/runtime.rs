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
    /// The preferred backend by name (`cyb-llm backends` lists them); `auto` picks a GPU when
    /// there is a discrete or integrated one, else cpu ([`auto_backend`]); `None` is cpu.
    pub backend: Option<String>,
    pub path: ExecPath,
    /// The cpu backend's options (`None`: `CpuOptions::from_env`, the defaults unless its
    /// environment variables are set).
    pub cpu: Option<cyb_cpu::CpuOptions>,
    /// The wgpu backend's options (`None`: `WgpuOptions::from_env`).
    #[cfg(feature = "wgpu")]
    pub wgpu: Option<cyb_wgpu::WgpuOptions>,
}

impl RuntimeOptions {
    /// The cpu backend these options describe.
    pub fn cpu_backend(&self) -> Result<Arc<dyn Backend>> {
        let options = match &self.cpu {
            Some(o) => o.clone(),
            None => cyb_cpu::CpuOptions::from_env()?,
        };
        Ok(Arc::new(cyb_cpu::CpuBackend::from_options(&options)?))
    }

    /// The backend called `name`, made from these options where it has any.
    fn backend(&self, name: &str) -> Result<Arc<dyn Backend>> {
        match name {
            "cpu" => self.cpu_backend(),
            #[cfg(feature = "wgpu")]
            "wgpu" | "wgpu+rs" => {
                let options = match &self.wgpu {
                    Some(o) => o.clone(),
                    None => cyb_wgpu::WgpuOptions::from_env()?,
                };
                Ok(Arc::new(cyb_wgpu::WgpuBackend::from_options(&options)?))
            }
            other => create_backend(other),
        }
    }
}

/// Which backend a runtime runs on, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendChoice {
    pub name: String,
    pub reason: String,
}

/// What `--backend auto` picks here: wgpu on the first discrete GPU (else integrated GPU)
/// adapter of a native API (Vulkan, Metal, DX12), else cpu. Software adapters (lavapipe,
/// llvmpipe) and GL are never picked.
pub fn auto_backend() -> BackendChoice {
    #[cfg(feature = "wgpu")]
    if let Some(a) = cyb_wgpu::auto_adapter() {
        return BackendChoice {
            name: "wgpu".into(),
            reason: format!(
                "{} is a {} GPU adapter ({})",
                a.name,
                gpu_kind(&a),
                a.backend
            ),
        };
    }
    BackendChoice {
        name: "cpu".into(),
        reason: "no discrete or integrated GPU adapter (Vulkan, Metal or DX12) was found; \
                 software adapters are not picked"
            .into(),
    }
}

#[cfg(feature = "wgpu")]
fn gpu_kind(a: &cyb_wgpu::AdapterReport) -> &'static str {
    match a.device_type.as_str() {
        "DiscreteGpu" => "discrete",
        "IntegratedGpu" => "integrated",
        _ => "hardware",
    }
}

/// Loads models and owns the dispatcher their ops run through.
pub struct Runtime {
    dispatcher: Arc<Dispatcher>,
    options: RuntimeOptions,
    choice: BackendChoice,
}

impl Runtime {
    /// A runtime with the chosen backend first and the CPU reference as the last fallback.
    /// A backend that cannot run here is an `Error::BackendInit` saying why.
    pub fn new(options: RuntimeOptions) -> Result<Runtime> {
        let mut chain: Vec<Arc<dyn Backend>> = Vec::new();
        register_builtin();
        // The fast CPU backend is the default; `--backend reference` runs the reference alone.
        let mut choice = match options.backend.as_deref().unwrap_or("cpu") {
            "auto" => auto_backend(),
            name => BackendChoice {
                name: name.to_string(),
                reason: "asked for".into(),
            },
        };
        let auto = options.backend.as_deref() == Some("auto");
        let b = match options.backend(&choice.name) {
            // A GPU auto picked that does not open leaves the cpu backend, saying why.
            Err(e) if auto && choice.name != "cpu" => {
                choice = BackendChoice {
                    name: "cpu".into(),
                    reason: format!("{} was picked but did not open: {e}", choice.name),
                };
                options.backend("cpu")?
            }
            other => other?,
        };
        tracing::info!(backend = %choice.name, reason = %choice.reason, "backend chosen");
        // Ops a device backend lacks fall back to the fast CPU kernels before the reference.
        let device = !b.host_memory();
        if b.name() != "reference" {
            chain.push(b);
        }
        if device {
            chain.push(options.cpu_backend()?);
        }
        Ok(Runtime {
            dispatcher: Arc::new(Dispatcher::new(chain)),
            options,
            choice,
        })
    }

    /// The backend this runtime runs on and why (for `auto`, what it found).
    pub fn backend_choice(&self) -> &BackendChoice {
        &self.choice
    }

    /// A runtime whose ops go to `backends` in order of preference (the CPU reference is
    /// always the last fallback): for a chain other than what `Runtime::new` builds, e.g. two
    /// cpu backends of different activation widths compared side by side.
    pub fn with_backends(backends: Vec<Arc<dyn Backend>>, options: RuntimeOptions) -> Runtime {
        let choice = BackendChoice {
            name: backends
                .first()
                .map_or_else(|| "reference".to_string(), |b| b.name().to_string()),
            reason: "the chain given".into(),
        };
        Runtime {
            dispatcher: Arc::new(Dispatcher::new(backends)),
            options,
            choice,
        }
    }

    /// Every backend this build knows and whether it can run here (the built-in ones
    /// registered first).
    pub fn available_backends() -> Vec<cyb_backend::BackendDescription> {
        register_builtin();
        cyb_backend::available_backends()
    }

    /// The GPU adapters wgpu finds here, one line each with their limits (none in a build
    /// without the `wgpu` feature).
    pub fn wgpu_adapters() -> Vec<String> {
        #[cfg(feature = "wgpu")]
        return cyb_wgpu::describe_adapters();
        #[cfg(not(feature = "wgpu"))]
        Vec::new()
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
        self.load_with_lora(path, &[])
    }

    /// [`Runtime::load`] with LoRA adapters applied at run time (LlamaStyle generators only;
    /// see [`Lora`]).
    pub fn load_with_lora(&self, path: impl AsRef<Path>, lora: &[Lora]) -> Result<Model> {
        Model::load(
            path.as_ref(),
            self.dispatcher.clone(),
            self.options.path,
            lora,
        )
    }
}

/// A LoRA adapter to apply to a generator, unmerged: a llama.cpp GGUF adapter or a PEFT
/// directory, used at `scale` (1 as trained) unless a session sets its own scales.
#[derive(Clone, Debug, PartialEq)]
pub struct Lora {
    pub path: std::path::PathBuf,
    pub scale: f32,
}

/// Registers the backends this build has with cyb-backend's registry (for `cyb-llm backends`
/// and `create_backend`).
fn register_builtin() {
    cyb_cpu::register();
    #[cfg(feature = "wgpu")]
    cyb_wgpu::register();
}
