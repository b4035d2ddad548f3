//! The models a server knows, loaded or not. A model given at start or loaded at run time
//! (`POST /v1/models/load`) stays known until `POST /v1/models/unload`; one that can be
//! loaded again (it came from a file the loader can read) may be unloaded when idle past
//! `ServerConfig::idle_unload` or to make room under `ServerConfig::memory_budget`, and is
//! loaded again by the next request that names it.

use crate::config::{ModelLoader, ServedModel, ServerConfig};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::pool::ModelSlot;
use axum::http::StatusCode;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What a model answers, known without loading it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Generator,
    Encoder,
    Speech,
}

impl Kind {
    fn of(model: &cyb_runtime::Model) -> Kind {
        if model.is_speech() {
            Kind::Speech
        } else if model.is_encoder() {
            Kind::Encoder
        } else {
            Kind::Generator
        }
    }
}

/// Why a model left memory (the label of `cyb_model_unloads_total`).
#[derive(Clone, Copy, Debug)]
pub enum UnloadReason {
    Request,
    Idle,
    Budget,
}

impl UnloadReason {
    pub fn label(self) -> &'static str {
        match self {
            UnloadReason::Request => "request",
            UnloadReason::Idle => "idle",
            UnloadReason::Budget => "budget",
        }
    }
}

struct Entry {
    id: String,
    /// What the loader takes to load this model again; `None`: it cannot be reloaded, so it
    /// is never unloaded for being idle or for room.
    source: Option<String>,
    kind: Kind,
    /// The size of the model's files, what it counts against the memory budget.
    bytes: u64,
    ctx: usize,
    slot: Option<Arc<ModelSlot>>,
    last_used: Instant,
}

impl Entry {
    /// Loaded and not held by any request (the registry holds the only reference).
    fn unused(&self) -> bool {
        self.slot
            .as_ref()
            .is_some_and(|s| Arc::strong_count(s) == 1)
    }
}

/// One known model, as `GET /v1/models` shows it.
pub struct ModelInfo {
    pub id: String,
    pub loaded: bool,
    pub bytes: u64,
    pub ctx: usize,
    pub slot: Option<Arc<ModelSlot>>,
}

pub struct Registry {
    entries: Mutex<Vec<Entry>>,
    loader: Option<ModelLoader>,
    /// One load at a time, so two requests for an unloaded model load it once.
    loading: tokio::sync::Mutex<()>,
    config: ServerConfig,
}

