//! A client for Hugging Face–compatible model hubs and the local cache it fills.
//!
//! `fetch` downloads a repository snapshot (resumable, size- and sha256-checked) into the
//! standard hub cache layout that `huggingface_hub` also reads and writes:
//! `models--{org}--{name}/{blobs,snapshots,refs}`. `resolve_model_arg` turns a command-line
//! model argument (a path, or a repo id already in the cache) into a path; the cache scan
//! backs `cyb-llm models list|info|rm`.
//!
//! This crate knows files and HTTP only; it must not know model formats beyond file names.

mod cache;
mod client;
mod download;
mod fetch;
mod repo_ref;
mod resolve;
mod scan;

pub use cache::HubCache;
pub use client::{HubClient, RemoteFile, RepoInfo};
pub use fetch::{fetch, FetchOptions, Snapshot};
pub use repo_ref::RepoRef;
pub use resolve::{cached_repo_of, resolve_in_cache, resolve_model_arg};
pub use scan::{CachedFile, CachedRepo, CachedRevision, Removed};
