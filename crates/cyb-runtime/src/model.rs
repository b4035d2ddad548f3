//! `Model`: a loaded text model with its tokenizer and chat template. Cloning shares the
//! weights; each [`Generator`] has its own KV cache.

use crate::{ChatMessage, ChatTemplate, ExecPath, Generator, RenderOptions, Tokenizer};
use cyb_backend::Dispatcher;
use cyb_format::{ModelConfig, ModelFile};
use cyb_models::LlamaModel;
use cyb_tensor::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// What computes: a text generator (decoder), an encoder that embeds and classifies, or a
/// speech recognizer.
pub(crate) enum Net {
    Decoder(Box<LlamaModel>),
    Encoder(Box<crate::embed::Encoder>),
    Speech(Box<crate::transcribe::Transcriber>),
}

/// A loaded model. Cheap to clone.
#[derive(Clone)]
pub struct Model {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    config: ModelConfig,
    net: Net,
    tokenizer: Tokenizer,
    template: Option<ChatTemplate>,
    /// A vision-language model's tower and connector (the decoder is `net`).
    images: Option<Box<crate::vision::vlm::ImageSide>>,
    load_ms: f64,
    /// Last field, so it drops after the weights: then the backends let go of their copies.
    _release: ReleaseOnDrop,
}

/// Tells every backend of the chain, when dropped, to free what it kept for weights nobody
/// holds any more (device copies, repacked and panel forms), so dropping a model returns its
/// memory.
struct ReleaseOnDrop(Arc<Dispatcher>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0.release_unowned();
    }
}

impl Model {
    pub(crate) fn load(
        path: &Path,
        dispatcher: Arc<Dispatcher>,
        exec: ExecPath,
        lora: &[crate::Lora],
    ) -> Result<Model> {
        let t0 = Instant::now();
        let file = cyb_format::open(path)?;
        let generator_only = |what: &str| -> Result<()> {
            match lora.first() {
                Some(l) => Err(Error::InvalidConfig {
                    field: "lora".into(),
                    reason: format!(
                        "{}: LoRA adapters apply to LlamaStyle generators; {} is {what}",
                        l.path.display(),
                        path.display()
                    ),
                }),
                None => Ok(()),
            }
        };
        if cyb_models::WhisperConfig::is_whisper_file(&file) {
            if exec == ExecPath::Graph {
                return Err(Error::InvalidConfig {
                    field: "path".into(),
                    reason: format!(
                        "{}: Whisper runs on the curated path only; use --path curated or auto",
                        path.display()
                    ),
                });
            }
            generator_only("a Whisper model")?;
            return crate::transcribe::load_model(path, &file, dispatcher, t0);
        }
        if cyb_models::BertConfig::is_bert_file(&file) {
            if exec == ExecPath::Graph {
                return Err(Error::InvalidConfig {
                    field: "path".into(),
                    reason: format!(
                        "{}: the graph path has a template for LlamaStyle generators only \
                         (ONNX graphs run with `cyb-llm infer`); run encoders with --path \
                         curated or auto",
                        path.display()
                    ),
                });
            }
            generator_only("an encoder")?;
            return crate::embed_load::load_encoder(path, &file, dispatcher, t0);
        }
        if let cyb_format::ModelFile::HuggingFace(h) = &file {
            let ty = h.config_json().get("model_type").and_then(|v| v.as_str());
            if let Some(ty) = ty.filter(|t| cyb_models::VisionConfig::is_vision_type(t)) {
                return Err(Error::invalid(
                    "load",
                    format!(
                        "{} is a vision model ({ty}): use `cyb-llm classify-image`, `cyb-llm \
                         embed --image` or Runtime::load_image_model",
                        path.display()
                    ),
                ));
            }
        }
        if cyb_models::VlmConfig::is_vlm_file(&file) {
            generator_only("a vision-language model")?;
            if exec == ExecPath::Graph {
                return Err(Error::InvalidConfig {
                    field: "path".into(),
                    reason: format!(
                        "{}: vision-language models run on the curated path only; use --path \
                         curated or auto",
                        path.display()
                    ),
                });
            }
            return Model::load_vlm(path, &file, dispatcher, t0);
        }
        let config = file.config()?;
        let mut net = LlamaModel::load(&file, dispatcher.clone())?;
        for l in lora {
            net.add_lora(&l.path, l.scale)?;
        }
        if exec == ExecPath::Graph {
            net.use_graph_path()?;
        }
        let tokenizer = Tokenizer::from_model_file(&file)?;
        let template = ChatTemplate::from_model_file(&file)?;
        Ok(Model::from_parts(
            path,
            config,
            Net::Decoder(Box::new(net)),
            tokenizer,
            template,
            t0,
            dispatcher,
        ))
    }

