//! A GGUF file with one 50 MB metadata array (a key no model reads) is inspected, run and
//! imported in memory near its size: metadata arrays are typed vectors, not a value per item,
//! and nothing converts the whole array to JSON or TOML values. (Each item as a value of its
//! own took about 100 times the array's size.)
//!
//! One test in this file, so the children's peak RSS (`RUSAGE_CHILDREN`) is its commands'.

use std::path::{Path, PathBuf};
use std::process::Command;

const ARRAY_BYTES: usize = 50_000_000;

/// The tiny chat model with `general.junk`, a u8 array of about 50 MB, first among its
/// metadata. The inserted entry is a whole number of 32-byte alignment units, so the tensor
/// data moves by as much and stays aligned.
fn hostile(dir: &Path) -> PathBuf {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny_chat/model-f32.gguf");
    let bytes = std::fs::read(src).unwrap();
    let key = b"general.junk";
    let fixed = 8 + key.len() + 4 + 4 + 8;
    let n = ARRAY_BYTES - (fixed + ARRAY_BYTES) % 32;
    let mut entry = Vec::with_capacity(fixed + n);
    entry.extend_from_slice(&(key.len() as u64).to_le_bytes());
    entry.extend_from_slice(key);
    entry.extend_from_slice(&9u32.to_le_bytes()); // array
    entry.extend_from_slice(&0u32.to_le_bytes()); // of u8
    entry.extend_from_slice(&(n as u64).to_le_bytes());
    entry.extend((0..n).map(|i| (i % 251) as u8));
    assert_eq!(entry.len() % 32, 0);
    // Header: magic, version, tensor count, metadata count; the entries follow.
    let mut out = bytes[..24].to_vec();
    let n_kv = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) + 1;
    out[16..24].copy_from_slice(&n_kv.to_le_bytes());
    out.extend_from_slice(&entry);
    out.extend_from_slice(&bytes[24..]);
    let path = dir.join("junk.gguf");
    std::fs::write(&path, out).unwrap();
    path
}

fn cyb(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success(), stdout, stderr)
}

/// The largest peak RSS of the children waited for so far, in MiB.
fn children_peak_mib() -> f64 {
    // SAFETY: getrusage writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    u.ru_maxrss as f64 / 1024.0
}

#[test]
fn a_large_metadata_array_takes_memory_near_its_size() {
    let dir = std::env::temp_dir().join(format!("cyb-junk-meta-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = hostile(&dir);
    let p = path.to_str().unwrap();
    let size_mib = ARRAY_BYTES as f64 / (1 << 20) as f64;
    // Measured: inspect 113 MiB, run 126, import 563 (the array is copied a few times on its
    // way into the .model's TOML as base64, and read back to verify); with each item a value
    // of its own, run took 5.9 GB.
    let check = |what: &str, limit: f64| {
        let peak = children_peak_mib();
        eprintln!("{what}: peak RSS of the commands so far {peak:.0} MiB");
        assert!(
            peak < limit,
            "{what}: {peak:.0} MiB, limit {limit:.0} ({size_mib:.0} MiB array)"
        );
    };

    let (ok, out, err) = cyb(&["inspect", p]);
    assert!(ok, "{err}");
    assert!(
        out.contains("general.junk") && out.contains("49999"),
        "{out}"
    );
    check("inspect", 4.0 * size_mib);

    let (ok, _, err) = cyb(&["run", p, "-n", "2", "--temp", "0", "hi"]);
    assert!(ok, "{err}");
    check("run", 4.0 * size_mib);

    let model = dir.join("junk.model");
    let (ok, _, err) = cyb(&["import", p, "-o", model.to_str().unwrap()]);
    assert!(ok, "{err}");
    check("import", 16.0 * size_mib);
    // The array comes back from the .model file item for item.
    let f = cyb_format::open(&model).unwrap();
    let cyb_format::ModelFile::Gguf(g) = &f else {
        panic!("{} does not open as GGUF metadata", model.display());
    };
    let n = ARRAY_BYTES - (8 + 12 + 16 + ARRAY_BYTES) % 32;
    match g.get("general.junk").and_then(|v| v.as_array()) {
        Some(cyb_format::MetaArray::U8(v)) => {
            assert_eq!(v.len(), n);
            assert!(v.iter().enumerate().all(|(i, &x)| x == (i % 251) as u8));
        }
        other => panic!("general.junk: {:?}", other.map(|a| a.item_type_name())),
    }
    std::fs::remove_dir_all(&dir).ok();
}
