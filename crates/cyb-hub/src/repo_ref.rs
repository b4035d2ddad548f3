//! `org/name[@revision]`: which repository and which revision of it.

use cyb_tensor::{Error, Result};

/// A repository id and the revision (branch, tag or commit) asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoRef {
    /// `org/name` (or a bare `name` for the hub's few top-level repositories).
    pub repo: String,
    /// Branch, tag or commit; `main` when none was given.
    pub revision: String,
}

impl RepoRef {
    /// Parses `REPO[@REVISION]`; the revision defaults to `main`.
    pub fn parse(arg: &str) -> Result<RepoRef> {
        let (repo, revision) = match arg.split_once('@') {
            Some((r, rev)) => (r, rev),
            None => (arg, "main"),
        };
        let bad = |why: &str| {
            Error::invalid(
                "repo id",
                format!("{arg:?} is not REPO[@REVISION] (like org/name@main): {why}"),
            )
        };
        let parts: Vec<&str> = repo.split('/').collect();
        if parts.is_empty() || parts.len() > 2 {
            return Err(bad("a repo id has at most one '/'"));
        }
        for part in &parts {
            if !valid_name(part) {
                return Err(bad(
                    "names use letters, digits, '-', '_' and '.', and do not start with '.' or '-' or contain '--'",
                ));
            }
        }
        if !valid_revision(revision) {
            return Err(bad(
                "the revision is empty or has characters a ref cannot have",
            ));
        }
        Ok(RepoRef {
            repo: repo.to_string(),
            revision: revision.to_string(),
        })
    }

    /// Like [`RepoRef::parse`] but only for `org/name[@rev]`: the form a model argument must
    /// have to be looked up in the cache (a bare name is more likely a mistyped file).
    pub fn parse_qualified(arg: &str) -> Option<RepoRef> {
        RepoRef::parse(arg).ok().filter(|r| r.repo.contains('/'))
    }

    /// The repository's folder in the cache: `models--org--name`.
    pub fn folder_name(&self) -> String {
        repo_folder_name(&self.repo)
    }
}

impl std::fmt::Display for RepoRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.repo, self.revision)
    }
}

/// `org/name` → `models--org--name` (huggingface_hub's naming).
pub fn repo_folder_name(repo: &str) -> String {
    format!("models--{}", repo.replace('/', "--"))
}

/// `models--org--name` → `org/name`, for folders of model repositories.
pub fn repo_from_folder(folder: &str) -> Option<String> {
    let rest = folder.strip_prefix("models--")?;
    let repo = rest.replace("--", "/");
    (!repo.is_empty()).then_some(repo)
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 96
        && !s.starts_with(['.', '-'])
        && !s.contains("--")
        && !s.contains("..")
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Revisions become file names under `refs/`, so nothing that could leave that folder.
pub(crate) fn valid_revision(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 200
        && !s.starts_with('/')
        && !s.ends_with('/')
        && s.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_repo_and_revision() {
        let r = RepoRef::parse("org/name@v1.0").unwrap();
        assert_eq!((r.repo.as_str(), r.revision.as_str()), ("org/name", "v1.0"));
        assert_eq!(RepoRef::parse("org/name").unwrap().revision, "main");
        assert_eq!(
            RepoRef::parse("gpt2").unwrap().folder_name(),
            "models--gpt2"
        );
        assert_eq!(
            RepoRef::parse("a/b@refs/pr/1").unwrap().revision,
            "refs/pr/1"
        );
    }

    #[test]
    fn refuses_what_could_escape_the_cache() {
        for bad in [
            "",
            "a/b/c",
            "../x",
            "a/..",
            "a/b@",
            "a/b@../../x",
            "a/b@/etc",
            "a--b/c",
            "/abs",
            "a/b c",
            "-a/b",
        ] {
            assert!(RepoRef::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(RepoRef::parse_qualified("model.gguf").is_none());
    }

    #[test]
    fn folder_names_round_trip() {
        assert_eq!(repo_folder_name("org/name"), "models--org--name");
        assert_eq!(
            repo_from_folder("models--org--name").as_deref(),
            Some("org/name")
        );
        assert_eq!(repo_from_folder("datasets--org--name"), None);
    }
}
