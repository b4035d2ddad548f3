//! `cyb-llm import` end to end on the tiny chat model (tests/fixtures/tiny_chat, reference.json
//! from transformers via tools/fixtures/make_tiny_chat_fixture.py): the `.model` written from the
//! GGUF file, from the Hugging Face directory and from the soma directory made of it
//! (tools/fixtures/make_soma_fixture.py) answers exactly like transformers (so the tokenizer,
//! chat template and weights all came through), `inspect` shows the root that `import` printed,
//! and a corrupted file is refused naming the tensor. `--keep` rules decide tensor types, bad
//! ones are refused; an ONNX graph imported into a `.model` runs with bit-identical outputs; a
//! CTranslate2 Whisper directory imports under transformers' tensor names.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny_chat")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cyb-import-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// (success, stdout, stderr); never a panic.
fn cyb(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cyb-llm"))
        .args(args)
        .env("CYB_CACHE", scratch("cache"))
        .env("XDG_CACHE_HOME", scratch("xdg"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains("panicked"), "{args:?} panicked:\n{stderr}");
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        stderr,
    )
}

fn expected_answer() -> (String, String) {
    let text = std::fs::read_to_string(fixture("reference.json")).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    let prompt = r["chat"]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    // The answer stops at eos, which `run` does not print.
    let text = r["chat"]["greedy_stop_at_eos"]["text"].as_str().unwrap();
    (prompt, text.strip_suffix("<|im_end|>").unwrap().to_string())
}

#[test]
fn imported_models_answer_like_the_reference_and_show_their_root() {
    let (prompt, want) = expected_answer();
    for (src, name) in [
        ("model-f32.gguf", "from_gguf.model"),
        ("hf", "from_hf.model"),
        ("soma", "from_soma.model"),
    ] {
        let out = scratch(name);
        let out_s = out.to_string_lossy().into_owned();
        let (ok, stdout, stderr) = cyb(&["import", &fixture(src), "-o", &out_s]);
        assert!(ok, "{src}: {stderr}");
        let root = stdout.split_whitespace().next().unwrap().to_string();
        assert_eq!(root.len(), 64, "{stdout}");

        let (ok, stdout, stderr) =
            cyb(&["run", &out_s, &prompt, "--temp", "0", "-n", "8", "--verify"]);
        assert!(ok, "{src}: {stderr}");
        assert_eq!(stdout, format!("{want}\n"), "{src}");

        let (ok, stdout, stderr) = cyb(&["inspect", "--verify", "--json", &out_s]);
        assert!(ok, "{src}: {stderr}");
        let j: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(j["root"].as_str(), Some(root.as_str()));
        assert_eq!(j["format"].as_str(), Some("model"));

        // Flip one byte of the last tensor: inspect still lists it, --verify names it.
        let mut bytes = std::fs::read(&out).unwrap();
        let last = j["tensors"].as_array().unwrap().last().unwrap().clone();
        let at = last["offset"].as_u64().unwrap() as usize;
        bytes[at] ^= 0x10;
        let bad = scratch(&format!("bad_{name}"));
        std::fs::write(&bad, &bytes).unwrap();
        let bad_s = bad.to_string_lossy().into_owned();
        assert!(cyb(&["inspect", &bad_s]).0);
        let (ok, _, stderr) = cyb(&["inspect", "--verify", &bad_s]);
        assert!(!ok);
        let tensor = last["name"].as_str().unwrap();
        assert!(
            stderr.contains(tensor) && stderr.contains("blake3"),
            "{stderr}"
        );
    }
}

#[test]
fn import_refuses_bad_arguments() {
    let out = scratch("x.model").to_string_lossy().into_owned();
    let (ok, _, stderr) = cyb(&["import", &fixture("hf"), "-o", &out, "--quant", "F16"]);
    assert!(!ok && stderr.contains("not a quantized type"), "{stderr}");
    let (ok, _, stderr) = cyb(&["import", &fixture("nope"), "-o", &out]);
    assert!(!ok && stderr.contains("nope"), "{stderr}");
}

