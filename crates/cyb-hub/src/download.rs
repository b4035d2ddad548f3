//! One file into `blobs/`: resumable through `{blob}.incomplete` and `Range: bytes=N-`,
//! accepted only when its size and (for LFS files) its sha256 match what the hub lists.

use crate::cache::{create_parent, io_err};
use crate::client::HubClient;
use cyb_tensor::{Error, Result};
use indicatif::ProgressBar;
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// What the downloaded bytes must be.
pub(crate) struct Expected<'a> {
    /// `org/name/path`, for messages.
    pub label: &'a str,
    pub size: Option<u64>,
    pub sha256: Option<&'a str>,
}

enum Attempt {
    /// The body ended; the partial file holds this many bytes.
    Ended(u64),
    /// The connection broke; worth resuming.
    Broken(Error),
}

/// Downloads `url` to `blob` unless it is already there with the expected size.
pub(crate) fn download_blob(
    client: &HubClient,
    repo: &str,
    url: &str,
    blob: &Path,
    want: &Expected,
    bar: &ProgressBar,
) -> Result<()> {
    if let (Ok(meta), Some(size)) = (std::fs::metadata(blob), want.size) {
        if meta.len() == size {
            return Ok(());
        }
    }
    create_parent(blob)?;
    // Two fetches of the same file would append to one partial file; the second waits.
    let _lock = lock_blob(blob)?;
    if let (Ok(meta), Some(size)) = (std::fs::metadata(blob), want.size) {
        if meta.len() == size {
            return Ok(());
        }
    }
    let partial = incomplete_path(blob);
    let mut tries = 0;
    loop {
        let have = std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
        let outcome = match want.size {
            // Already all there (a previous run died between download and rename).
            Some(size) if have == size && size > 0 => Attempt::Ended(have),
            _ => attempt(client, repo, url, &partial, have, want.size, bar)?,
        };
        match outcome {
            Attempt::Ended(got) if want.size.is_none_or(|s| got >= s) => break,
            Attempt::Ended(got) if tries < client.retries => {
                tries += 1;
                tracing::debug!("{}: body ended at {got} bytes, resuming", want.label);
            }
            Attempt::Broken(e) if tries < client.retries => {
                tries += 1;
                tracing::debug!("{}: {e}; resuming", want.label);
            }
            Attempt::Ended(got) => {
                return Err(Error::Io {
                    path: PathBuf::from(url),
                    source: std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!(
                            "{}: the download stopped at {got} bytes; run the same command again to resume",
                            want.label
                        ),
                    ),
                })
            }
            Attempt::Broken(e) => {
                return Err(Error::Io {
                    path: PathBuf::from(url),
                    source: std::io::Error::other(format!(
                        "{}: {e}; the partial file is kept, run the same command again to resume",
                        want.label
                    )),
                })
            }
        }
    }
    verify(&partial, want)?;
    std::fs::rename(&partial, blob).map_err(|e| io_err(blob, e))
}

/// An exclusive lock on `{root}/.locks/models--org--name/{hash}.lock` (huggingface_hub's
/// place for them), held until the returned file is dropped.
fn lock_blob(blob: &Path) -> Result<File> {
    let name = blob.file_name().unwrap_or_default();
    let repo_dir = blob.parent().and_then(Path::parent);
    let (Some(repo_dir), Some(root)) = (repo_dir, repo_dir.and_then(Path::parent)) else {
        return Err(Error::invalid(
            "fetch",
            format!("{} is not inside a hub cache", blob.display()),
        ));
    };
    let mut lock = root
        .join(".locks")
        .join(repo_dir.file_name().unwrap_or_default())
        .join(name);
    lock.set_extension("lock");
    create_parent(&lock)?;
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock)
        .map_err(|e| io_err(&lock, e))?;
    file.lock().map_err(|e| io_err(&lock, e))?;
    Ok(file)
}

/// `blobs/{hash}.incomplete`, huggingface_hub's name for a download in progress.
pub(crate) fn incomplete_path(blob: &Path) -> PathBuf {
    let mut name = blob.file_name().unwrap_or_default().to_os_string();
    name.push(".incomplete");
    blob.with_file_name(name)
}

