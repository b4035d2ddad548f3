//! `.model` files holding a graph (imported from ONNX) and imported from a soma directory.
//!
//! Graphs: every model of ONNX's own test data (Debian's `libonnx-testdata`) that imports
//! comes back from its `.model` equal node for node, constant for constant; hostile graph
//! containers are refused with named errors. Soma: the directory made from the tiny chat model's
//! Hugging Face directory (tools/fixtures/make_soma_fixture.py) opens as that model (same
//! config, same tensor bytes) and imports into a `.model` that holds the same.

mod prepared;

use cyb_format::model_container::{
    graph_from_bytes, write_graph_to, write_to, KeepRule, Progress, WriteOptions,
};
use cyb_format::{ModelFile, SharedBytes};
use cyb_tensor::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn onnx_data() -> Option<PathBuf> {
    let dir = PathBuf::from("/usr/share/libonnx-testdata/data");
    if dir.join("node").is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "ONNX test data not found at {} (apt-get install libonnx-testdata)",
        dir.display()
    );
    None
}

fn graph_bytes(g: &cyb_graph::Graph, origin: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    write_graph_to(g, origin, &mut out, &mut |_| {}).unwrap();
    out
}

fn shared(b: Vec<u8>) -> SharedBytes {
    Arc::new(b)
}

#[test]
fn onnx_graphs_come_back_equal_from_their_model_files() {
    let Some(data) = onnx_data() else {
        return;
    };
    let (mut checked, mut with_tensors) = (0, 0);
    for suite in ["node", "pytorch-converted", "pytorch-operator", "simple"] {
        let mut cases: Vec<PathBuf> = std::fs::read_dir(data.join(suite))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        cases.sort();
        for case in cases {
            let onnx = case.join("model.onnx");
            // Models our importer does not take yet are onnx_node_tests' business.
            let Ok(g) = prepared::load_onnx(&onnx) else {
                continue;
            };
            let bytes = graph_bytes(&g, &onnx);
            let back = graph_from_bytes(shared(bytes), Path::new("t.model"))
                .unwrap_or_else(|e| panic!("{}: {e}", case.display()));
            assert!(back.graph == g, "{}: graph differs", case.display());
            assert_eq!(back.info.source, "graph");
            checked += 1;
            with_tensors += usize::from(!back.info.tensors.is_empty());
        }
    }
    // Most of the suite imports (onnx_node_tests counts it); the large constants of some are
    // stored as container tensors.
    assert!(
        checked > 800 && with_tensors > 20,
        "{checked} {with_tensors}"
    );
}

fn reason(e: Error) -> String {
    match e {
        Error::Format { reason, .. } => reason,
        other => panic!("expected a Format error, got {other}"),
    }
}

#[test]
fn hostile_graph_models_are_refused_naming_the_problem() {
    let Some(data) = onnx_data() else {
        return;
    };
    let onnx = data.join("pytorch-converted/test_Linear/model.onnx");
    let g = prepared::load_onnx(&onnx).unwrap();
    let good = graph_bytes(&g, &onnx);
    let back = graph_from_bytes(shared(good.clone()), Path::new("t.model")).unwrap();
    assert_eq!(back.info.tensors.len(), 1, "the 8x10 weight is a tensor");

    // Opened as a weights model it says what it is.
    let e = cyb_format::model_container::from_bytes(shared(good.clone()), "t.model").unwrap_err();
    assert!(reason(e).contains("holds a graph"));

    // The graph section renamed away: a graph model without a graph.
    let text = String::from_utf8_lossy(&good).into_owned();
    let at = text.find("~~~graph ").unwrap();
    let mut b = good.clone();
    b[at + 3..at + 8].copy_from_slice(b"GRAPH");
    assert!(graph_from_bytes(shared(b), Path::new("t.model")).is_err());

    // The constant's `@` replaced by inline data of the same length: the tensor is then not a
    // constant the graph reads, which the writer never produces.
    let name = back.info.tensors[0].name.clone();
    let needle = format!("const \"{name}\" = @");
    let pos = text.find(&needle).unwrap() + needle.len() - 1;
    let mut b = good.clone();
    b[pos] = b'?';
    let e = graph_from_bytes(shared(b), Path::new("t.model")).unwrap_err();
    assert!(reason(e).contains("section \"graph\""));

    // Any flipped header byte gives Ok or an error, never a panic.
    let header_len = text.find("~~~end\n").unwrap() + 7;
    for i in 0..header_len {
        for bit in [0x01, 0x20, 0x80] {
            let mut b = good.clone();
            b[i] ^= bit;
            let _ = graph_from_bytes(shared(b), Path::new("t.model"));
        }
    }

    // Every truncation is an error, never a panic.
    for n in (0..good.len()).step_by(7) {
        assert!(graph_from_bytes(shared(good[..n].to_vec()), Path::new("t.model")).is_err());
    }
}

