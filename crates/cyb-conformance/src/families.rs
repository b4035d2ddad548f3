//! Every curated family's reference fixtures (tests/fixtures, made by tools/fixtures/ from
//! Hugging Face transformers) on one backend chain: the same checks the family's own tests make
//! on the reference, run on any backend.

use cyb_backend::Dispatcher;
use cyb_models::{
    BertModel, DebertaModel, EncoderOutput, JinaBertModel, LlamaModel, ModernBertModel, Pooling,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

type Check = std::result::Result<(), String>;
/// A family check on one backend chain.
type CheckFn = Box<dyn Fn(&Arc<Dispatcher>) -> Check>;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn json(path: &Path) -> std::result::Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// One family fixture: a name for messages and the check it runs on a dispatcher.
pub struct FamilyCase {
    pub name: String,
    pub check: CheckFn,
}

/// Every family's fixture cases.
pub fn all() -> Vec<FamilyCase> {
    let mut v = Vec::new();
    // LlamaStyle: each variant's GGUF files against transformers on the same weights (F32
    // 1e-5, F16 1e-3, quantized 1e-2 against the dequantized weights) and 32 greedy tokens.
    for variant in [
        "llama3", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3",
    ] {
        for (file, tag, tol) in [
            ("hf", "hf", 1e-5),
            ("model-f32.gguf", "hf", 1e-5),
            ("model-f16.gguf", "f16", 1e-3),
            ("model-q8_0.gguf", "q8_0", 1e-2),
            ("model-q4_0.gguf", "q4_0", 1e-2),
        ] {
            v.push(FamilyCase {
                name: format!("llama {variant} {file}"),
                check: Box::new(move |d| llama(variant, file, tag, tol, d)),
            });
        }
    }
    // BertStyle encoders: hidden states, pooled vectors and the task head of a padded batch.
    for variant in ["bert", "roberta", "xlm_roberta", "distilbert"] {
        v.push(FamilyCase {
            name: format!("bert {variant}"),
            check: Box::new(move |d| bert(&format!("bert/{variant}"), d)),
        });
    }
    v.push(FamilyCase {
        name: "bert modernbert".into(),
        check: Box::new(|d| modernbert("bert/modernbert", d)),
    });
    for variant in ["deberta_v2", "deberta_v3"] {
        v.push(FamilyCase {
            name: format!("bert {variant}"),
            check: Box::new(move |d| deberta(&format!("encoders/{variant}"), d)),
        });
    }
    v.push(FamilyCase {
        name: "bert jina_v2".into(),
        check: Box::new(|d| jina("encoders/jina_v2", d)),
    });
    // WhisperStyle: encoder states, teacher-forced decoder logits and cached greedy tokens.
    for variant in ["tiny80", "mel128", "shallow"] {
        v.push(FamilyCase {
            name: format!("whisper {variant}"),
            check: Box::new(move |d| whisper(variant, d)),
        });
    }
    v
}

fn within(what: &str, got: &[f32], want: &[f32], tol: f32) -> Check {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} values, reference {}",
            got.len(),
            want.len()
        ));
    }
    let e = crate::run::rel_err(got, want);
    if e > tol {
        return Err(format!("{what}: relative error {e:.3e} > {tol:.0e}"));
    }
    Ok(())
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64())
                .map(|x| x as u32)
                .collect()
        })
        .unwrap_or_default()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_f64())
                .map(|x| x as f32)
                .collect()
        })
        .unwrap_or_default()
}

fn llama(variant: &str, file: &str, tag: &str, tol: f32, d: &Arc<Dispatcher>) -> Check {
    let dir = fixtures().join("llama_family").join(variant);
    let r = json(&dir.join("reference.json"))?;
    let prompt = ids(&r["prompt"]);
    let vocab = r["vocab_size"].as_u64().unwrap_or(0) as usize;
    let refs = &r["references"][tag];
    let greedy = ids(&refs["greedy"]);
    let logits_file = dir.join(refs["logits"].as_str().unwrap_or_default());
    let want: Vec<f32> = std::fs::read(&logits_file)
        .map_err(|e| format!("{}: {e}", logits_file.display()))?
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let f = cyb_format::open(dir.join(file)).map_err(err)?;
    let model = LlamaModel::load(&f, d.clone()).map_err(err)?;
    let mut cache = model.new_cache(prompt.len() + greedy.len()).map_err(err)?;
    let logits = model.forward_all(&prompt, &mut cache).map_err(err)?;
    for (i, (a, b)) in logits.chunks(vocab).zip(want.chunks(vocab)).enumerate() {
        within(&format!("logits of position {i}"), a, b, tol)?;
    }
    let mut next = argmax(&logits[logits.len().saturating_sub(vocab)..]);
    let mut tokens = vec![next];
    while tokens.len() < greedy.len() {
        next = argmax(&model.forward(&[next], &mut cache).map_err(err)?);
        tokens.push(next);
    }
    if tokens != greedy {
        return Err(format!("greedy tokens {tokens:?}, reference {greedy:?}"));
    }
    Ok(())
}

fn sequences(r: &Value) -> Vec<Vec<u32>> {
    r["sequences"]
        .as_array()
        .map(|a| a.iter().map(|s| ids(&s["ids"])).collect())
        .unwrap_or_default()
}