/// One GET, appending to `partial` from byte `have`.
fn attempt(
    client: &HubClient,
    repo: &str,
    url: &str,
    partial: &Path,
    have: u64,
    size: Option<u64>,
    bar: &ProgressBar,
) -> Result<Attempt> {
    let resp = match client.get(url, (have > 0).then_some(have), repo) {
        Ok(r) => r,
        // A range past the end: what we have cannot be a prefix of the file; start over.
        Err(Error::Io { source, .. })
            if have > 0 && source.kind() == std::io::ErrorKind::InvalidInput =>
        {
            std::fs::remove_file(partial).map_err(|e| io_err(partial, e))?;
            return Ok(Attempt::Ended(0));
        }
        Err(e) => return Err(e),
    };
    // 206 continues from `have` if the server says so; a 200 is the whole file again.
    let start = match resp.status() {
        206 => match resp.header("content-range").and_then(range_start) {
            Some(s) if s == have => have,
            _ => {
                return Err(Error::Io {
                    path: PathBuf::from(url),
                    source: std::io::Error::other(format!(
                    "asked for bytes {have}- and got a partial answer starting elsewhere ({:?})",
                    resp.header("content-range")
                )),
                })
            }
        },
        _ => 0,
    };
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(start == 0)
        .append(start > 0)
        .open(partial)
        .map_err(|e| io_err(partial, e))?;
    if let Some(total) = size {
        bar.set_length(total);
    }
    bar.set_position(start);
    let mut got = start;
    let mut body = resp.into_reader();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                file.flush().map_err(|e| io_err(partial, e))?;
                return Ok(Attempt::Broken(Error::Io {
                    path: PathBuf::from(url),
                    source: e,
                }));
            }
        };
        let chunk = buf.get(..n).unwrap_or_default();
        file.write_all(chunk).map_err(|e| io_err(partial, e))?;
        got += n as u64;
        bar.set_position(got);
        if size.is_some_and(|s| got > s) {
            drop(file);
            let _ = std::fs::remove_file(partial);
            return Err(Error::Io {
                path: PathBuf::from(url),
                source: std::io::Error::other(format!(
                    "the server sent more than the {} bytes the hub lists; the partial file was deleted",
                    size.unwrap_or(0)
                )),
            });
        }
    }
    file.flush().map_err(|e| io_err(partial, e))?;
    Ok(Attempt::Ended(got))
}

/// `bytes START-END/TOTAL` → START.
fn range_start(v: &str) -> Option<u64> {
    let rest = v.trim().strip_prefix("bytes")?.trim_start();
    rest.split('-').next()?.trim().parse().ok()
}

fn verify(partial: &Path, want: &Expected) -> Result<()> {
    let len = std::fs::metadata(partial)
        .map_err(|e| io_err(partial, e))?
        .len();
    if let Some(size) = want.size {
        if len != size {
            let _ = std::fs::remove_file(partial);
            return Err(Error::Format {
                file: PathBuf::from(want.label),
                offset: len,
                reason: format!(
                    "downloaded {len} bytes, the hub lists {size}; the partial file was deleted"
                ),
            });
        }
    }
    let Some(expected) = want.sha256 else {
        return Ok(());
    };
    let got = sha256_file(partial)?;
    if !got.eq_ignore_ascii_case(expected) {
        let _ = std::fs::remove_file(partial);
        return Err(Error::Format {
            file: PathBuf::from(want.label),
            offset: 0,
            reason: format!(
                "sha256 mismatch: downloaded {got}, the hub lists {expected}; the download was deleted"
            ),
        });
    }
    Ok(())
}

pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).map_err(|e| io_err(path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| io_err(path, e))?;
        if n == 0 {
            break;
        }
        h.update(buf.get(..n).unwrap_or_default());
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_start() {
        assert_eq!(range_start("bytes 100-199/200"), Some(100));
        assert_eq!(range_start("bytes */200"), None);
        assert_eq!(range_start("items 1-2/3"), None);
    }
}