/// A CTranslate2 Whisper directory (tests/fixtures/ct2, tools/fixtures/make_ct2_fixture.py)
/// inspects as `ctranslate2` under transformers' names and imports into a `.model` holding the
/// same tensors: its int8 weights dequantized to F32, the rest float16 as in the source.
#[test]
fn ctranslate2_directory_imports_under_transformers_names() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/ct2/int8_float16")
        .to_string_lossy()
        .into_owned();
    let (ok, stdout, stderr) = cyb(&["inspect", "--json", &src]);
    assert!(ok, "{stderr}");
    let j: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(j["format"], "ctranslate2");
    assert_eq!(j["architecture"], "whisper");
    let out = scratch("whisper_ct2.model").to_string_lossy().into_owned();
    let (ok, stdout, stderr) = cyb(&["import", &src, "-o", &out]);
    assert!(ok, "{stderr}");
    let root = stdout.split_whitespace().next().unwrap().to_string();
    let (ok, stdout, stderr) = cyb(&["inspect", "--json", &out]);
    assert!(ok, "{stderr}");
    let j: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (j["format"].as_str(), j["root"].as_str()),
        (Some("model"), Some(&*root))
    );
    let (before, after) = (tensor_types(&src), tensor_types(&out));
    assert_eq!(before, after);
    assert_eq!(
        after["model.encoder.layers.1.self_attn.k_proj.weight"],
        "F32"
    );
    assert_eq!(after["model.decoder.embed_tokens.weight"], "F32");
    assert_eq!(
        after["model.decoder.layers.0.encoder_attn.v_proj.bias"],
        "F16"
    );
    assert!(!after.contains_key("model.encoder.layers.0.self_attn.k_proj.bias"));
}

