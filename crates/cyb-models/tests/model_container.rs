//! `.model` round trips: a GGUF file or a Hugging Face directory imported into a `.model`
//! container gives a LlamaStyle model whose logits are bit-identical to the source's (the
//! tensors are copied byte for byte, so any difference would be a container bug).

use cyb_backend::Dispatcher;
use cyb_format::model_container::{write_model, WriteOptions};
use cyb_format::ModelFile;
use cyb_models::LlamaModel;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn fixture(variant: &str, file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/llama_family")
        .join(variant)
        .join(file)
}

fn logits(file: &ModelFile) -> Vec<u32> {
    let model = LlamaModel::load(file, Arc::new(Dispatcher::reference())).unwrap();
    let prompt = [1u32, 5, 9, 2, 7, 3, 11, 4];
    let mut cache = model.new_cache(prompt.len()).unwrap();
    let l = model.forward_all(&prompt, &mut cache).unwrap();
    assert!(l.iter().all(|x| x.is_finite()));
    l.iter().map(|x| x.to_bits()).collect()
}

fn import(src: &Path, tag: &str) -> (ModelFile, PathBuf) {
    let out =
        std::env::temp_dir().join(format!("cyb-model-test-{}-{tag}.model", std::process::id()));
    let source = cyb_format::open(src).unwrap();
    let root = write_model(&source, &out, &WriteOptions::default()).unwrap();
    let m = cyb_format::open(&out).unwrap();
    let info = m.container().expect("opened as a container");
    assert_eq!(info.root, root);
    m.verify().unwrap();
    (m, out)
}

#[test]
fn gguf_to_model_gives_bit_identical_logits() {
    for variant in ["qwen2", "gemma3", "phi3"] {
        for file in ["model-q8_0.gguf", "model-f16.gguf"] {
            let src = fixture(variant, file);
            let (m, out) = import(&src, &format!("{variant}-{file}"));
            assert!(matches!(m, ModelFile::Gguf(_)));
            let a = logits(&cyb_format::open(&src).unwrap());
            let b = logits(&m);
            std::fs::remove_file(out).ok();
            assert!(a == b, "{variant} {file}: logits differ after import");
        }
    }
}

#[test]
fn hf_dir_to_model_gives_equal_tensors_and_bit_identical_logits() {
    for variant in ["qwen2", "llama3"] {
        let src = fixture(variant, "hf");
        let orig = cyb_format::open(&src).unwrap();
        let (m, out) = import(&src, &format!("{variant}-hf"));
        assert!(matches!(m, ModelFile::HuggingFace(_)));
        assert_eq!(orig.tensors().len(), m.tensors().len());
        for t in orig.tensors() {
            let a = orig.tensor(&t.name).unwrap();
            let b = m.tensor(&t.name).unwrap();
            assert_eq!(a.shape(), b.shape(), "{}", t.name);
            assert_eq!(a.dtype(), b.dtype(), "{}", t.name);
            assert_eq!(
                a.host_bytes().unwrap(),
                b.host_bytes().unwrap(),
                "{}",
                t.name
            );
        }
        assert_eq!(orig.config().unwrap(), m.config().unwrap());
        let same = logits(&orig) == logits(&m);
        std::fs::remove_file(out).ok();
        assert!(same, "{variant}: logits differ after import");
    }
}

/// `--quant Q8_0` from the F32 GGUF quantizes exactly the tensors gguf-py's Q8_0 conversion of
/// the same model quantized (matrices, not vectors), byte for byte, so it computes the same
/// logits as that file.
#[test]
fn quant_q8_0_matches_the_reference_q8_0_conversion() {
    let variant = "qwen2";
    let source = cyb_format::open(fixture(variant, "model-f32.gguf")).unwrap();
    let out =
        std::env::temp_dir().join(format!("cyb-model-test-{}-quant.model", std::process::id()));
    let opts = WriteOptions {
        quant: Some(cyb_tensor::DType::Q8_0),
        ..Default::default()
    };
    write_model(&source, &out, &opts).unwrap();
    let m = cyb_format::open(&out).unwrap();
    m.verify().unwrap();
    let reference = cyb_format::open(fixture(variant, "model-q8_0.gguf")).unwrap();
    for t in reference.tensors() {
        let ours = m.tensors().into_iter().find(|u| u.name == t.name).unwrap();
        assert_eq!(
            (&ours.type_name, &ours.shape),
            (&t.type_name, &t.shape),
            "{}",
            t.name
        );
        let a = m.tensor(&t.name).unwrap();
        let b = reference.tensor(&t.name).unwrap();
        assert_eq!(
            a.host_bytes().unwrap(),
            b.host_bytes().unwrap(),
            "{}",
            t.name
        );
    }
    assert_eq!(m.tensors().len(), reference.tensors().len());
    let same = logits(&m) == logits(&reference);
    std::fs::remove_file(out).ok();
    assert!(same, "logits differ from the reference Q8_0 file's");
}

/// A soma directory (tests/fixtures/tiny_chat/soma, written by tools/fixtures/make_soma_fixture.py
/// from the Hugging Face directory beside it) and the `.model` imported from it compute that
/// directory's logits bit for bit.
#[test]
fn soma_dir_to_model_gives_the_hf_dirs_logits() {
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny_chat");
    let want = logits(&cyb_format::open(tiny.join("hf")).unwrap());
    let direct = logits(&cyb_format::open(tiny.join("soma")).unwrap());
    let (m, out) = import(&tiny.join("soma"), "soma");
    assert!(matches!(m, ModelFile::HuggingFace(_)));
    let imported = logits(&m);
    std::fs::remove_file(out).ok();
    assert!(
        direct == want,
        "the soma directory's logits differ from the HF directory's"
    );
    assert!(imported == want, "logits differ after import");
}
