//! `Generator::save_session` / `load_session` over the tiny chat fixture: a restored session
//! continues exactly as the one saved (greedy tokens of the next turn equal a fresh session's,
//! and only the new tokens are prefilled), and damaged or foreign files are refused with an
//! error naming the file, leaving an empty, working session.

use cyb_runtime::{Model, Runtime, RuntimeOptions, SamplingParams};
use std::path::{Path, PathBuf};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cyb-session-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn greedy(n: usize) -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        max_tokens: Some(n),
        ignore_eos: true,
        ..SamplingParams::default()
    }
}

fn tokens(session: &mut cyb_runtime::Generator, prompt: &[u32], n: usize) -> (Vec<u32>, usize) {
    let mut gen = session.generate(prompt, greedy(n)).unwrap();
    let mut out = Vec::new();
    for p in gen.by_ref() {
        out.extend(p.unwrap().token);
    }
    (out, gen.metrics().prefilled_tokens)
}

fn load(rel: &str) -> Model {
    Runtime::new(RuntimeOptions::default())
        .unwrap()
        .load(fixture(rel))
        .unwrap()
}

#[test]
fn a_restored_session_continues_where_it_was_saved() {
    let model = load("tiny_chat/hf");
    let first = model.tokenizer().encode("Once upon a time", true).unwrap();
    let mut session = model.generator(None).unwrap();
    let (answer, _) = tokens(&mut session, &first, 12);
    let held = session.tokens().to_vec();
    let path = scratch("a.session");
    session.save_session(&path, b"note bytes").unwrap();

    let mut restored = model.generator(None).unwrap();
    assert_eq!(restored.load_session(&path).unwrap(), b"note bytes");
    assert_eq!(restored.tokens(), held.as_slice());
    // The next turn: the conversation so far plus new text.
    let mut next = first.clone();
    next.extend_from_slice(&answer);
    next.extend(model.tokenizer().encode(" and then", false).unwrap());
    let (got, prefilled) = tokens(&mut restored, &next, 10);
    let (want, _) = tokens(&mut model.generator(None).unwrap(), &next, 10);
    assert_eq!(got, want);
    assert_eq!(
        prefilled,
        next.len() - held.len(),
        "restored cache not reused"
    );
    // The GGUF of the same model has the same shape: its sessions load into the HF one's.
    let gguf = load("tiny_chat/model-f32.gguf");
    let mut other = gguf.generator(None).unwrap();
    other.load_session(&path).unwrap();
    assert_eq!(other.tokens(), held.as_slice());
}

#[test]
fn damaged_and_foreign_session_files_are_refused() {
    let model = load("tiny_chat/hf");
    let prompt = model.tokenizer().encode("Hello there", true).unwrap();
    let mut session = model.generator(None).unwrap();
    tokens(&mut session, &prompt, 4);
    let path = scratch("good.session");
    session.save_session(&path, b"{}").unwrap();
    let good = std::fs::read(&path).unwrap();
    let bad = |name: &str, bytes: &[u8]| {
        let p = scratch(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let mut cases = vec![
        ("empty", Vec::new()),
        ("short", good[..good.len() - 1].to_vec()),
        ("long", [good.as_slice(), b"x"].concat()),
        ("magic", [b"NOTASESS".as_slice(), &good[8..]].concat()),
    ];
    // A header that claims more layers, a huge token count, a huge note.
    let mut layers = good.clone();
    layers[8] ^= 1;
    cases.push(("layers", layers));
    let mut count = good.clone();
    count[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
    cases.push(("count", count));
    let mut note = good.clone();
    note[32..40].copy_from_slice(&(u64::MAX - 7).to_le_bytes());
    cases.push(("note", note));
    // A token id outside the vocabulary.
    let mut id = good.clone();
    id[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
    cases.push(("id", id));
    for (name, bytes) in cases {
        let p = bad(name, &bytes);
        let mut s = model.generator(None).unwrap();
        let err = s.load_session(&p).unwrap_err().to_string();
        assert!(err.contains(&p.display().to_string()), "{name}: {err}");
        assert!(s.tokens().is_empty(), "{name}");
        // The session still works.
        assert_eq!(tokens(&mut s, &prompt, 3).0.len(), 3, "{name}");
    }
    // More tokens than the session's context.
    let mut tiny_ctx = model.generator(Some(2)).unwrap();
    let err = tiny_ctx.load_session(&path).unwrap_err().to_string();
    assert!(err.contains("context"), "{err}");
}