fn tiny_chat(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny_chat")
        .join(rel)
}

fn hf(m: &ModelFile) -> &cyb_format::HfModel {
    match m {
        ModelFile::HuggingFace(h) => h,
        ModelFile::Gguf(_) => panic!("expected a Hugging Face model"),
    }
}

fn same_model(a: &ModelFile, b: &ModelFile) {
    assert_eq!(a.config().unwrap(), b.config().unwrap());
    assert_eq!(a.tensors().len(), b.tensors().len());
    for t in a.tensors() {
        let (x, y) = (a.tensor(&t.name).unwrap(), b.tensor(&t.name).unwrap());
        assert_eq!((x.dtype(), x.dims()), (y.dtype(), y.dims()), "{}", t.name);
        assert_eq!(x.host_bytes(), y.host_bytes(), "{}", t.name);
    }
}

#[test]
fn soma_dir_opens_as_its_hf_model_and_imports() {
    let src = cyb_format::open(tiny_chat("hf")).unwrap();
    let soma = cyb_format::open(tiny_chat("soma")).unwrap();
    same_model(&src, &soma);
    let (h, s) = (hf(&src), hf(&soma));
    let tc = s.tokenizer_config.as_ref().unwrap();
    let template = std::fs::read_to_string(tiny_chat("hf/chat_template.jinja")).unwrap();
    assert_eq!(tc["chat_template"].as_str(), Some(template.as_str()));
    let htc = h.tokenizer_config.as_ref().unwrap();
    for k in ["bos_token", "eos_token", "pad_token"] {
        assert_eq!(tc[k], htc[k], "{k}");
    }
    let gen = s.generation_config.as_ref().unwrap();
    assert_eq!(gen["max_new_tokens"], 64);
    assert_eq!(
        gen["eos_token_id"],
        h.generation_config.as_ref().unwrap()["eos_token_id"]
    );
    assert!(s
        .tokenizer_json
        .as_ref()
        .unwrap()
        .ends_with("tokenizer.json"));

    let mut seen: Vec<(usize, usize, u64, u64)> = Vec::new();
    let mut out = Vec::new();
    let report = write_to(
        &soma,
        &mut out,
        &WriteOptions::default(),
        &mut |p: Progress<'_>| seen.push((p.done, p.count, p.done_bytes, p.total_bytes)),
    )
    .unwrap();
    let (done, count, bytes, total) = *seen.last().unwrap();
    assert_eq!((done, bytes), (count, total));
    assert_eq!(seen.len(), count + 1);
    assert!(report
        .tensors
        .iter()
        .all(|t| t.from == t.to && t.rule.is_none()));
    assert!(String::from_utf8_lossy(&out).contains("imported_from = \"soma\""));
    let m = cyb_format::model_container::from_bytes(shared(out), "t.model").unwrap();
    same_model(&src, &m);
    m.verify().unwrap();

    // --keep rules apply to soma imports like to any other.
    let opts = WriteOptions {
        quant: None,
        keep: vec![KeepRule::parse("lm_head.weight=Q8_0").unwrap()],
    };
    let mut out = Vec::new();
    let report = write_to(&soma, &mut out, &opts, &mut |_| {}).unwrap();
    let lm = report
        .tensors
        .iter()
        .find(|t| t.name == "lm_head.weight")
        .unwrap();
    assert_eq!((lm.from.as_str(), lm.to.as_str()), ("F32", "Q8_0"));
    let m = cyb_format::model_container::from_bytes(shared(out), "t.model").unwrap();
    let e = m
        .tensors()
        .into_iter()
        .find(|t| t.name == "lm_head.weight")
        .unwrap();
    assert_eq!(e.type_name, "Q8_0");
}

#[test]
fn bad_soma_dirs_are_refused_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("cyb-soma-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = tiny_chat("soma");
    for f in ["config.toml", "tokenizer.json", "weights.safetensors"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    assert!(cyb_format::open(&dir).is_ok());
    let config = std::fs::read_to_string(src.join("config.toml")).unwrap();
    for (extra, says) in [
        ("weights = \"../escape.safetensors\"\n", "plain path"),
        ("weights = \"model.gguf\"\n", "only safetensors"),
        ("weights = 3\n", "file name"),
        ("[components.gpt]\nweights = \"a.pth\"\n", "multi-component"),
        ("this is not toml\n", "invalid TOML"),
    ] {
        let text = if extra.starts_with('[') {
            format!("{config}\n{extra}")
        } else {
            format!("{extra}{config}")
        };
        std::fs::write(dir.join("config.toml"), text).unwrap();
        let e = cyb_format::open(&dir).unwrap_err();
        let r = e.to_string();
        assert!(r.contains(says), "{extra}: {r}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
