//! HTTP to the hub: the file list of a revision and the GET of one file.

use crate::repo_ref::RepoRef;
use cyb_tensor::{Error, Result};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// Where the hub is and who is asking.
#[derive(Clone)]
pub struct HubClient {
    endpoint: String,
    token: Option<String>,
    agent: ureq::Agent,
    /// How many times one file's download is resumed after the connection drops.
    pub retries: u32,
}

/// One revision of a repository as the hub lists it.
#[derive(Clone, Debug)]
pub struct RepoInfo {
    pub commit: String,
    pub files: Vec<RemoteFile>,
}

/// One file of a revision.
#[derive(Clone, Debug)]
pub struct RemoteFile {
    /// The path inside the repository (`/`-separated, checked to stay inside it).
    pub name: String,
    pub size: Option<u64>,
    /// The sha256 the hub records for files stored with git LFS.
    pub sha256: Option<String>,
    /// The git blob id (sha1) the hub gives for every file.
    pub blob_id: Option<String>,
}

#[derive(Deserialize)]
struct ApiRevision {
    sha: String,
    #[serde(default)]
    siblings: Vec<ApiSibling>,
}

#[derive(Deserialize)]
struct ApiSibling {
    rfilename: String,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default, rename = "blobId")]
    blob_id: Option<String>,
    #[serde(default)]
    lfs: Option<ApiLfs>,
}

#[derive(Deserialize)]
struct ApiLfs {
    sha256: String,
    #[serde(default)]
    size: Option<u64>,
}

impl HubClient {
    pub fn new(endpoint: &str, token: Option<String>) -> HubClient {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(30))
            .timeout_read(Duration::from_secs(60))
            // The hub redirects LFS files to a CDN with a signed URL; the token stays home.
            .redirect_auth_headers(ureq::RedirectAuthHeaders::SameHost)
            .user_agent(concat!("cyb-llm/", env!("CARGO_PKG_VERSION")))
            .build();
        HubClient {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            token: token.filter(|t| !t.is_empty()),
            agent,
            retries: 3,
        }
    }

    /// Endpoint from `HF_ENDPOINT` (default `https://huggingface.co`), token from `HF_TOKEN`.
    pub fn from_env() -> HubClient {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let endpoint = var("HF_ENDPOINT").unwrap_or_else(|| "https://huggingface.co".into());
        let token = var("HF_TOKEN").or_else(|| var("HUGGING_FACE_HUB_TOKEN"));
        HubClient::new(&endpoint, token)
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The commit and files of `r`, with sizes and LFS sha256s.
    pub fn repo_info(&self, r: &RepoRef) -> Result<RepoInfo> {
        let url = format!(
            "{}/api/models/{}/revision/{}?blobs=true",
            self.endpoint,
            r.repo,
            encode_component(&r.revision)
        );
        let resp = self.get(&url, None, &r.repo)?;
        let text = resp.into_string().map_err(|e| http_io(&url, e))?;
        let api: ApiRevision = serde_json::from_str(&text).map_err(|e| Error::Format {
            file: PathBuf::from(&url),
            offset: 0,
            reason: format!("the hub's answer for {r} is not the expected JSON: {e}"),
        })?;
        if !crate::cache::is_commit_name(&api.sha) {
            return Err(Error::Format {
                file: PathBuf::from(&url),
                offset: 0,
                reason: format!("the commit {:?} is not a commit id", api.sha),
            });
        }
        let mut files = Vec::with_capacity(api.siblings.len());
        for s in api.siblings {
            if !safe_repo_path(&s.rfilename) {
                return Err(Error::Format {
                    file: PathBuf::from(&url),
                    offset: 0,
                    reason: format!(
                        "file name {:?} would leave the snapshot folder",
                        s.rfilename
                    ),
                });
            }
            let (sha256, size) = match s.lfs {
                Some(l) => (Some(l.sha256.to_ascii_lowercase()), l.size.or(s.size)),
                None => (None, s.size),
            };
            let hex_ok = |h: &Option<String>| {
                h.as_ref()
                    .is_none_or(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
            };
            if !hex_ok(&sha256) || !hex_ok(&s.blob_id) {
                return Err(Error::Format {
                    file: PathBuf::from(&url),
                    offset: 0,
                    reason: format!("file {:?} has a hash that is not hex", s.rfilename),
                });
            }
            files.push(RemoteFile {
                name: s.rfilename,
                size,
                sha256,
                blob_id: s.blob_id,
            });
        }
        Ok(RepoInfo {
            commit: api.sha,
            files,
        })
    }

    /// `{endpoint}/{repo}/resolve/{commit}/{file}`.
    pub fn file_url(&self, repo: &str, commit: &str, file: &str) -> String {
        let path: Vec<String> = file.split('/').map(encode_component).collect();
        format!(
            "{}/{repo}/resolve/{commit}/{}",
            self.endpoint,
            path.join("/")
        )
    }

    /// A GET with the token and an optional `Range: bytes=N-`; HTTP errors become messages that
    /// say what to do.
    pub(crate) fn get(
        &self,
        url: &str,
        range_from: Option<u64>,
        repo: &str,
    ) -> Result<ureq::Response> {
        let mut req = self.agent.get(url);
        if let Some(t) = &self.token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        if let Some(n) = range_from {
            req = req.set("Range", &format!("bytes={n}-"));
        }
        match req.call() {
            Ok(resp) => Ok(resp),
            Err(ureq::Error::Status(code, _)) => Err(status_error(url, code, repo)),
            Err(ureq::Error::Transport(t)) => Err(Error::Io {
                path: PathBuf::from(url),
                source: std::io::Error::other(format!("cannot reach the hub: {t}")),
            }),
        }
    }
}

fn status_error(url: &str, code: u16, repo: &str) -> Error {
    use std::io::ErrorKind;
    let (kind, why) = match code {
        401 | 403 => (
            ErrorKind::PermissionDenied,
            format!(
                "repo {repo} not found, or gated/private; set HF_TOKEN to a token that may read it"
            ),
        ),
        404 => (
            ErrorKind::NotFound,
            format!("repo {repo}, its revision or this file not found (or gated; set HF_TOKEN)"),
        ),
        416 => (ErrorKind::InvalidInput, "range not satisfiable".to_string()),
        c if c >= 500 => (
            ErrorKind::Other,
            "the hub failed; try again later".to_string(),
        ),
        _ => (ErrorKind::Other, "unexpected answer".to_string()),
    };
    Error::Io {
        path: PathBuf::from(url),
        source: std::io::Error::new(kind, format!("HTTP {code}: {why}")),
    }
}

pub(crate) fn http_io(url: &str, e: std::io::Error) -> Error {
    Error::Io {
        path: PathBuf::from(url),
        source: e,
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A repository path that cannot leave the snapshot folder it is joined to.
pub(crate) fn safe_repo_path(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && !p.contains('\\')
        && !p.contains('\0')
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_urls_encode_each_segment() {
        let c = HubClient::new("http://h/", None);
        assert_eq!(
            c.file_url("o/n", "abc", "dir/a b+c.bin"),
            "http://h/o/n/resolve/abc/dir/a%20b%2Bc.bin"
        );
    }

    #[test]
    fn repo_paths_stay_inside() {
        for bad in ["", "/etc/passwd", "a/../../b", "..", "a//b", "a\\b", "./a"] {
            assert!(!safe_repo_path(bad), "{bad:?}");
        }
        assert!(safe_repo_path("onnx/model.onnx"));
    }
}
