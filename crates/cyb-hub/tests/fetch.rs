//! `fetch` against the in-process fake hub (tests/support/fake_hub.rs): the cache layout,
//! `--include`, resumed and restarted downloads, checksum and HTTP errors, the token header,
//! and the cache scan/remove/resolve that `cyb-llm models` and model arguments use.

#[path = "support/fake_hub.rs"]
mod fake_hub;

use cyb_hub::{fetch, resolve_in_cache, FetchOptions, HubCache, HubClient, RepoRef};
use fake_hub::{random_bytes, sha256_hex, Behavior, FakeFile, FakeHub, FakeRepo};
use std::path::{Path, PathBuf};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

fn repo(name: &str) -> FakeRepo {
    FakeRepo {
        repo: name.into(),
        commit: COMMIT.into(),
        files: vec![
            FakeFile::new("config.json", br#"{"model_type":"llama"}"#.to_vec(), false),
            FakeFile::new("model.safetensors", random_bytes(300_000, 1), true),
            FakeFile::new("sub/weights.gguf", random_bytes(70_001, 2), true),
            FakeFile::new("README.md", b"# hello\n".to_vec(), false),
        ],
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cyb-hub-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn opts(include: &[&str]) -> FetchOptions {
    FetchOptions {
        include: include.iter().map(|s| s.to_string()).collect(),
        progress: false,
    }
}

fn blobs(cache: &HubCache, repo: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(cache.repo_dir(repo).join("blobs"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn full_fetch_builds_the_hub_cache_layout() {
    let hub = FakeHub::start(vec![repo("org/tiny")], Behavior::default());
    let cache = HubCache::new(scratch("full"));
    let client = HubClient::new(&hub.url, None);
    let snap = fetch(
        &client,
        &cache,
        &RepoRef::parse("org/tiny").unwrap(),
        &opts(&[]),
    )
    .unwrap();
    assert_eq!(snap.commit, COMMIT);
    assert_eq!(snap.downloaded_files, 4);
    let dir = cache.root().join("models--org--tiny");
    assert_eq!(snap.dir, dir.join("snapshots").join(COMMIT));
    assert_eq!(
        std::fs::read_to_string(dir.join("refs/main")).unwrap(),
        COMMIT
    );
    for f in &repo("org/tiny").files {
        let link = snap.dir.join(&f.name);
        let meta = std::fs::symlink_metadata(&link).unwrap();
        assert!(meta.file_type().is_symlink(), "{} is not a link", f.name);
        let target = std::fs::read_link(&link).unwrap();
        assert!(target.is_relative(), "{}", target.display());
        assert_eq!(std::fs::read(&link).unwrap(), f.data, "{}", f.name);
        // LFS files are stored under their sha256, like huggingface_hub does.
        let blob = target.file_name().unwrap().to_string_lossy().into_owned();
        if f.lfs {
            assert_eq!(blob, sha256_hex(&f.data));
        }
        assert!(dir.join("blobs").join(&blob).is_file());
    }
    assert!(!blobs(&cache, "org/tiny")
        .iter()
        .any(|b| b.ends_with(".incomplete")));
    // The LFS files went through the redirect; the API was asked for sizes and hashes.
    assert!(!hub.requests_to("/cdn/org/tiny").is_empty());
    assert!(
        hub.requests_to("/api/models/org/tiny/revision/main?blobs=true")
            .len()
            == 1
    );

    // A second fetch finds everything and downloads nothing.
    let again = fetch(
        &client,
        &cache,
        &RepoRef::parse("org/tiny").unwrap(),
        &opts(&[]),
    )
    .unwrap();
    assert_eq!(again.downloaded_files, 0);
    assert_eq!(hub.requests_to("/resolve/").len(), 4);
}

#[test]
fn two_fetches_at_once_take_turns_per_file() {
    let hub = FakeHub::start(vec![repo("org/tiny")], Behavior::default());
    let cache = HubCache::new(scratch("together"));
    let runs: Vec<_> = (0..2)
        .map(|_| {
            let (url, cache) = (hub.url.clone(), cache.clone());
            std::thread::spawn(move || {
                let client = HubClient::new(&url, None);
                fetch(
                    &client,
                    &cache,
                    &RepoRef::parse("org/tiny").unwrap(),
                    &opts(&[]),
                )
            })
        })
        .collect();
    for run in runs {
        let snap = run.join().unwrap().unwrap();
        assert_eq!(
            std::fs::read(snap.dir.join("model.safetensors")).unwrap(),
            random_bytes(300_000, 1)
        );
    }
    // The lock files live where huggingface_hub keeps them, outside the repo folder.
    assert!(cache.root().join(".locks/models--org--tiny").is_dir());
    assert_eq!(blobs(&cache, "org/tiny").len(), 4);
}

#[test]
fn include_globs_select_files() {
    let hub = FakeHub::start(vec![repo("org/tiny")], Behavior::default());
    let cache = HubCache::new(scratch("include"));
    let client = HubClient::new(&hub.url, None);
    let r = RepoRef::parse(&format!("org/tiny@{COMMIT}")).unwrap();
    let snap = fetch(&client, &cache, &r, &opts(&["*.gguf", "*.json"])).unwrap();
    let mut files = snap.files.clone();
    files.sort();
    assert_eq!(files, ["config.json", "sub/weights.gguf"]);
    assert!(!snap.dir.join("model.safetensors").exists());
    assert!(!snap.dir.join("README.md").exists());
    // A commit revision needs no ref.
    assert!(!cache.repo_dir("org/tiny").join("refs").exists());
    let err = fetch(&client, &cache, &r, &opts(&["*.onnx"]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no file matching") && err.contains("model.safetensors"),
        "{err}"
    );
}

#[test]
fn a_cut_download_resumes_with_a_range_request() {
    let hub = FakeHub::start(
        vec![repo("org/tiny")],
        Behavior {
            cut_first_after: Some(100_000),
            ..Behavior::default()
        },
    );
    let cache = HubCache::new(scratch("resume"));
    let client = HubClient::new(&hub.url, None);
    let r = RepoRef::parse("org/tiny").unwrap();
    let snap = fetch(&client, &cache, &r, &opts(&["model.safetensors"])).unwrap();
    let want = random_bytes(300_000, 1);
    assert_eq!(
        std::fs::read(snap.dir.join("model.safetensors")).unwrap(),
        want
    );
    let gets = hub.requests_to("/cdn/org/tiny");
    assert_eq!(gets.len(), 2, "{gets:?}");
    assert_eq!(gets[0].header("range"), None);
    assert_eq!(gets[1].header("range"), Some("bytes=100000-"));
}

#[test]
fn a_download_cut_in_one_run_resumes_in_the_next() {
    let hub = FakeHub::start(
        vec![repo("org/tiny")],
        Behavior {
            cut_first_after: Some(150_000),
            ..Behavior::default()
        },
    );
    let cache = HubCache::new(scratch("rerun"));
    let mut client = HubClient::new(&hub.url, None);
    client.retries = 0;
    let r = RepoRef::parse("org/tiny").unwrap();
    let err = fetch(&client, &cache, &r, &opts(&["model.safetensors"]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("run the same command again"), "{err}");
    let want = random_bytes(300_000, 1);
    let partial = cache
        .repo_dir("org/tiny")
        .join("blobs")
        .join(format!("{}.incomplete", sha256_hex(&want)));
    assert_eq!(std::fs::read(&partial).unwrap(), want[..150_000]);
    assert!(!cache
        .snapshot_dir("org/tiny", COMMIT)
        .join("model.safetensors")
        .exists());

    let snap = fetch(&client, &cache, &r, &opts(&["model.safetensors"])).unwrap();
    assert_eq!(
        std::fs::read(snap.dir.join("model.safetensors")).unwrap(),
        want
    );
    assert!(!partial.exists());
    let gets = hub.requests_to("/cdn/org/tiny");
    assert_eq!(gets.last().unwrap().header("range"), Some("bytes=150000-"));
}

#[test]
fn a_server_that_ignores_range_is_read_from_the_start() {
    let hub = FakeHub::start(
        vec![repo("org/tiny")],
        Behavior {
            cut_first_after: Some(120_000),
            ignore_range: true,
            ..Behavior::default()
        },
    );
    let cache = HubCache::new(scratch("norange"));
    let client = HubClient::new(&hub.url, None);
    let snap = fetch(
        &client,
        &cache,
        &RepoRef::parse("org/tiny").unwrap(),
        &opts(&["*.safetensors"]),
    )
    .unwrap();
    assert_eq!(
        std::fs::read(snap.dir.join("model.safetensors")).unwrap(),
        random_bytes(300_000, 1)
    );
    let gets = hub.requests_to("/cdn/org/tiny");
    assert_eq!(gets.len(), 2);
    assert_eq!(gets[1].header("range"), Some("bytes=120000-"));
}

#[test]
fn a_wrong_sha256_is_refused_and_nothing_is_kept() {
    let mut bad = repo("org/bad");
    bad.files[1].wrong_sha256 = true;
    let hub = FakeHub::start(vec![bad], Behavior::default());
    let cache = HubCache::new(scratch("badsha"));
    let client = HubClient::new(&hub.url, None);
    let err = fetch(
        &client,
        &cache,
        &RepoRef::parse("org/bad").unwrap(),
        &opts(&[]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("org/bad/model.safetensors") && err.contains("sha256"),
        "{err}"
    );
    assert!(!cache
        .snapshot_dir("org/bad", COMMIT)
        .join("model.safetensors")
        .exists());
    assert!(
        !blobs(&cache, "org/bad")
            .iter()
            .any(|b| b.len() == 64 || b.ends_with(".incomplete")),
        "{:?}",
        blobs(&cache, "org/bad")
    );
}

#[test]
fn not_found_and_unauthorized_say_what_to_do() {
    let hub = FakeHub::start(
        vec![repo("org/tiny")],
        Behavior {
            require_token: Some("hf_secret".into()),
            ..Behavior::default()
        },
    );
    let cache = HubCache::new(scratch("errors"));
    let r = RepoRef::parse("org/tiny").unwrap();
    let anon = HubClient::new(&hub.url, None);
    let err = fetch(&anon, &cache, &r, &opts(&[]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("401") && err.contains("HF_TOKEN") && err.contains("org/tiny"),
        "{err}"
    );

    let client = HubClient::new(&hub.url, Some("hf_secret".into()));
    let err = fetch(
        &client,
        &cache,
        &RepoRef::parse("org/missing").unwrap(),
        &opts(&[]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("404")
            && err.contains("org/missing")
            && err.contains("/api/models/org/missing"),
        "{err}"
    );

    fetch(&client, &cache, &r, &opts(&["*.json"])).unwrap();
    let sent: Vec<_> = hub
        .requests_to("/org/tiny")
        .iter()
        .filter(|q| !q.target.starts_with("/cdn/"))
        .map(|q| q.header("authorization").map(str::to_string))
        .collect();
    assert!(
        sent.iter()
            .filter(|h| h.as_deref() == Some("Bearer hf_secret"))
            .count()
            >= 2,
        "{sent:?}"
    );
}

#[test]
fn scan_resolve_and_remove_the_cache() {
    let mut second = repo("org/other");
    second.files.truncate(1);
    let hub = FakeHub::start(vec![repo("org/tiny"), second], Behavior::default());
    let cache = HubCache::new(scratch("scan"));
    let client = HubClient::new(&hub.url, None);
    let r = RepoRef::parse("org/tiny").unwrap();
    fetch(&client, &cache, &r, &opts(&[])).unwrap();
    fetch(
        &client,
        &cache,
        &RepoRef::parse("org/other").unwrap(),
        &opts(&[]),
    )
    .unwrap();

    let repos = cache.scan().unwrap();
    let names: Vec<&str> = repos.iter().map(|r| r.repo.as_str()).collect();
    assert_eq!(names, ["org/other", "org/tiny"]);
    let tiny = &repos[1];
    assert_eq!(tiny.blobs, 4);
    let total: u64 = repo("org/tiny")
        .files
        .iter()
        .map(|f| f.data.len() as u64)
        .sum();
    assert_eq!(tiny.size_on_disk, total);
    assert_eq!(tiny.revisions.len(), 1);
    assert_eq!(tiny.revisions[0].refs, ["main"]);
    let files: Vec<(&str, u64)> = tiny.revisions[0]
        .files
        .iter()
        .map(|f| (f.name.as_str(), f.size))
        .collect();
    assert!(files.contains(&("sub/weights.gguf", 70_001)), "{files:?}");
    assert!(tiny.last_modified.is_some());

    // A snapshot with config.json is a Hugging Face folder; one with only a .gguf is that file.
    assert_eq!(
        resolve_in_cache(&cache, &r).unwrap(),
        cache.snapshot_dir("org/tiny", COMMIT)
    );
    let gguf_only = RepoRef::parse("org/gg").unwrap();
    let snap = cache.snapshot_dir("org/gg", COMMIT);
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::write(snap.join("m.gguf"), b"GGUF").unwrap();
    cache.write_ref("org/gg", "main", COMMIT).unwrap();
    assert_eq!(
        resolve_in_cache(&cache, &gguf_only).unwrap(),
        snap.join("m.gguf")
    );
    let err = resolve_in_cache(&cache, &RepoRef::parse("org/tiny@v2").unwrap()).unwrap_err();
    assert!(err.to_string().contains("not in the cache"), "{err}");

    let removed = cache.remove(&r, false).unwrap();
    assert_eq!(removed.freed_bytes, total);
    assert_eq!(removed.blobs, 4);
    assert!(!cache.repo_dir("org/tiny").exists());
    assert!(cache.repo_dir("org/other").exists());
    assert!(cache.remove(&r, true).is_err());
}

#[test]
fn removing_one_revision_keeps_blobs_another_uses() {
    let cache = HubCache::new(scratch("rmrev"));
    let dir = cache.repo_dir("org/two");
    std::fs::create_dir_all(dir.join("blobs")).unwrap();
    std::fs::write(dir.join("blobs/shared"), vec![1u8; 10]).unwrap();
    std::fs::write(dir.join("blobs/onlyold"), vec![2u8; 7]).unwrap();
    let old = "1111111111111111111111111111111111111111";
    let new = "2222222222222222222222222222222222222222";
    cache
        .link_snapshot_file("org/two", old, "a.bin", "shared")
        .unwrap();
    cache
        .link_snapshot_file("org/two", old, "b.bin", "onlyold")
        .unwrap();
    cache
        .link_snapshot_file("org/two", new, "a.bin", "shared")
        .unwrap();
    cache.write_ref("org/two", "main", new).unwrap();
    cache.write_ref("org/two", "v1", old).unwrap();
    let removed = cache
        .remove(&RepoRef::parse("org/two@v1").unwrap(), false)
        .unwrap();
    assert_eq!((removed.blobs, removed.freed_bytes), (1, 7));
    assert!(dir.join("blobs/shared").exists() && !dir.join("blobs/onlyold").exists());
    assert!(!dir.join("refs/v1").exists() && dir.join("refs/main").exists());
    assert_eq!(
        std::fs::read(cache.snapshot_dir("org/two", new).join("a.bin")).unwrap(),
        vec![1u8; 10]
    );
}

#[cfg(unix)]
#[test]
fn remove_refuses_a_repo_folder_that_leads_outside_the_cache() {
    let root = scratch("escape");
    let outside = scratch("escape-target");
    std::fs::write(outside.join("precious"), b"x").unwrap();
    let cache = HubCache::new(root.join("hub"));
    std::fs::create_dir_all(cache.root()).unwrap();
    std::os::unix::fs::symlink(&outside, cache.repo_dir("org/evil")).unwrap();
    let err = cache
        .remove(&RepoRef::parse("org/evil").unwrap(), true)
        .unwrap_err();
    assert!(err.to_string().contains("outside the cache"), "{err}");
    assert!(Path::new(&outside.join("precious")).exists());
}

#[test]
fn a_stale_partial_longer_than_the_file_is_restarted() {
    let hub = FakeHub::start(vec![repo("org/tiny")], Behavior::default());
    let cache = HubCache::new(scratch("stale"));
    let want = random_bytes(300_000, 1);
    let partial = cache
        .repo_dir("org/tiny")
        .join("blobs")
        .join(format!("{}.incomplete", sha256_hex(&want)));
    std::fs::create_dir_all(partial.parent().unwrap()).unwrap();
    std::fs::write(&partial, vec![7u8; 300_010]).unwrap();
    let client = HubClient::new(&hub.url, None);
    let snap = fetch(
        &client,
        &cache,
        &RepoRef::parse("org/tiny").unwrap(),
        &opts(&["*.safetensors"]),
    )
    .unwrap();
    assert_eq!(
        std::fs::read(snap.dir.join("model.safetensors")).unwrap(),
        want
    );
    let gets = hub.requests_to("/cdn/org/tiny");
    assert_eq!(gets.len(), 2, "{gets:?}");
    assert_eq!(gets[0].header("range"), Some("bytes=300010-"));
    assert_eq!(gets[1].header("range"), None);
}

#[test]
fn a_server_sending_too_much_is_refused() {
    let hub = FakeHub::start(
        vec![repo("org/tiny")],
        Behavior {
            extra_bytes: 5,
            ..Behavior::default()
        },
    );
    let cache = HubCache::new(scratch("toomuch"));
    let client = HubClient::new(&hub.url, None);
    let err = fetch(
        &client,
        &cache,
        &RepoRef::parse("org/tiny").unwrap(),
        &opts(&["README.md"]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("README.md") && err.contains("more than"),
        "{err}"
    );
    assert!(
        blobs(&cache, "org/tiny").is_empty(),
        "{:?}",
        blobs(&cache, "org/tiny")
    );
}

#[test]
fn file_names_that_leave_the_snapshot_are_refused() {
    let mut evil = repo("org/evil");
    evil.files
        .push(FakeFile::new("../../../escaped", b"x".to_vec(), false));
    let hub = FakeHub::start(vec![evil], Behavior::default());
    let root = scratch("evilnames");
    let cache = HubCache::new(root.join("hub"));
    let client = HubClient::new(&hub.url, None);
    let err = fetch(
        &client,
        &cache,
        &RepoRef::parse("org/evil").unwrap(),
        &opts(&[]),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("would leave the snapshot folder"), "{err}");
    assert!(!cache.root().exists());
}
