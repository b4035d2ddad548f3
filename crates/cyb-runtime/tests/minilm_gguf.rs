//! The real all-MiniLM-L6-v2 as a GGUF file (llama.cpp's bert layout, converted from the
//! directory tools/fetch_minilm.sh fetches by tools/fetch_minilm_gguf.sh with the `gguf`
//! package): the WordPiece tokenizer rebuilt from `tokenizer.ggml.*` and the encoder loaded
//! from llama.cpp's tensor names must embed the 50 sentences of tests/fixtures/minilm like
//! sentence-transformers (tests/fixtures/minilm/embeddings.bin; cosine ≥ 0.99999 each) and
//! give the same token counts. The file has no Normalize module, so the vectors are compared by
//! cosine, which ignores their length.
//!
//! Without the file the test is skipped, except under CI (env `CI` set), where it fails.

use cyb_runtime::{EmbedInput, EmbedOptions, Pooling, Runtime, RuntimeOptions};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn gguf_path() -> Option<PathBuf> {
    let p = std::env::var_os("CYB_MINILM_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| cyb_runtime::cache_dir().join("minilm/all-MiniLM-L6-v2.gguf"));
    if p.is_file() {
        return Some(p);
    }
    let msg = format!(
        "{} not found; run tools/fetch_minilm_gguf.sh (or set CYB_MINILM_GGUF)",
        p.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("skipping: {msg}");
    None
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

#[test]
fn gguf_minilm_embeds_like_sentence_transformers() {
    let Some(path) = gguf_path() else {
        return;
    };
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/minilm");
    let text = std::fs::read_to_string(fixtures.join("sentences.txt")).unwrap();
    let sentences: Vec<&str> = text.lines().collect();
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("reference.json")).unwrap())
            .unwrap();
    let dim = doc["shape"][1].as_u64().unwrap() as usize;
    let want: Vec<f32> = std::fs::read(fixtures.join("embeddings.bin"))
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let tokens: Vec<usize> = doc["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as usize)
        .collect();
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    let model = rt.load(&path).unwrap();
    let (pooling, normalize, _) = model.embedding_defaults().unwrap();
    assert_eq!((pooling, normalize), (Pooling::Mean, false));
    // sentence-transformers cuts at its max_seq_length (256), which the GGUF does not record.
    let inputs: Vec<EmbedInput> = sentences
        .iter()
        .map(|s| {
            let mut ids = model.tokenizer().encode(s, true).unwrap();
            if ids.len() > 256 {
                let last = ids[ids.len() - 1];
                ids.truncate(255);
                ids.push(last);
            }
            EmbedInput::Tokens(ids)
        })
        .collect();
    let got = model.embed_with(&inputs, &EmbedOptions::default()).unwrap();
    assert_eq!(got.tokens, tokens.iter().sum::<usize>());
    for (i, v) in got.vectors.iter().enumerate() {
        let c = cosine(v, &want[i * dim..(i + 1) * dim]);
        assert!(
            c >= 0.99999,
            "sentence {i} ({:?}): cosine {c}",
            sentences[i]
        );
    }
}
