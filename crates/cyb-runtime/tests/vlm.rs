//! Vision-language generation against transformers, on the tiny random-weight LLaVA and
//! Idefics3 (SmolVLM's architecture) of tests/fixtures/vlm (tools/fixtures/make_vlm_fixtures.py,
//! with transformers' own processors):
//! the rendered prompt, the expanded ids, the last position's log-probabilities and 32 greedy
//! tokens, for one image and for two.

mod common;

use cyb_runtime::{
    ChatMessage, ContentPart, FinishReason, Runtime, RuntimeOptions, SamplingParams,
};
use serde_json::Value;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn reference(family: &str) -> Value {
    let p = fixtures().join(format!("vlm/{family}/reference.json"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// A reference image: `images/NAME`, or a family's own (`FAMILY/NAME`, under `vlm/`).
fn image(name: &str) -> cyb_media::image::RgbImage {
    let dir = if name.contains('/') { "vlm" } else { "images" };
    cyb_runtime::vision::load_image(&fixtures().join(dir).join(name)).unwrap()
}

/// The images of reference case `case`, decoded.
fn case_images(r: &Value, case: &str) -> Vec<cyb_media::image::RgbImage> {
    r["images"][case]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| image(n.as_str().unwrap()))
        .collect()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn runtime() -> Runtime {
    Runtime::new(RuntimeOptions {
        backend: Some("cpu".into()),
        ..Default::default()
    })
    .unwrap()
}

/// The reference's messages as the runtime's (image parts in their places).
fn messages(v: &Value) -> Vec<ChatMessage> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let parts = m["content"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| match p["type"].as_str().unwrap() {
                    "image" => ContentPart::Image,
                    _ => ContentPart::Text(p["text"].as_str().unwrap().to_string()),
                })
                .collect();
            ChatMessage {
                role: m["role"].as_str().unwrap().to_string(),
                parts: Some(parts),
                ..ChatMessage::default()
            }
        })
        .collect()
}

fn log_softmax(x: &[f32]) -> Vec<f32> {
    let m = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let s: f64 = x.iter().map(|&v| ((v - m) as f64).exp()).sum();
    x.iter().map(|&v| v - m - s.ln() as f32).collect()
}

#[test]
fn llava_matches_transformers() {
    matches_transformers(&runtime(), "llava", 1e-4);
}

#[test]
fn idefics3_matches_transformers() {
    matches_transformers(&runtime(), "idefics3", 1e-4);
}

/// The same on the wgpu backend (Mesa's software Vulkan in CI): the tower, the connector and
/// the decoder with the image embeddings spliced in all run there.
#[cfg(feature = "wgpu")]
#[test]
fn both_families_match_transformers_on_wgpu() {
    let Some(gpu) = common::wgpu_backend() else {
        return;
    };
    let cpu = RuntimeOptions::default().cpu_backend().unwrap();
    let rt = Runtime::with_backends(vec![gpu, cpu], RuntimeOptions::default());
    for family in ["llava", "idefics3"] {
        matches_transformers(&rt, family, 2e-4);
    }
}

