//! `fetch`: one revision of a repository into the cache, file by file.

use crate::cache::HubCache;
use crate::client::{HubClient, RemoteFile};
use crate::download::{download_blob, Expected};
use crate::repo_ref::RepoRef;
use cyb_tensor::{Error, Result};
use globset::{Glob, GlobSet, GlobSetBuilder};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sha2::{Digest, Sha256};
use std::io::IsTerminal;
use std::path::PathBuf;

/// What to fetch besides the repository itself.
#[derive(Clone, Debug, Default)]
pub struct FetchOptions {
    /// Only files matching one of these globs (`*` also matches `/`); all files when empty.
    pub include: Vec<String>,
    /// Draw progress bars on stderr (only when it is a terminal).
    pub progress: bool,
}

/// A revision in the cache after a fetch.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub repo: String,
    pub commit: String,
    /// `snapshots/{commit}`.
    pub dir: PathBuf,
    /// Repository paths of the files fetched (or found already there).
    pub files: Vec<String>,
    /// Files downloaded by this call (0 when everything was cached).
    pub downloaded_files: usize,
}

/// Downloads the files of `r` that match `opts.include` into `cache` and records the
/// revision's commit under `refs/`.
pub fn fetch(
    client: &HubClient,
    cache: &HubCache,
    r: &RepoRef,
    opts: &FetchOptions,
) -> Result<Snapshot> {
    let filter = build_globs(&opts.include)?;
    let info = client.repo_info(r)?;
    let files: Vec<&RemoteFile> = info
        .files
        .iter()
        .filter(|f| filter.as_ref().is_none_or(|g| g.is_match(&f.name)))
        .collect();
    if files.is_empty() {
        return Err(Error::invalid(
            "fetch",
            format!(
                "{r} (commit {}) has no file matching {:?}; it has: {}",
                info.commit,
                opts.include,
                info.files
                    .iter()
                    .map(|f| f.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let dir = cache.snapshot_dir(&r.repo, &info.commit);
    let mut downloaded = 0;
    let total = files.len();
    for (i, f) in files.iter().enumerate() {
        let link = dir.join(&f.name);
        let blob_name = blob_name(f, &info.commit);
        let blob = cache.blob_path(&r.repo, &blob_name);
        let complete = std::fs::metadata(&blob).is_ok_and(|m| f.size.is_none_or(|s| s == m.len()));
        if complete && link.exists() {
            continue;
        }
        if !complete {
            let label = format!("{}/{}", r.repo, f.name);
            let bar = progress_bar(
                opts.progress,
                &format!("[{}/{total}] {}", i + 1, f.name),
                f.size,
            );
            let url = client.file_url(&r.repo, &info.commit, &f.name);
            let want = Expected {
                label: &label,
                size: f.size,
                sha256: f.sha256.as_deref(),
            };
            let result = download_blob(client, &r.repo, &url, &blob, &want, &bar);
            bar.finish_and_clear();
            result?;
            downloaded += 1;
        }
        cache.link_snapshot_file(&r.repo, &info.commit, &f.name, &blob_name)?;
    }
    cache.write_ref(&r.repo, &r.revision, &info.commit)?;
    Ok(Snapshot {
        repo: r.repo.clone(),
        commit: info.commit,
        dir,
        files: files.iter().map(|f| f.name.clone()).collect(),
        downloaded_files: downloaded,
    })
}

/// huggingface_hub's blob name: the LFS sha256, else the git blob id. A hub that gives neither
/// gets a name derived from commit and path, stable across resumed runs.
fn blob_name(f: &RemoteFile, commit: &str) -> String {
    if let Some(s) = &f.sha256 {
        return s.clone();
    }
    if let Some(b) = &f.blob_id {
        return b.to_ascii_lowercase();
    }
    let digest = Sha256::digest(format!("{commit}/{}", f.name).as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn build_globs(include: &[String]) -> Result<Option<GlobSet>> {
    if include.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for pat in include {
        let g = Glob::new(pat).map_err(|e| {
            Error::invalid("fetch --include", format!("{pat:?} is not a glob: {e}"))
        })?;
        b.add(g);
    }
    b.build()
        .map(Some)
        .map_err(|e| Error::invalid("fetch --include", e.to_string()))
}

fn progress_bar(show: bool, msg: &str, size: Option<u64>) -> ProgressBar {
    if !show || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(size, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{msg} {bar:30} {decimal_bytes}/{decimal_total_bytes} {decimal_bytes_per_sec} eta {eta}",
    ) {
        bar.set_style(style);
    }
    bar.set_message(msg.to_string());
    bar
}
