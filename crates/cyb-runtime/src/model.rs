//! `Model`: a loaded text model with its tokenizer and chat template. Cloning shares the
//! weights; each [`Generator`] has its own KV cache.

use crate::{ChatMessage, ChatTemplate, Generator, RenderOptions, Tokenizer};
use cyb_backend::Dispatcher;
use cyb_format::{ModelConfig, ModelFile};
use cyb_models::LlamaModel;
use cyb_tensor::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// A loaded model. Cheap to clone.
#[derive(Clone)]
pub struct Model {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    config: ModelConfig,
    net: LlamaModel,
    tokenizer: Tokenizer,
    template: Option<ChatTemplate>,
    load_ms: f64,
}

impl Model {
    pub(crate) fn load(path: &Path, dispatcher: Arc<Dispatcher>) -> Result<Model> {
        let t0 = Instant::now();
        let file = cyb_format::open(path)?;
        let config = file.config()?;
        let net = LlamaModel::load(&file, dispatcher)?;
        let tokenizer = Tokenizer::from_model_file(&file)?;
        let template = ChatTemplate::from_model_file(&file)?;
        Ok(Model {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                config,
                net,
                tokenizer,
                template,
                load_ms: t0.elapsed().as_secs_f64() * 1e3,
            }),
        })
    }

    /// Opens the file only to describe it (no weights checked); see `cyb_format::open`.
    pub fn open_file(path: &Path) -> Result<ModelFile> {
        cyb_format::open(path)
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub fn config(&self) -> &ModelConfig {
        &self.inner.config
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.inner.tokenizer
    }

    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.inner.template.as_ref()
    }

    pub(crate) fn net(&self) -> &LlamaModel {
        &self.inner.net
    }

    /// Milliseconds spent in `Runtime::load`.
    pub fn load_ms(&self) -> f64 {
        self.inner.load_ms
    }

    /// The context length the model was trained for (the default session size is capped by it).
    pub fn context_length(&self) -> usize {
        let c = &self.inner.config;
        c.context_length.or(c.max_position).unwrap_or(2048).max(1)
    }

    /// A new session with its own KV cache of `ctx` tokens (`None`: the model's context length,
    /// capped at 4096 to bound memory).
    pub fn generator(&self, ctx: Option<usize>) -> Result<Generator> {
        let ctx = ctx.unwrap_or_else(|| self.context_length().min(4096));
        if ctx == 0 {
            return Err(Error::InvalidConfig {
                field: "ctx".into(),
                reason: "the context must hold at least one token".into(),
            });
        }
        Generator::new(self.clone(), ctx)
    }

    /// The chat template applied to `messages`, ready to tokenize. Without a template the
    /// messages' contents are joined by newlines (a raw prompt).
    pub fn render_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String> {
        match &self.inner.template {
            Some(t) => t.render(
                messages,
                &RenderOptions {
                    add_generation_prompt,
                    ..RenderOptions::default()
                },
            ),
            None => Ok(messages
                .iter()
                .filter_map(|m| m.content.clone())
                .collect::<Vec<_>>()
                .join("\n")),
        }
    }
}