fn matches_transformers(rt: &Runtime, family: &str, tol: f32) {
    let r = reference(family);
    let model = rt.load(fixtures().join("vlm").join(family)).unwrap();
    assert!(model.takes_images());
    for case in ["one", "two"] {
        let c = &r[case];
        let text = model.render_chat(&messages(&c["messages"]), true).unwrap();
        assert_eq!(
            text,
            c["prompt"].as_str().unwrap(),
            "{case}: rendered prompt"
        );
        let prompt = model.prompt_ids(&text, false).unwrap();
        let images = case_images(&r, case);
        let mut session = model.generator(None).unwrap();
        let params = SamplingParams {
            temperature: 0.0,
            max_tokens: Some(32),
            ignore_eos: true,
            ..SamplingParams::default()
        };
        let mut gen = session
            .generate_with_images(&prompt, &images, params)
            .unwrap()
            .with_logprobs(5);
        let mut got = Vec::new();
        let mut first = None;
        while let Some(p) = gen.next() {
            let p = p.unwrap();
            if let Some(t) = p.token {
                got.push(t);
                if first.is_none() {
                    first = gen.last_logprobs().cloned();
                }
            }
        }
        assert_eq!(gen.finish_reason(), Some(FinishReason::Length));
        assert_eq!(
            gen.metrics().prompt_tokens,
            c["input_ids"].as_array().unwrap().len(),
            "{case}: expanded prompt length"
        );
        drop(gen);
        assert_eq!(
            &session.tokens()[..c["input_ids"].as_array().unwrap().len()],
            ids(&c["input_ids"]).as_slice(),
            "{case}: expanded ids"
        );
        let want: Vec<f32> = c["last_logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let want = log_softmax(&want);
        let first = first.unwrap();
        assert_eq!(first.top.len(), 5);
        for &(id, lp) in &first.top {
            let w = want[id as usize];
            assert!((lp - w).abs() < tol, "{case}: logprob of {id} {lp} vs {w}");
        }
        assert_eq!(got, ids(&c["greedy"]), "{case}: greedy tokens");
    }
}

/// Greedy tokens and the prefilled count of one generation in `session`.
fn greedy_run(
    session: &mut cyb_runtime::Generator,
    prompt: &[u32],
    images: &[cyb_media::image::RgbImage],
) -> (Vec<u32>, usize) {
    let params = SamplingParams {
        temperature: 0.0,
        max_tokens: Some(8),
        ignore_eos: true,
        ..SamplingParams::default()
    };
    let mut gen = session
        .generate_with_images(prompt, images, params)
        .unwrap();
    let mut out = Vec::new();
    for p in gen.by_ref() {
        out.extend(p.unwrap().token);
    }
    let prefilled = gen.metrics().prefilled_tokens;
    (out, prefilled)
}

#[test]
fn a_session_reuses_an_image_only_when_it_is_the_same() {
    let r = reference("llava");
    let rt = runtime();
    let model = rt.load(fixtures().join("vlm/llava")).unwrap();
    let text = model
        .render_chat(&messages(&r["one"]["messages"]), true)
        .unwrap();
    let prompt = model.prompt_ids(&text, false).unwrap();
    let (wide, tall) = (image("src_wide.png"), image("src_tall.png"));
    let fresh = |img: &cyb_media::image::RgbImage| {
        let mut s = model.generator(None).unwrap();
        greedy_run(&mut s, &prompt, std::slice::from_ref(img)).0
    };
    let (want_wide, want_tall) = (fresh(&wide), fresh(&tall));
    assert_ne!(want_wide, want_tall, "the image must change the answer");
    let n = r["one"]["input_ids"].as_array().unwrap().len();
    let mut s = model.generator(None).unwrap();
    assert_eq!(
        greedy_run(&mut s, &prompt, std::slice::from_ref(&wide)),
        (want_wide.clone(), n)
    );
    // Sessions are matched to prompts as given, each placeholder standing for its image's
    // fingerprint: the same text with another image shares a prefix with it only up to the
    // placeholder; then the tokens fed after the prompt.
    let key = s.prompt_key().into_owned();
    let (key_wide, key_tall) = (
        model.prompt_key(&prompt, std::slice::from_ref(&wide)),
        model.prompt_key(&prompt, std::slice::from_ref(&tall)),
    );
    assert_eq!(&key[..prompt.len()], key_wide.as_slice());
    assert_eq!(&key[prompt.len()..], &s.tokens()[n..]);
    let at = prompt.iter().position(|&t| t == 4).unwrap();
    assert_eq!(key_wide[..at], prompt[..at]);
    assert_eq!(key_wide[at + 1..], prompt[at + 1..]);
    assert!(key_wide[at] >= 1 << 31 && key_tall[at] >= 1 << 31 && key_wide[at] != key_tall[at]);
    assert_eq!(
        key_wide,
        model.prompt_key(&prompt, &[image("src_wide.png")])
    );
    // Placeholders past the images are keyed as they are.
    assert_eq!(model.prompt_key(&prompt, &[]), prompt);
    // The same image again: only the last prompt token is fed.
    assert_eq!(
        greedy_run(&mut s, &prompt, std::slice::from_ref(&wide)),
        (want_wide, 1)
    );
    // Another image at the same place: everything from the image's first token is fed again.
    let start = r["one"]["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .position(|v| v.as_u64() == Some(4))
        .unwrap();
    assert_eq!(
        greedy_run(&mut s, &prompt, std::slice::from_ref(&tall)),
        (want_tall, n - start)
    );
    // Images for a prompt without placeholders, and none for one with them, are refused.
    let plain = model.prompt_ids("what is this ?", true).unwrap();
    let mut s = model.generator(None).unwrap();
    let params = SamplingParams::default();
    let e = s
        .generate_with_images(&plain, std::slice::from_ref(&wide), params.clone())
        .err()
        .unwrap();
    assert!(e.to_string().contains("0 image placeholders"), "{e}");
    let e = s.generate_with_images(&prompt, &[], params).err().unwrap();
    assert!(e.to_string().contains("for 0 images"), "{e}");
}

/// A processor config that would cut images into too many tiles is refused at load, naming
/// the file and the field.
#[test]
fn too_many_tiles_are_refused() {
    let dir = std::env::temp_dir().join(format!("cyb-vlm-tiles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = fixtures().join("vlm/idefics3");
    for entry in std::fs::read_dir(&src).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    let pc = dir.join("processor_config.json");
    let mut c: Value = serde_json::from_str(&std::fs::read_to_string(&pc).unwrap()).unwrap();
    c["image_processor"]["size"]["longest_edge"] = 4000.into();
    std::fs::write(&pc, c.to_string()).unwrap();
    let e = runtime().load(&dir).err().unwrap().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        e.contains("processor_config.json") && e.contains("at most 64 tiles"),
        "{e}"
    );
}

/// A vision-language directory imported into a `.model` container (which keeps its image
/// processor) answers as the directory does.
#[test]
fn an_imported_model_answers_as_its_directory() {
    for family in ["llava", "idefics3"] {
        let r = reference(family);
        let src = cyb_format::open(fixtures().join("vlm").join(family)).unwrap();
        let out =
            std::env::temp_dir().join(format!("cyb-vlm-{family}-{}.model", std::process::id()));
        cyb_format::model_container::write_model(&src, &out, &Default::default()).unwrap();
        let model = runtime().load(&out).unwrap();
        let text = model
            .render_chat(&messages(&r["one"]["messages"]), true)
            .unwrap();
        let prompt = model.prompt_ids(&text, false).unwrap();
        let images = case_images(&r, "one");
        let mut s = model.generator(None).unwrap();
        let (got, _) = greedy_run(&mut s, &prompt, &images);
        std::fs::remove_file(&out).unwrap();
        assert_eq!(got, ids(&r["one"]["greedy"])[..8], "{family}");
    }
}