/// `inspect --json`'s tensor name -> dtype.
fn tensor_types(model: &str) -> std::collections::BTreeMap<String, String> {
    let (ok, stdout, stderr) = cyb(&["inspect", "--json", model]);
    assert!(ok, "{stderr}");
    let j: Value = serde_json::from_str(&stdout).unwrap();
    j["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["dtype"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn keep_rules_override_the_requantization_per_tensor() {
    let out = scratch("keep.model").to_string_lossy().into_owned();
    // The tiny model's rows are 32 or 64 values: Q4_K (256) does not fit, so bare --quant
    // (Q4_K) falls back to Q5_0 for the matrices, as llama-quantize does.
    let (ok, stdout, stderr) = cyb(&[
        "import",
        &fixture("model-f32.gguf"),
        "-o",
        &out,
        "--quant",
        "--keep",
        "output.weight=Q8_0",
        "--keep",
        "*.attn_v.weight=f16",
        "--keep",
        "token_embd.weight=keep",
        "--keep",
        "*_norm.weight=keep",
        "--keep",
        "blk.?.ffn_*=Q4_0",
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout.split_whitespace().next().unwrap().len(), 64);
    assert!(
        stderr.contains("output.weight F32 -> Q8_0 (--keep output.weight)"),
        "{stderr}"
    );
    let types = tensor_types(&out);
    let source = tensor_types(&fixture("model-f32.gguf"));
    assert_eq!(types.len(), source.len());
    let mut seen = [0usize; 5];
    for (name, ty) in &types {
        let (k, want) = if name == "output.weight" {
            (0, "Q8_0")
        } else if name.ends_with(".attn_v.weight") {
            (1, "F16")
        } else if name == "token_embd.weight" || name.ends_with("_norm.weight") {
            (2, source[name].as_str())
        } else if name.contains(".ffn_") {
            (3, "Q4_0")
        } else {
            (4, "Q5_0")
        };
        seen[k] += 1;
        assert_eq!(ty, want, "{name}");
    }
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    // The requantized model still runs.
    let (ok, stdout, stderr) = cyb(&["run", &out, "hi", "--temp", "0", "-n", "4"]);
    assert!(ok && !stdout.is_empty(), "{stderr}");

    // Without --keep, bare --quant: matrices Q5_0 (the Q4_K fallback), vectors as they were.
    let out2 = scratch("quant.model").to_string_lossy().into_owned();
    let (ok, _, stderr) = cyb(&["import", &fixture("hf"), "-o", &out2, "--quant"]);
    assert!(ok, "{stderr}");
    for (name, ty) in tensor_types(&out2) {
        let want = if name.contains("norm") { "F32" } else { "Q5_0" };
        assert_eq!(ty, want, "{name}");
    }
}

#[test]
fn bad_keep_rules_are_refused_and_write_nothing() {
    let out = scratch("badkeep.model");
    let out_s = out.to_string_lossy().into_owned();
    let gguf = fixture("model-f32.gguf");
    for (keep, says) in [
        ("nothing.*=Q8_0", "matches no tensor"),
        ("output.weight=Q6_K", "output.weight"),
        ("output.weight", "NAME_PATTERN=TYPE"),
        ("output.weight=I32", "not a type"),
        ("output.weight=Q9_K", "not a type"),
    ] {
        let (ok, _, stderr) = cyb(&["import", &gguf, "-o", &out_s, "--keep", keep]);
        assert!(!ok && stderr.contains(says), "{keep}: {stderr}");
        assert!(!out.exists(), "{keep}: a refused import left {out_s}");
    }
    // A later rule whose tensors an earlier one took matches nothing.
    let (ok, _, stderr) = cyb(&[
        "import",
        &gguf,
        "-o",
        &out_s,
        "--keep",
        "*=keep",
        "--keep",
        "output.weight=Q8_0",
    ]);
    assert!(!ok && stderr.contains("output.weight"), "{stderr}");
}

/// ONNX's own test models (libonnx-testdata) with initializers; `None` outside CI when the
/// package is missing.
fn onnx_model(name: &str) -> Option<PathBuf> {
    let d = Path::new("/usr/share/libonnx-testdata/data/pytorch-converted").join(name);
    if d.is_dir() {
        return Some(d);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{} missing (apt-get install libonnx-testdata)",
        d.display()
    );
    None
}

#[test]
fn onnx_import_runs_with_bit_identical_outputs() {
    for name in ["test_Conv2d", "test_Linear", "test_BatchNorm2d_eval"] {
        let Some(dir) = onnx_model(name) else {
            return;
        };
        let onnx = dir.join("model.onnx").to_string_lossy().into_owned();
        let out = scratch(&format!("{name}.model"))
            .to_string_lossy()
            .into_owned();
        let (ok, stdout, stderr) = cyb(&["import", &onnx, "-o", &out]);
        assert!(ok, "{name}: {stderr}");
        assert_eq!(stdout.split_whitespace().next().unwrap().len(), 64);
        let root = stdout.split_whitespace().next().unwrap().to_string();
        let (ok, stdout, stderr) = cyb(&["inspect", "--verify", "--json", &out]);
        assert!(ok, "{name}: {stderr}");
        let j: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(j["root"].as_str(), Some(root.as_str()), "{name}");
        assert_eq!(
            j["format_version"].as_str(),
            Some("v1, from graph"),
            "{name}"
        );
        let (ok, text_model, stderr) = cyb(&["graph", &out]);
        assert!(ok, "{name}: {stderr}");
        let (ok, text_onnx, stderr) = cyb(&["graph", &onnx]);
        assert!(ok && text_model == text_onnx, "{name}: {stderr}");
        let (ok, _, stderr) = cyb(&["import", &onnx, "-o", &out, "--quant", "Q8_0"]);
        assert!(!ok && stderr.contains("--quant"), "{stderr}");

        let (_, input) =
            cyb_format::onnx::read_tensor_pb(&dir.join("test_data_set_0/input_0.pb")).unwrap();
        let npy = scratch(&format!("{name}_input.npy"));
        write_f32_npy(&npy, input.dims(), &input.to_f32_vec().unwrap());
        let graph = cyb_runtime::read_graph(Path::new(&onnx)).unwrap();
        let input_name = graph.name_of(graph.inputs[0]).to_string();
        let spec = format!("{input_name}={}", npy.display());
        let mut outputs = Vec::new();
        for (model, tag) in [(&onnx, "onnx"), (&out, "model")] {
            let dir_out = scratch(&format!("{name}_out_{tag}"));
            let d = dir_out.to_string_lossy().into_owned();
            let (ok, _, stderr) = cyb(&["infer", model, "--input", &spec, "--output", &d]);
            assert!(ok, "{name} {tag}: {stderr}");
            let mut files: Vec<_> = std::fs::read_dir(&dir_out)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            files.sort();
            let bytes: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
            assert!(!bytes.is_empty(), "{name} {tag}: no outputs");
            outputs.push(bytes);
        }
        assert!(
            outputs[0] == outputs[1],
            "{name}: outputs differ after import"
        );
    }
}

fn write_f32_npy(path: &Path, dims: &[usize], v: &[f32]) {
    let dims: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    let tuple = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {tuple}, }}");
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    bytes.extend_from_slice(dict.as_bytes());
    for x in v {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}