/// Hidden states and pooled vectors of every sequence of `r`.
fn states(r: &Value, out: &EncoderOutput) -> Check {
    let refs = r["sequences"].as_array().cloned().unwrap_or_default();
    for (i, s) in refs.iter().enumerate() {
        let got = out
            .states
            .get(i)
            .ok_or("fewer sequences than the reference")?;
        within(&format!("seq {i} hidden"), got, &floats(&s["hidden"]), 1e-5)?;
        for p in [Pooling::Cls, Pooling::Mean, Pooling::Max] {
            let pooled = out.pool(p, false);
            let want = floats(&s["pooled"][p.name()]);
            within(&format!("seq {i} {}", p.name()), &pooled[i], &want, 1e-5)?;
        }
    }
    Ok(())
}

fn logits(r: &Value, got: &[Vec<f32>]) -> Check {
    let refs = r["sequences"].as_array().cloned().unwrap_or_default();
    for (i, s) in refs.iter().enumerate() {
        let g = got.get(i).ok_or("fewer sequences than the reference")?;
        within(&format!("seq {i} logits"), g, &floats(&s["logits"]), 1e-5)?;
    }
    Ok(())
}

fn bert(rel: &str, d: &Arc<Dispatcher>) -> Check {
    let r = json(&fixtures().join(rel).join("reference.json"))?;
    let f = cyb_format::open(fixtures().join(rel)).map_err(err)?;
    let m = BertModel::load(&f, d.clone()).map_err(err)?;
    let seqs = sequences(&r);
    states(&r, &m.hidden_states(&seqs).map_err(err)?)?;
    logits(&r, &m.sequence_logits(&seqs).map_err(err)?)
}

fn modernbert(rel: &str, d: &Arc<Dispatcher>) -> Check {
    let r = json(&fixtures().join(rel).join("reference.json"))?;
    let f = cyb_format::open(fixtures().join(rel)).map_err(err)?;
    let m = ModernBertModel::load(&f, d.clone()).map_err(err)?;
    states(&r, &m.hidden_states(&sequences(&r)).map_err(err)?)
}

fn deberta(rel: &str, d: &Arc<Dispatcher>) -> Check {
    let r = json(&fixtures().join(rel).join("reference.json"))?;
    let f = cyb_format::open(fixtures().join(rel)).map_err(err)?;
    let m = DebertaModel::load(&f, d.clone()).map_err(err)?;
    let seqs = sequences(&r);
    states(&r, &m.hidden_states(&seqs).map_err(err)?)?;
    logits(&r, &m.sequence_logits(&seqs).map_err(err)?)
}

fn jina(rel: &str, d: &Arc<Dispatcher>) -> Check {
    let r = json(&fixtures().join(rel).join("reference.json"))?;
    let f = cyb_format::open(fixtures().join(rel)).map_err(err)?;
    let m = JinaBertModel::load(&f, d.clone()).map_err(err)?;
    states(&r, &m.hidden_states(&sequences(&r)).map_err(err)?)
}

fn whisper(variant: &str, d: &Arc<Dispatcher>) -> Check {
    let dir = fixtures().join("whisper").join(variant);
    let file = cyb_format::open(&dir).map_err(err)?;
    let r = cyb_format::safetensors::SafetensorsFile::open(dir.join("reference.safetensors"))
        .map_err(err)?;
    let f32s = |name: &str| -> std::result::Result<Vec<f32>, String> {
        r.tensor(name).and_then(|t| t.to_f32_vec()).map_err(err)
    };
    let ids = |name: &str| -> std::result::Result<Vec<u32>, String> {
        let v = r.tensor(name).and_then(|t| t.to_i64_vec()).map_err(err)?;
        Ok(v.into_iter().map(|x| x as u32).collect())
    };
    let model = cyb_models::WhisperModel::load(&file, d.clone()).map_err(err)?;
    let audio = model.encode(&f32s("input_features")?).map_err(err)?;
    let states = d.to_host_f32(&audio.states).map_err(err)?;
    within(
        "encoder states",
        &states,
        &f32s("encoder_hidden_states")?,
        1e-5,
    )?;
    let input = ids("decoder_input_ids")?;
    let all: Vec<usize> = (0..input.len()).collect();
    let mut cache = model.new_cache().map_err(err)?;
    let rows = model
        .decode(&audio, &[&input], std::slice::from_mut(&mut cache), &all)
        .map_err(err)?;
    let logits: Vec<f32> = rows.into_iter().flatten().flatten().collect();
    // Cross-attention keys and values kept in f16 (the cpu backend with AVX-512) round them to
    // 2^-11: a few 1e-5 of the logits.
    let half = audio.cross.layer(0).map_err(err)?.0.dtype() == cyb_tensor::DType::F16;
    let tol = if half { 1e-4 } else { 1e-5 };
    within("decoder logits", &logits, &f32s("decoder_logits")?, tol)?;
    let prefix = ids("greedy_prefix")?;
    let want = ids("greedy_ids")?;
    let mut cache = model.new_cache().map_err(err)?;
    let mut next_in = prefix.clone();
    let mut got = Vec::new();
    for _ in 0..want.len() {
        let at = [next_in.len() - 1];
        let row = model
            .decode(&audio, &[&next_in], std::slice::from_mut(&mut cache), &at)
            .map_err(err)?
            .into_iter()
            .flatten()
            .next()
            .unwrap_or_default();
        let best = (0..row.len())
            .max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a)))
            .unwrap_or(0) as u32;
        got.push(best);
        next_in = vec![best];
    }
    if got != want {
        return Err(format!("greedy tokens {got:?}, want {want:?}"));
    }
    Ok(())
}
