//! `cyb-llm fetch REPO[@REV] [--include GLOB]...`: a model repository from a Hugging Face–
//! compatible hub (`HF_ENDPOINT`, `HF_TOKEN`) into the standard hub cache; prints the snapshot
//! folder. Also the one place where a command's model argument may be a cached repo id.

use cyb_hub::{fetch, FetchOptions, HubCache, HubClient, RepoRef};
use cyb_tensor::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct FetchArgs {
    /// `org/name[@revision]` (revision: branch, tag or commit; default main).
    pub repo: String,
    /// Only files matching this glob, e.g. `*Q4_K_M.gguf` (repeatable; `*` also matches `/`).
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
}

pub fn run(args: FetchArgs) -> Result<()> {
    let r = RepoRef::parse(&args.repo)?;
    let client = HubClient::from_env();
    let cache = HubCache::from_env();
    eprintln!(
        "fetching {r} from {} into {}",
        client.endpoint(),
        cache.root().display()
    );
    let opts = FetchOptions {
        include: args.include,
        progress: true,
    };
    let snap = fetch(&client, &cache, &r, &opts)?;
    eprintln!(
        "{} files ({} downloaded) at commit {}",
        snap.files.len(),
        snap.downloaded_files,
        snap.commit
    );
    println!("{}", snap.dir.display());
    Ok(())
}

/// A model argument as the loaders want it: an existing path as it is, a cached
/// `org/name[@rev]` as its snapshot (or its one model file).
pub fn model_path(arg: impl AsRef<std::ffi::OsStr>) -> Result<PathBuf> {
    let arg = arg.as_ref();
    match arg.to_str() {
        Some(s) => cyb_hub::resolve_model_arg(s),
        None => Ok(PathBuf::from(arg)),
    }
}

/// [`model_path`] in place, for the commands whose arguments hold a `PathBuf`.
pub fn resolve_in_place(path: &mut PathBuf) -> Result<()> {
    *path = model_path(&*path)?;
    Ok(())
}
