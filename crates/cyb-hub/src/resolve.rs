//! A model argument on the command line: a path, or the id of a repository in the cache.

use crate::cache::HubCache;
use crate::repo_ref::RepoRef;
use cyb_tensor::{Error, Result};
use std::path::{Path, PathBuf};

/// What `run`, `inspect`, `import` and the other model-taking commands load for `arg`:
/// an existing path as it is; else `org/name[@rev]` from the hub cache: the snapshot folder,
/// or its one `.gguf`/`.model` file when it has exactly one and no `config.json`.
pub fn resolve_model_arg(arg: &str) -> Result<PathBuf> {
    let path = Path::new(arg);
    if path.exists() {
        return Ok(path.to_path_buf());
    }
    let Some(r) = RepoRef::parse_qualified(arg) else {
        // Not a repo id: the loader reports the missing file in its own words.
        return Ok(path.to_path_buf());
    };
    let cache = HubCache::from_env();
    resolve_in_cache(&cache, &r).map_err(|e| match e {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => Error::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "no such file, and {r} is not in the hub cache {}; download it with `cyb-llm fetch {arg}`",
                    cache.root().display()
                ),
            ),
        },
        other => other,
    })
}

/// The path `r` stands for in `cache` (see [`resolve_model_arg`]).
pub fn resolve_in_cache(cache: &HubCache, r: &RepoRef) -> Result<PathBuf> {
    let Some(commit) = cache.cached_commit(r) else {
        return Err(Error::Io {
            path: cache.repo_dir(&r.repo),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{r} is not in the cache"),
            ),
        });
    };
    let dir = cache.snapshot_dir(&r.repo, &commit);
    if dir.join("config.json").exists() {
        return Ok(dir);
    }
    let entries = std::fs::read_dir(&dir).map_err(|e| crate::cache::io_err(&dir, e))?;
    let mut models: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gguf" || x == "model"))
        // A SentencePiece `tokenizer.model` is not a `.model` container.
        .filter(|p| p.file_stem().is_none_or(|s| s != "tokenizer"))
        .collect();
    models.sort();
    match models.as_slice() {
        [one] => Ok(one.clone()),
        [] => Ok(dir),
        many => Err(Error::invalid(
            "model",
            format!(
                "{r} has {} model files; pass one of them: {}",
                many.len(),
                many.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// `org/name` when `path` lies in a hub cache snapshot (`models--org--name/snapshots/...`).
pub fn cached_repo_of(path: &Path) -> Option<String> {
    let mut parts = path.components().rev().peekable();
    while let Some(c) = parts.next() {
        if c.as_os_str() == "snapshots" {
            let folder = parts.peek()?.as_os_str().to_str()?;
            return crate::repo_ref::repo_from_folder(folder);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_of_a_snapshot_path() {
        let p = Path::new("/c/hub/models--org--name/snapshots/abc/sub/m.gguf");
        assert_eq!(cached_repo_of(p).as_deref(), Some("org/name"));
        assert_eq!(cached_repo_of(Path::new("/c/models/m.gguf")), None);
    }
}