    /// A vision-language model: the decoder as a text model, with its image side.
    fn load_vlm(
        path: &Path,
        file: &ModelFile,
        dispatcher: Arc<Dispatcher>,
        t0: Instant,
    ) -> Result<Model> {
        let parts = cyb_models::VlmModel::load(file, dispatcher.clone())?;
        let config = parts.text_file.config()?;
        let tokenizer = Tokenizer::from_model_file(&parts.text_file)?;
        let template = ChatTemplate::from_model_file(file)?;
        let ModelFile::HuggingFace(hf) = file else {
            return Err(Error::invalid(
                "load",
                format!("{}: not a Hugging Face model", path.display()),
            ));
        };
        let mut side = crate::vision::vlm::ImageSide::load(parts.image, hf)?;
        let token = side.image_token();
        let Some(text) = tokenizer.token_text(token) else {
            return Err(Error::Tokenizer {
                reason: format!(
                    "{}: the tokenizer has no image placeholder token {token}",
                    path.display()
                ),
            });
        };
        side.placeholder = text;
        let mut model = Model::from_parts(
            path,
            config,
            Net::Decoder(Box::new(parts.text)),
            tokenizer,
            template,
            t0,
            dispatcher,
        );
        if let Some(inner) = Arc::get_mut(&mut model.inner) {
            inner.images = Some(Box::new(side));
        }
        Ok(model)
    }

    /// The image side, for a vision-language model.
    pub(crate) fn image_side(&self) -> Option<&crate::vision::vlm::ImageSide> {
        self.inner.images.as_deref()
    }

    /// What a session serving `prompt` with `images` is matched by (a server's pool of idle
    /// sessions compares these, [`Generator::prompt_key`]): the prompt's ids, where a
    /// vision-language model's image placeholders stand each for a fingerprint of its image,
    /// so two prompts share a prefix only up to the first image they differ in. A fingerprint
    /// lies above every vocabulary's ids.
    ///
    /// [`Generator::prompt_key`]: crate::Generator::prompt_key
    pub fn prompt_key(&self, prompt: &[u32], images: &[cyb_media::image::RgbImage]) -> Vec<u32> {
        match self.image_side() {
            Some(side) => side.keyed(prompt, images),
            None => prompt.to_vec(),
        }
    }

    /// The ids of a prompt: `text` rendered by the chat template (`raw` false) or given as it
    /// is. Raw text gets the BOS the tokenizer adds. A vision-language model's rendered prompt
    /// gets it too unless the template wrote it, as its processor tokenizes the rendered text
    /// with special tokens.
    pub fn prompt_ids(&self, text: &str, raw: bool) -> Result<Vec<u32>> {
        let tok = &self.inner.tokenizer;
        let add = tok.add_bos()
            && (raw
                || (self.takes_images()
                    && !tok
                        .bos_id()
                        .and_then(|b| tok.token_text(b))
                        .is_some_and(|b| text.starts_with(&b))));
        tok.encode(text, add)
    }

    /// True for a vision-language model: prompts may carry images.
    pub fn takes_images(&self) -> bool {
        self.inner.images.is_some()
    }

