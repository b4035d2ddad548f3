//! `cyb-llm models list | info REPO | rm REPO[@REV]`: what the hub cache holds, and freeing it.

use cyb_hub::{CachedRepo, CachedRevision, HubCache, RepoRef};
use cyb_tensor::Result;
use serde_json::{json, Value};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(clap::Args)]
pub struct ModelsArgs {
    #[command(subcommand)]
    pub command: ModelsCommand,
}

#[derive(clap::Subcommand)]
pub enum ModelsCommand {
    /// Repositories in the cache: revisions, size on disk, files, last change.
    List {
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One repository: commits, refs, files with sizes, formats found.
    Info {
        /// `org/name`.
        repo: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove a repository, or with `@REV` one revision and the blobs only it used.
    Rm {
        /// `org/name[@revision]`.
        repo: String,
    },
}

pub fn run(args: ModelsArgs) -> Result<()> {
    let cache = HubCache::from_env();
    match args.command {
        ModelsCommand::List { json } => list(&cache, json),
        ModelsCommand::Info { repo, json } => info(&cache, &repo, json),
        ModelsCommand::Rm { repo } => rm(&cache, &repo),
    }
}

fn list(cache: &HubCache, as_json: bool) -> Result<()> {
    let repos = cache.scan()?;
    if as_json {
        let all: Vec<Value> = repos.iter().map(repo_json).collect();
        println!("{}", Value::Array(all));
        return Ok(());
    }
    if repos.is_empty() {
        eprintln!("no models in {}", cache.root().display());
        return Ok(());
    }
    let rows: Vec<[String; 5]> = repos
        .iter()
        .map(|r| {
            [
                r.repo.clone(),
                r.revisions
                    .iter()
                    .map(revision_label)
                    .collect::<Vec<_>>()
                    .join(" "),
                human_bytes(r.size_on_disk),
                r.blobs.to_string(),
                r.last_modified.map(utc).unwrap_or_default(),
            ]
        })
        .collect();
    let head = ["REPO", "REVISIONS", "SIZE", "FILES", "MODIFIED (UTC)"];
    let mut width = head.map(str::len);
    for row in &rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        let [a, b, c, d, e] = cells;
        let [wa, wb, wc, wd, _] = width;
        println!("{a:<wa$}  {b:<wb$}  {c:>wc$}  {d:>wd$}  {e}");
    };
    line(head);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3], &row[4]]);
    }
    println!("cache: {}", cache.root().display());
    Ok(())
}

fn info(cache: &HubCache, arg: &str, as_json: bool) -> Result<()> {
    let r = RepoRef::parse(arg)?;
    let repo = cache.repo(&r.repo)?;
    if as_json {
        println!("{}", repo_json(&repo));
        return Ok(());
    }
    println!("repo      {}", repo.repo);
    println!("path      {}", repo.path.display());
    println!(
        "size      {} in {} blob(s)",
        human_bytes(repo.size_on_disk),
        repo.blobs
    );
    for v in &repo.revisions {
        let refs = if v.refs.is_empty() {
            String::new()
        } else {
            format!(" ({})", v.refs.join(", "))
        };
        println!("commit    {}{refs}", v.commit);
        println!("formats   {}", formats(v).join(", "));
        for f in &v.files {
            println!("  {:>10}  {}", human_bytes(f.size), f.name);
        }
    }
    Ok(())
}

fn rm(cache: &HubCache, arg: &str) -> Result<()> {
    let r = RepoRef::parse(arg)?;
    let whole = !arg.contains('@');
    let removed = cache.remove(&r, whole)?;
    let what = if whole { r.repo.clone() } else { r.to_string() };
    println!(
        "removed {what}: {} snapshot(s), {} blob(s), freed {}",
        removed.snapshots.len(),
        removed.blobs,
        human_bytes(removed.freed_bytes)
    );
    Ok(())
}

fn revision_label(v: &CachedRevision) -> String {
    if v.refs.is_empty() {
        v.commit.chars().take(12).collect()
    } else {
        v.refs.join(",")
    }
}

/// The formats a snapshot's file names show.
fn formats(v: &CachedRevision) -> Vec<&'static str> {
    let mut out = Vec::new();
    for f in &v.files {
        let name = f.name.rsplit('/').next().unwrap_or(&f.name);
        let kind = match name.rsplit_once('.').map(|(_, e)| e) {
            _ if name == "config.json" => "hf-config",
            _ if name == "tokenizer.json" => "hf-tokenizer",
            _ if name == "tokenizer.model" => "sentencepiece",
            Some("gguf") => "gguf",
            Some("safetensors") => "safetensors",
            Some("onnx") => "onnx",
            Some("model") => ".model",
            Some("bin" | "pt" | "pth") => "pytorch",
            _ => continue,
        };
        if !out.contains(&kind) {
            out.push(kind);
        }
    }
    out
}

fn repo_json(r: &CachedRepo) -> Value {
    let secs = r
        .last_modified
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    json!({
        "repo": r.repo,
        "path": r.path.display().to_string(),
        "size_on_disk": r.size_on_disk,
        "files": r.blobs,
        "last_modified": secs,
        "last_modified_utc": r.last_modified.map(utc),
        "revisions": r.revisions.iter().map(|v| json!({
            "commit": v.commit,
            "refs": v.refs,
            "formats": formats(v),
            "files": v.files.iter().map(|f| json!({"name": f.name, "size": f.size, "blob": f.blob})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// `YYYY-MM-DD HH:MM` in UTC (days to civil date after Howard Hinnant's `civil_from_days`).
fn utc(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn utc_dates() {
        // 2000-03-01 00:00 UTC and 2026-11-30 12:34 UTC (values from `date -u -d @N`).
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(951_868_800)),
            "2000-03-01 00:00"
        );
        assert_eq!(
            utc(UNIX_EPOCH + Duration::from_secs(1_796_042_040)),
            "2026-11-30 12:34"
        );
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01 00:00");
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(372_030), "372.0 KB");
        assert_eq!(human_bytes(1_500_000_000), "1.5 GB");
    }
}
