//! The real all-MiniLM-L6-v2 as a GGUF file (llama.cpp's bert layout, converted from the
//! directory tools/fetch_minilm.sh fetches by tools/fetch_minilm_gguf.sh with the `gguf`
//! package): the WordPiece tokenizer rebuilt from `tokenizer.ggml.*` and the encoder loaded
//! from llama.cpp's tensor names must embed the 50 sentences of tests/fixtures/minilm like
//! sentence-transformers (tests/fixtures/minilm/embeddings.bin; cosine ≥ 0.99999 each) and
//! give the same token counts. The file has no Normalize module, so the vectors are compared by
//! cosine, which ignores their length.
//!
//! Without the file the test is skipped, except under CI (env `CI` set), where it fails.

mod common;
use common::{cosine, minilm_reference, MinilmReference};
use cyb_runtime::{EmbedInput, EmbedOptions, Pooling, Runtime, RuntimeOptions};
use std::path::PathBuf;

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

#[test]
fn gguf_minilm_embeds_like_sentence_transformers() {
    let Some(path) = gguf_path() else {
        return;
    };
    let MinilmReference {
        sentences,
        dim,
        want,
        tokens,
    } = minilm_reference();
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