impl Registry {
    /// The registry of `models`, all loaded; their files must fit the memory budget.
    pub fn new(
        models: Vec<ServedModel>,
        config: &ServerConfig,
        loader: Option<ModelLoader>,
    ) -> Result<Registry, String> {
        let mut entries = Vec::new();
        for served in models {
            if entries.iter().any(|e: &Entry| e.id == served.id) {
                return Err(format!(
                    "two models have the id {:?}; give one another with --alias",
                    served.id
                ));
            }
            entries.push(new_entry(served, config).map_err(|e| e.message)?);
        }
        let total: u64 = entries.iter().map(|e| e.bytes).sum();
        if let Some(budget) = config.memory_budget.filter(|&b| total > b) {
            return Err(format!(
                "the models take {} MiB, more than the memory budget of {} MiB",
                total >> 20,
                budget >> 20
            ));
        }
        Ok(Registry {
            entries: Mutex::new(entries),
            loader,
            loading: tokio::sync::Mutex::new(()),
            config: config.clone(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every known model, in the order they became known.
    pub fn list(&self) -> Vec<ModelInfo> {
        self.lock()
            .iter()
            .map(|e| ModelInfo {
                id: e.id.clone(),
                loaded: e.slot.is_some(),
                bytes: e.bytes,
                ctx: e.ctx,
                slot: e.slot.clone(),
            })
            .collect()
    }

    /// The loaded models.
    pub fn loaded(&self) -> Vec<Arc<ModelSlot>> {
        self.lock().iter().filter_map(|e| e.slot.clone()).collect()
    }

    /// The id of the first known model of `kind` (`None` for any kind).
    pub fn first_of(&self, kind: Option<Kind>) -> Option<String> {
        self.lock()
            .iter()
            .find(|e| kind.is_none_or(|k| e.kind == k))
            .map(|e| e.id.clone())
    }

    pub fn kind_of(&self, id: &str) -> Option<Kind> {
        self.lock().iter().find(|e| e.id == id).map(|e| e.kind)
    }

    /// The model `id`, loading it again if it was unloaded for being idle or for room.
    pub async fn get(&self, id: &str, metrics: &Metrics) -> Result<Arc<ModelSlot>, ApiError> {
        if let Some(slot) = self.touch(id)? {
            return Ok(slot);
        }
        let _one = self.loading.lock().await;
        // Another request may have loaded it while this one waited.
        if let Some(slot) = self.touch(id)? {
            return Ok(slot);
        }
        let source = self
            .lock()
            .iter()
            .find(|e| e.id == id)
            .and_then(|e| e.source.clone())
            .ok_or_else(|| ApiError::model_not_found(id))?;
        let served = self.load_source(&source, Some(id.to_string())).await?;
        self.admit(served, Some(source), metrics)
    }

    /// A loaded model's slot (marking it used), `None` when it is known but unloaded.
    fn touch(&self, id: &str) -> Result<Option<Arc<ModelSlot>>, ApiError> {
        let mut entries = self.lock();
        let entry = entries
            .iter_mut()
            .find(|e| e.id == id)
            .ok_or_else(|| ApiError::model_not_found(id))?;
        entry.last_used = Instant::now();
        Ok(entry.slot.clone())
    }

    /// `POST /v1/models/load`: loads `source` (a file, directory or hub name the loader
    /// understands) as `id`. A known model (named by its id, or by the source it came from)
    /// is loaded again if it was unloaded; an id taken by another model is a conflict.
    /// Returns the id and whether the model was loaded already.
    pub async fn load(
        &self,
        source: &str,
        id: Option<String>,
        metrics: &Metrics,
    ) -> Result<(String, bool), ApiError> {
        let known = {
            let entries = self.lock();
            let same = |e: &Entry| e.id == source || e.source.as_deref() == Some(source);
            match &id {
                Some(id) => entries
                    .iter()
                    .find(|e| &e.id == id)
                    .map(|e| (e.id.clone(), same(e))),
                None => entries
                    .iter()
                    .find(|e| same(e))
                    .map(|e| (e.id.clone(), true)),
            }
        };
        match known {
            Some((known, true)) => {
                let was_loaded = self.touch(&known)?.is_some();
                self.get(&known, metrics).await?;
                return Ok((known, was_loaded));
            }
            Some((known, false)) => return Err(id_taken(&known)),
            None => {}
        }
        let _one = self.loading.lock().await;
        let served = self.load_source(source, id).await?;
        let id = served.id.clone();
        if self.kind_of(&id).is_some() {
            return Err(id_taken(&id));
        }
        self.admit(served, Some(source.to_string()), metrics)?;
        Ok((id, false))
    }

    /// Runs the loader on a blocking thread.
    async fn load_source(&self, source: &str, id: Option<String>) -> Result<ServedModel, ApiError> {
        let loader = self.loader.clone().ok_or_else(|| {
            ApiError::server("this server cannot load models (it was built without a loader)")
        })?;
        let source = source.to_string();
        let served = tokio::task::spawn_blocking(move || loader(&source))
            .await
            .map_err(|e| ApiError::server(format!("the load task failed: {e}")))?
            .map_err(|reason| {
                ApiError::invalid("model", format!("cannot load the model: {reason}"))
                    .with_code("model_load_failed")
            })?;
        Ok(match id {
            Some(id) => ServedModel { id, ..served },
            None => served,
        })
    }

    /// Makes room for `served` under the memory budget and enters it (replacing the unloaded
    /// entry of the same id).
    fn admit(
        &self,
        served: ServedModel,
        source: Option<String>,
        metrics: &Metrics,
    ) -> Result<Arc<ModelSlot>, ApiError> {
        let mut entry = new_entry(served, &self.config)?;
        entry.source = source.or(entry.source);
        let slot = entry.slot.clone();
        let mut entries = self.lock();
        let freed = self.make_room(&mut entries, &entry.id, entry.bytes)?;
        match entries.iter_mut().find(|e| e.id == entry.id) {
            Some(old) => *old = entry,
            None => entries.push(entry),
        }
        drop(entries);
        metrics.record_model_load();
        for _ in freed {
            metrics.record_model_unload(UnloadReason::Budget);
        }
        slot.ok_or_else(|| ApiError::server("the model did not load"))
    }

    /// Unloads the least recently used unused reloadable models (other than `keep`) until
    /// `need` more bytes fit the budget; refuses when the models in use leave no room.
    fn make_room(
        &self,
        entries: &mut [Entry],
        keep: &str,
        need: u64,
    ) -> Result<Vec<Arc<ModelSlot>>, ApiError> {
        let Some(budget) = self.config.memory_budget else {
            return Ok(Vec::new());
        };
        let used = |entries: &[Entry]| -> u64 {
            entries
                .iter()
                .filter(|e| e.slot.is_some() && e.id != keep)
                .map(|e| e.bytes)
                .sum()
        };
        let mut freed = Vec::new();
        while used(entries).saturating_add(need) > budget {
            let victim = entries
                .iter_mut()
                .filter(|e| e.id != keep && e.source.is_some() && e.unused())
                .min_by_key(|e| e.last_used);
            match victim {
                Some(v) => freed.extend(v.slot.take()),
                None => {
                    return Err(ApiError {
                        status: StatusCode::SERVICE_UNAVAILABLE,
                        message: format!(
                            "model {keep:?} needs {} MiB; with the models in use, the memory \
                             budget of {} MiB has {} MiB left",
                            need >> 20,
                            budget >> 20,
                            budget.saturating_sub(used(entries)) >> 20
                        ),
                        kind: "server_error",
                        param: None,
                        code: Some("memory_budget"),
                    })
                }
            }
        }
        Ok(freed)
    }

    /// `POST /v1/models/unload`: forgets `id`; requests running on it finish first, then its
    /// memory is freed.
    pub fn unload(&self, id: &str, metrics: &Metrics) -> Result<bool, ApiError> {
        let mut entries = self.lock();
        let i = entries
            .iter()
            .position(|e| e.id == id)
            .ok_or_else(|| ApiError::model_not_found(id))?;
        let entry = entries.remove(i);
        drop(entries);
        let was_loaded = entry.slot.is_some();
        if was_loaded {
            metrics.record_model_unload(UnloadReason::Request);
        }
        Ok(was_loaded)
    }

    /// Unloads the reloadable models nobody used for `idle` (they stay known).
    pub fn sweep_idle(&self, idle: Duration, metrics: &Metrics) {
        let mut freed = Vec::new();
        {
            let mut entries = self.lock();
            for e in entries.iter_mut() {
                if e.source.is_some() && e.unused() && e.last_used.elapsed() >= idle {
                    freed.extend(e.slot.take());
                }
            }
        }
        for _ in &freed {
            metrics.record_model_unload(UnloadReason::Idle);
        }
    }
}

fn id_taken(id: &str) -> ApiError {
    ApiError::invalid(
        "id",
        format!("another model has the id {id:?}; give this one another \"id\""),
    )
    .with_status(StatusCode::CONFLICT)
    .with_code("model_exists")
}

fn new_entry(served: ServedModel, config: &ServerConfig) -> Result<Entry, ApiError> {
    let kind = Kind::of(&served.model);
    let bytes = files_size(served.model.path());
    let source = served.source.clone();
    let slot = ModelSlot::new(served, config).map_err(ApiError::server)?;
    Ok(Entry {
        id: slot.id.clone(),
        source,
        kind,
        bytes,
        ctx: slot.ctx,
        slot: Some(Arc::new(slot)),
        last_used: Instant::now(),
    })
}

/// The size of a model file, or of the files of a model directory (two levels deep).
fn files_size(path: &Path) -> u64 {
    fn walk(path: &Path, depth: usize) -> u64 {
        let Ok(meta) = std::fs::metadata(path) else {
            return 0;
        };
        if meta.is_file() {
            return meta.len();
        }
        if !meta.is_dir() || depth == 0 {
            return 0;
        }
        std::fs::read_dir(path)
            .map(|dir| {
                dir.flatten()
                    .map(|e| walk(&e.path(), depth - 1))
                    .sum::<u64>()
            })
            .unwrap_or(0)
    }
    walk(path, 2)
}