    /// Assembles a loaded model (the encoder loader builds its parts elsewhere).
    pub(crate) fn from_parts(
        path: &Path,
        config: ModelConfig,
        net: Net,
        tokenizer: Tokenizer,
        template: Option<ChatTemplate>,
        t0: Instant,
        dispatcher: Arc<Dispatcher>,
    ) -> Model {
        Model {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                config,
                net,
                tokenizer,
                template,
                images: None,
                load_ms: t0.elapsed().as_secs_f64() * 1e3,
                _release: ReleaseOnDrop(dispatcher),
            }),
        }
    }

    /// The graph template that `--path graph` runs for a LlamaStyle file (GGUF or Hugging Face
    /// directory; no tokenizer needed): the logits of the last token when `last_only`, else
    /// of every token.
    pub fn template_graph(path: &Path, last_only: bool) -> Result<cyb_graph::Graph> {
        let file = cyb_format::open(path)?;
        LlamaModel::load(&file, Arc::new(Dispatcher::reference()))?.template_graph(last_only)
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

    /// The decoder; an encoder model is an error that says what it can do instead.
    /// The same loaded model (clones share it).
    pub fn same_as(&self, other: &Model) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The LoRA adapters applied to this generator (file, default scale), in load order; none
    /// for other models.
    pub fn lora_adapters(&self) -> Vec<(PathBuf, f32)> {
        self.loras()
            .iter()
            .map(|(a, s)| (a.path().to_path_buf(), *s))
            .collect()
    }

    /// How many LoRA adapters the generator applies (the length of a session's scales).
    pub fn lora_count(&self) -> usize {
        self.loras().len()
    }

    fn loras(&self) -> &[(Arc<cyb_models::LoraAdapter>, f32)] {
        match &self.inner.net {
            Net::Decoder(n) => n.loras(),
            _ => &[],
        }
    }

    pub(crate) fn net(&self) -> Result<&LlamaModel> {
        match &self.inner.net {
            Net::Decoder(n) => Ok(n),
            Net::Encoder(_) => Err(Error::invalid(
                "generate",
                format!(
                    "{} is an encoder ({}): it embeds and classifies text but cannot generate \
                     it (use `cyb-llm embed` / `classify` or /v1/embeddings)",
                    self.inner.path.display(),
                    self.inner.config.architecture
                ),
            )),
            Net::Speech(_) => Err(Error::invalid(
                "generate",
                format!(
                    "{} is a speech recognizer ({}): it transcribes audio but does not generate \
                     text from a prompt (use `cyb-llm transcribe` or /v1/audio/transcriptions)",
                    self.inner.path.display(),
                    self.inner.config.architecture
                ),
            )),
        }
    }

    /// The encoder, when this is one (`None` for a text generator).
    pub(crate) fn encoder(&self) -> Option<&crate::embed::Encoder> {
        match &self.inner.net {
            Net::Encoder(e) => Some(e),
            Net::Decoder(_) | Net::Speech(_) => None,
        }
    }

    /// The speech recognizer, when this is one.
    pub fn transcriber(&self) -> Option<&crate::transcribe::Transcriber> {
        match &self.inner.net {
            Net::Speech(t) => Some(t),
            Net::Decoder(_) | Net::Encoder(_) => None,
        }
    }

    /// True for a speech recognizer (Whisper): [`transcribe`](Model::transcribe) works.
    pub fn is_speech(&self) -> bool {
        matches!(self.inner.net, Net::Speech(_))
    }

    /// Transcribes (or translates) 16 kHz mono `samples`, calling `on_segment` with each
    /// segment as it is decoded (return `false` to stop); a model that is not a speech
    /// recognizer is an error.
    pub fn transcribe(
        &self,
        samples: &[f32],
        opts: &crate::transcribe::TranscribeOptions,
        on_segment: &mut dyn FnMut(
            &crate::transcribe::Segment,
            crate::transcribe::Progress,
        ) -> bool,
    ) -> Result<crate::transcribe::Transcript> {
        self.speech()?.transcribe(samples, opts, on_segment)
    }

    /// The speech recognizer, or an error naming what this model is.
    pub fn speech(&self) -> Result<&crate::transcribe::Transcriber> {
        self.transcriber().ok_or_else(|| {
            Error::invalid(
                "transcribe",
                format!(
                    "{} is a {} model, not a speech recognizer (Whisper)",
                    self.inner.path.display(),
                    self.inner.config.architecture
                ),
            )
        })
    }

    /// True for an encoder (BERT-style) model: [`embed`](Model::embed) and
    /// [`classify`](Model::classify) work, generation does not.
    pub fn is_encoder(&self) -> bool {
        matches!(self.inner.net, Net::Encoder(_))
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
    /// capped at 4096 to bound memory). A context beyond the one the model was trained for is
    /// refused (see [`Model::check_context`]); [`Model::generator_beyond_context`] allows it.
    pub fn generator(&self, ctx: Option<usize>) -> Result<Generator> {
        let ctx = ctx.unwrap_or_else(|| self.context_length().min(4096));
        self.check_context(ctx, false)?;
        Generator::new(self.clone(), ctx)
    }

    /// [`Model::generator`] that allows a context past the trained one (positions the model
    /// never saw: quality degrades, but it runs).
    pub fn generator_beyond_context(&self, ctx: usize) -> Result<Generator> {
        self.check_context(ctx, true)?;
        Generator::new(self.clone(), ctx)
    }

    /// Checks a session context of `ctx` tokens before anything is sized by it: at least one
    /// token; within the trained context unless `allow_overflow` (or the config declares RoPE
    /// scaling, which is how a longer context is asked for); and a KV cache that fits the
    /// memory available now, else `OutOfMemory` with the bytes it would take.
    pub fn check_context(&self, ctx: usize, allow_overflow: bool) -> Result<()> {
        if ctx == 0 {
            return Err(Error::InvalidConfig {
                field: "ctx".into(),
                reason: "the context must hold at least one token".into(),
            });
        }
        let c = &self.inner.config;
        let trained = self.context_length();
        if ctx > trained && !allow_overflow && c.rope_scaling.is_none() {
            return Err(Error::InvalidConfig {
                field: "ctx".into(),
                reason: format!(
                    "{ctx} tokens exceeds the {trained} this model was trained for (allow it \
                     with --ctx-overflow allow)"
                ),
            });
        }
        // Keys and values, f32, every layer.
        let bytes = (c.num_layers as u128)
            * (c.num_kv_heads as u128)
            * (c.head_dim as u128)
            * (ctx as u128)
            * 8;
        let on_host = self
            .net()
            .map(|n| n.dispatcher().primary().host_memory())
            .unwrap_or(true);
        if on_host {
            cyb_tensor::memory::check_host_bytes(|| format!("a KV cache of {ctx} tokens"), bytes)?;
        }
        Ok(())
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
