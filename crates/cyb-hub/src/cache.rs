//! The hub cache on disk, laid out like huggingface_hub's so both tools share downloads:
//!
//! ```text
//! {root}/models--{org}--{name}/
//!     blobs/{sha256 or git blob id}        file contents, once per content
//!     snapshots/{commit}/{path}            symlinks into blobs/, one tree per commit
//!     refs/{revision}                      the commit a branch or tag pointed at
//! ```

use crate::repo_ref::{valid_revision, RepoRef};
use cyb_tensor::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The root of a hub cache.
#[derive(Clone, Debug)]
pub struct HubCache {
    root: PathBuf,
}

pub(crate) fn io_err(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl HubCache {
    /// A cache rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> HubCache {
        HubCache { root: root.into() }
    }

    /// `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`: the rule
    /// huggingface_hub follows, so `huggingface-cli download` and `cyb-llm fetch` agree.
    pub fn from_env() -> HubCache {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        if let Some(d) = var("HF_HUB_CACHE").or_else(|| var("HUGGINGFACE_HUB_CACHE")) {
            return HubCache::new(d);
        }
        if let Some(h) = var("HF_HOME") {
            return HubCache::new(PathBuf::from(h).join("hub"));
        }
        let home = var("HOME").unwrap_or_else(|| ".".into());
        HubCache::new(PathBuf::from(home).join(".cache/huggingface/hub"))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `{root}/models--org--name`.
    pub fn repo_dir(&self, repo: &str) -> PathBuf {
        self.root.join(crate::repo_ref::repo_folder_name(repo))
    }

    pub fn blob_path(&self, repo: &str, blob: &str) -> PathBuf {
        self.repo_dir(repo).join("blobs").join(blob)
    }

    pub fn snapshot_dir(&self, repo: &str, commit: &str) -> PathBuf {
        self.repo_dir(repo).join("snapshots").join(commit)
    }

    pub fn ref_path(&self, repo: &str, revision: &str) -> PathBuf {
        self.repo_dir(repo).join("refs").join(revision)
    }

    /// The commit `r.revision` names in the cache: the commit in `refs/{revision}`, or the
    /// revision itself when it is a commit with a snapshot. `None` when the cache lacks it.
    pub fn cached_commit(&self, r: &RepoRef) -> Option<String> {
        if !valid_revision(&r.revision) {
            return None;
        }
        if let Ok(text) = std::fs::read_to_string(self.ref_path(&r.repo, &r.revision)) {
            let commit = text.trim();
            if is_commit_name(commit) && self.snapshot_dir(&r.repo, commit).is_dir() {
                return Some(commit.to_string());
            }
        }
        let dir = self.snapshot_dir(&r.repo, &r.revision);
        (is_commit_name(&r.revision) && dir.is_dir()).then(|| r.revision.clone())
    }

    /// Records that `revision` points at `commit` (nothing to record when it is the commit).
    pub fn write_ref(&self, repo: &str, revision: &str, commit: &str) -> Result<()> {
        if revision == commit {
            return Ok(());
        }
        let path = self.ref_path(repo, revision);
        create_parent(&path)?;
        std::fs::write(&path, commit).map_err(|e| io_err(&path, e))
    }

    /// Makes `snapshots/{commit}/{file}` point at `blobs/{blob}`: a relative symlink where the
    /// system has them (so the cache can move), a copy elsewhere.
    pub fn link_snapshot_file(
        &self,
        repo: &str,
        commit: &str,
        file: &str,
        blob: &str,
    ) -> Result<PathBuf> {
        let link = self.snapshot_dir(repo, commit).join(file);
        create_parent(&link)?;
        // snapshots/{commit}/a/b → ../../../blobs/{blob}: one `..` per folder below the repo.
        let depth = 2 + file.split('/').count() - 1;
        let mut target = PathBuf::new();
        for _ in 0..depth {
            target.push("..");
        }
        target.push("blobs");
        target.push(blob);
        // Made under a private name and renamed over the old one, so a concurrent fetch of the
        // same snapshot never sees the file missing or trips over a half-made link.
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let tmp = link.with_file_name(format!(
            ".{}.{}.{}.tmp",
            link.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        #[cfg(unix)]
        std::os::unix::fs::symlink(&target, &tmp).map_err(|e| io_err(&tmp, e))?;
        #[cfg(not(unix))]
        std::fs::copy(self.blob_path(repo, blob), &tmp).map_err(|e| io_err(&tmp, e))?;
        std::fs::rename(&tmp, &link).map_err(|e| io_err(&link, e))?;
        Ok(link)
    }
}

/// Commits are folder names: hex from the hub, but anything without separators is safe.
pub(crate) fn is_commit_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s.chars().all(|c| c.is_ascii_alphanumeric())
}

pub(crate) fn create_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(dir) => std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e)),
        None => Ok(()),
    }
}
