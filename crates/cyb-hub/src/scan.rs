//! What the cache holds, and removing a repository or one revision of it.

use crate::cache::{io_err, is_commit_name, HubCache};
use crate::repo_ref::{repo_from_folder, RepoRef};
use cyb_tensor::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// One repository in the cache.
#[derive(Clone, Debug)]
pub struct CachedRepo {
    pub repo: String,
    pub path: PathBuf,
    pub revisions: Vec<CachedRevision>,
    /// Bytes of all blobs (each content counted once, as on disk).
    pub size_on_disk: u64,
    /// Number of blobs.
    pub blobs: usize,
    /// The newest modification time of its blobs, snapshots and refs.
    pub last_modified: Option<SystemTime>,
}

/// One commit's snapshot.
#[derive(Clone, Debug)]
pub struct CachedRevision {
    pub commit: String,
    /// Branches and tags in `refs/` that point at this commit.
    pub refs: Vec<String>,
    pub files: Vec<CachedFile>,
}

/// One file of a snapshot.
#[derive(Clone, Debug)]
pub struct CachedFile {
    /// Path inside the repository.
    pub name: String,
    pub size: u64,
    /// The blob it links to, when it is a link into `blobs/`.
    pub blob: Option<String>,
}

/// What `remove` deleted.
#[derive(Clone, Debug, Default)]
pub struct Removed {
    pub snapshots: Vec<String>,
    pub blobs: usize,
    pub freed_bytes: u64,
}

impl HubCache {
    /// Every model repository in the cache, sorted by id.
    pub fn scan(&self) -> Result<Vec<CachedRepo>> {
        let entries = match std::fs::read_dir(self.root()) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(self.root(), e)),
        };
        let mut repos = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(repo) = repo_from_folder(&name) {
                if entry.path().is_dir() {
                    repos.push(self.scan_repo(&repo)?);
                }
            }
        }
        repos.sort_by(|a, b| a.repo.cmp(&b.repo));
        Ok(repos)
    }

    /// One repository; an error naming the cache when it is not there.
    pub fn repo(&self, repo: &str) -> Result<CachedRepo> {
        let dir = self.repo_dir(repo);
        if !dir.is_dir() {
            return Err(Error::Io {
                path: dir,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{repo} is not in the hub cache; `cyb-llm models list` shows what is"),
                ),
            });
        }
        self.scan_repo(repo)
    }

    fn scan_repo(&self, repo: &str) -> Result<CachedRepo> {
        let dir = self.repo_dir(repo);
        let mut newest = None;
        let mut touch = |p: &Path| {
            if let Ok(t) = std::fs::symlink_metadata(p).and_then(|m| m.modified()) {
                if newest.is_none_or(|n| t > n) {
                    newest = Some(t);
                }
            }
        };
        let mut size_on_disk = 0;
        let mut blobs = 0;
        for (path, meta) in walk_files(&dir.join("blobs"))? {
            size_on_disk += meta.len();
            blobs += 1;
            touch(&path);
        }
        let refs_dir = dir.join("refs");
        let mut refs: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (path, _) in walk_files(&refs_dir)? {
            touch(&path);
            let name = rel_name(&refs_dir, &path);
            if let Ok(commit) = std::fs::read_to_string(&path) {
                refs.entry(commit.trim().to_string())
                    .or_default()
                    .push(name);
            }
        }
        let snaps = dir.join("snapshots");
        let mut revisions = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&snaps) {
            for e in entries.flatten() {
                let commit = e.file_name().to_string_lossy().into_owned();
                if !is_commit_name(&commit) || !e.path().is_dir() {
                    continue;
                }
                touch(&e.path());
                let root = e.path();
                let mut files = Vec::new();
                for (path, _) in walk_links(&root)? {
                    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                    let blob = std::fs::read_link(&path)
                        .ok()
                        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
                    files.push(CachedFile {
                        name: rel_name(&root, &path),
                        size,
                        blob,
                    });
                }
                files.sort_by(|a, b| a.name.cmp(&b.name));
                revisions.push(CachedRevision {
                    refs: refs.remove(&commit).unwrap_or_default(),
                    commit,
                    files,
                });
            }
        }
        revisions.sort_by(|a, b| {
            b.refs
                .len()
                .cmp(&a.refs.len())
                .then(a.commit.cmp(&b.commit))
        });
        Ok(CachedRepo {
            repo: repo.to_string(),
            path: dir,
            revisions,
            size_on_disk,
            blobs,
            last_modified: newest,
        })
    }

    /// Removes `r`'s snapshot and the blobs no other snapshot links to; with
    /// `whole_repo` (no revision given) the repository folder itself.
    pub fn remove(&self, r: &RepoRef, whole_repo: bool) -> Result<Removed> {
        let dir = self.repo_dir(&r.repo);
        let info = self.repo(&r.repo)?;
        self.check_inside(&dir)?;
        if whole_repo {
            std::fs::remove_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
            return Ok(Removed {
                snapshots: info.revisions.iter().map(|v| v.commit.clone()).collect(),
                blobs: info.blobs,
                freed_bytes: info.size_on_disk,
            });
        }
        let commit = self.cached_commit(r).ok_or_else(|| Error::Io {
            path: dir.join("refs").join(&r.revision),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{r}: no such revision in the cache"),
            ),
        })?;
        let snap = self.snapshot_dir(&r.repo, &commit);
        std::fs::remove_dir_all(&snap).map_err(|e| io_err(&snap, e))?;
        let mut removed = Removed {
            snapshots: vec![commit.clone()],
            ..Removed::default()
        };
        for v in info.revisions.iter().filter(|v| v.commit == commit) {
            for name in &v.refs {
                let p = self.ref_path(&r.repo, name);
                std::fs::remove_file(&p).map_err(|e| io_err(&p, e))?;
            }
        }
        let kept: BTreeSet<&str> = info
            .revisions
            .iter()
            .filter(|v| v.commit != commit)
            .flat_map(|v| v.files.iter().filter_map(|f| f.blob.as_deref()))
            .collect();
        if kept.is_empty() && info.revisions.len() <= 1 {
            std::fs::remove_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
            removed.blobs = info.blobs;
            removed.freed_bytes = info.size_on_disk;
            return Ok(removed);
        }
        for (path, meta) in walk_files(&dir.join("blobs"))? {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if name.is_some_and(|n| !kept.contains(n.as_str())) {
                std::fs::remove_file(&path).map_err(|e| io_err(&path, e))?;
                removed.blobs += 1;
                removed.freed_bytes += meta.len();
            }
        }
        Ok(removed)
    }

    /// Deleting follows only paths that really are inside the cache root.
    fn check_inside(&self, dir: &Path) -> Result<()> {
        let root = self
            .root()
            .canonicalize()
            .map_err(|e| io_err(self.root(), e))?;
        let real = dir.canonicalize().map_err(|e| io_err(dir, e))?;
        if real.parent() != Some(root.as_path()) {
            return Err(Error::invalid(
                "models rm",
                format!(
                    "{} resolves to {}, outside the cache {}; refusing to delete it",
                    dir.display(),
                    real.display(),
                    root.display()
                ),
            ));
        }
        Ok(())
    }
}

fn rel_name(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// Regular files below `dir` (recursively, without following links); none when `dir` is absent.
fn walk_files(dir: &Path) -> Result<Vec<(PathBuf, std::fs::Metadata)>> {
    walk(dir, false)
}

/// Files and links to files below `dir`, as a snapshot holds them.
fn walk_links(dir: &Path) -> Result<Vec<(PathBuf, std::fs::Metadata)>> {
    walk(dir, true)
}

fn walk(dir: &Path, links: bool) -> Result<Vec<(PathBuf, std::fs::Metadata)>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err(&d, e)),
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() || (links && meta.file_type().is_symlink()) {
                out.push((path, meta));
            }
        }
    }
    Ok(out)
}
