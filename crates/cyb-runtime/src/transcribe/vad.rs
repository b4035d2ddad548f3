//! Voice activity detection with Silero VAD v5: the `silero_vad.onnx` of the PyPI package
//! silero-vad 5.1.2 (`tools/fetch_silero_vad.sh` puts it in the cache), run as an ONNX graph
//! through the dispatcher.
//!
//! The model reads 512 new samples at 16 kHz behind the last 64 samples of the chunk before
//! (zeros before the first), carries a `[2, 1, 128]` LSTM state from chunk to chunk, and gives
//! the probability that the chunk holds speech. The file branches (ONNX `If`) on the sample
//! rate and on shapes; at load the graph is specialized to 16 kHz and one chunk, so those
//! branches fold away and it runs as one flat graph. [`SileroVad::speech_probabilities`] runs a
//! whole recording as faster-whisper's `SileroVADModel` does (zero padding to whole chunks);
//! [`super::speech_chunks`] turns the probabilities into speech spans.

use super::speech_chunks::{speech_timestamps_from_probs, VadOptions};
use cyb_backend::Dispatcher;
use cyb_graph::{ExecPlan, Executor, Graph};
use cyb_tensor::{DType, Error, Result, Tensor};
use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The sample rate the VAD runs at.
pub const VAD_SAMPLE_RATE: usize = 16_000;
/// New samples per model call at 16 kHz.
pub const VAD_WINDOW: usize = 512;
/// Samples of the previous chunk the model sees before the new ones.
pub const VAD_CONTEXT: usize = 64;
/// The LSTM state: `[2, 1, 128]` (hidden and cell).
const STATE_DIMS: [usize; 3] = [2, 1, 128];
const STATE_LEN: usize = 2 * 128;

/// A loaded Silero VAD v5 model.
pub struct SileroVad {
    graph: Graph,
    /// The graph's execution plan, once it is specialized and prepared.
    plan: Option<ExecPlan>,
    dispatcher: Arc<Dispatcher>,
    path: PathBuf,
}

/// What the model carries from one chunk to the next.
#[derive(Clone, Debug, PartialEq)]
pub struct VadState {
    /// The LSTM state, `[2, 1, 128]` row-major.
    lstm: Vec<f32>,
    /// The last [`VAD_CONTEXT`] samples of the previous chunk.
    context: [f32; VAD_CONTEXT],
}

impl Default for VadState {
    /// The state before the first chunk: zeros.
    fn default() -> VadState {
        VadState {
            lstm: vec![0.0; STATE_LEN],
            context: [0.0; VAD_CONTEXT],
        }
    }
}

impl VadState {
    /// The LSTM state, `[2, 1, 128]` row-major.
    pub fn lstm(&self) -> &[f32] {
        &self.lstm
    }
}

impl SileroVad {
    /// Where `tools/fetch_silero_vad.sh` puts the model: `<cache>/silero-vad/silero_vad.onnx`.
    pub fn default_path() -> PathBuf {
        crate::cache_dir()
            .join("silero-vad")
            .join("silero_vad.onnx")
    }

    /// Loads the model at `path`, run by the cpu backend (its own small chain: the fast CPU
    /// kernels, then the CPU reference), whatever backend the recognizer uses: the model is a
    /// few small convolutions and one LSTM cell per 32 ms of audio, not worth a device.
    pub fn load(path: &Path) -> Result<SileroVad> {
        let cpu = crate::RuntimeOptions::default().cpu_backend()?;
        SileroVad::load_with(path, Arc::new(Dispatcher::new(vec![cpu])))
    }

    /// Loads the model at `path`, run through `dispatcher`. A file that is not Silero VAD v5
    /// (other inputs or outputs, or outputs of other shapes on a silent chunk) is an error
    /// naming the file.
    pub fn load_with(path: &Path, dispatcher: Arc<Dispatcher>) -> Result<SileroVad> {
        if !path.is_file() {
            return Err(Error::InvalidConfig {
                field: "vad model".into(),
                reason: format!(
                    "{} is absent; run tools/fetch_silero_vad.sh to fetch Silero VAD v5 \
                     (or give the path of its silero_vad.onnx)",
                    path.display()
                ),
            });
        }
        let graph = cyb_format::model_container::load_graph(path)
            .map_err(|e| not_silero(path, &e.to_string()))?;
        let mut vad = SileroVad {
            graph,
            plan: None,
            dispatcher,
            path: path.to_path_buf(),
        };
        vad.check_signature()?;
        let g = &mut vad.graph;
        cyb_graph::bind_input(g, "sr", Tensor::from_i64(&[], &[VAD_SAMPLE_RATE as i64])?)
            .and_then(|()| cyb_graph::fix_input_dims(g, "input", &[1, VAD_CONTEXT + VAD_WINDOW]))
            .and_then(|()| cyb_graph::fix_input_dims(g, "state", &STATE_DIMS))
            .and_then(|()| cyb_graph::prepare(g))
            .map_err(|e| not_silero(path, &e.to_string()))?;
        // Convolutions absorb the activations after them where the backend has the kernel.
        if cyb_graph::infer_types(g).is_ok() {
            cyb_graph::fuse_for_backend(g, vad.dispatcher.primary().as_ref());
        }
        vad.plan = Some(ExecPlan::new(g).map_err(|e| not_silero(path, &e.to_string()))?);
        // One silent chunk: the outputs must be one probability and a state of the same shape,
        // and a graph that cannot run on it is no Silero VAD either.
        let mut state = VadState::default();
        vad.chunk_probability(&mut state, &[0.0; VAD_WINDOW])
            .map_err(|e| match e {
                Error::InvalidConfig { .. } => e,
                other => not_silero(path, &other.to_string()),
            })?;
        Ok(vad)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The graph as it runs: specialized to 16 kHz and one chunk, and prepared.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Inputs `input` F32 `[batch, samples]`, `state` F32 `[2, batch, 128]`, `sr` I64 scalar;
    /// outputs `output` and `stateN`.
    fn check_signature(&self) -> Result<()> {
        let g = &self.graph;
        let input = |name: &str, dtype: DType, rank: usize| {
            let id = g
                .inputs
                .iter()
                .copied()
                .find(|&i| g.name_of(i) == name)
                .ok_or_else(|| not_silero(&self.path, &format!("it has no input {name:?}")))?;
            match &g.values[id].ty {
                Some(t) if t.dtype != dtype || t.dims.as_ref().is_some_and(|d| d.len() != rank) => {
                    Err(not_silero(
                        &self.path,
                        &format!("input {name:?} is {t:?}, not {dtype} of rank {rank}"),
                    ))
                }
                _ => Ok(()),
            }
        };
        input("input", DType::F32, 2)?;
        input("state", DType::F32, 3)?;
        input("sr", DType::I64, 0)?;
        if g.inputs.len() != 3 {
            return Err(not_silero(
                &self.path,
                &format!("it has {} inputs, not 3", g.inputs.len()),
            ));
        }
        let outputs: Vec<&str> = g.outputs.iter().map(|&o| g.name_of(o)).collect();
        if outputs != ["output", "stateN"] {
            return Err(not_silero(
                &self.path,
                &format!("its outputs are {outputs:?}, not [\"output\", \"stateN\"]"),
            ));
        }
        Ok(())
    }

    /// The speech probability of `chunk` ([`VAD_WINDOW`] samples at 16 kHz), updating `state`
    /// as the silero-vad package's `OnnxWrapper.__call__` does: the model reads the context
    /// followed by the chunk, and the chunk's last samples become the next context.
    pub fn chunk_probability(&self, state: &mut VadState, chunk: &[f32]) -> Result<f32> {
        if chunk.len() != VAD_WINDOW {
            return Err(Error::invalid(
                "vad",
                format!(
                    "a chunk has {} samples; Silero VAD takes {VAD_WINDOW} at 16 kHz",
                    chunk.len()
                ),
            ));
        }
        let mut x = Vec::with_capacity(VAD_CONTEXT + VAD_WINDOW);
        x.extend_from_slice(&state.context);
        x.extend_from_slice(chunk);
        let inputs = HashMap::from([
            (
                "input".to_string(),
                Tensor::from_f32(&[1, VAD_CONTEXT + VAD_WINDOW], &x)?,
            ),
            (
                "state".to_string(),
                Tensor::from_f32(&STATE_DIMS, &state.lstm)?,
            ),
        ]);
        let ex = match &self.plan {
            Some(plan) => Executor::with_plan(&self.graph, plan, &self.dispatcher)?,
            None => Executor::new(&self.graph, &self.dispatcher)?,
        };
        let (outs, _) = ex.run(&inputs)?;
        let [(_, prob), (_, next)] = outs.as_slice() else {
            return Err(not_silero(&self.path, "it returned other outputs"));
        };
        if prob.numel() != 1 || next.dims() != STATE_DIMS {
            return Err(not_silero(
                &self.path,
                &format!(
                    "on one chunk it returned a probability of shape {:?} and a state of shape \
                     {:?} (want [1, 1] and {STATE_DIMS:?})",
                    prob.dims(),
                    next.dims()
                ),
            ));
        }
        let p = prob.to_f32_vec()?.first().copied().unwrap_or(0.0);
        state.lstm = next.to_f32_vec()?;
        state.context.copy_from_slice(&x[x.len() - VAD_CONTEXT..]);
        Ok(p)
    }

    /// One probability per [`VAD_WINDOW`] samples of `samples` (16 kHz mono), the audio padded
    /// with zeros to whole chunks as faster-whisper pads it: by `512 - len % 512` samples, so
    /// a length that is a multiple of 512 gets one more, silent, chunk.
    pub fn speech_probabilities(&self, samples: &[f32]) -> Result<Vec<f32>> {
        let n = samples.len() / VAD_WINDOW + 1;
        let mut state = VadState::default();
        let mut probs = Vec::with_capacity(n);
        let mut chunk = [0.0f32; VAD_WINDOW];
        for i in 0..n {
            let start = i * VAD_WINDOW;
            let have = samples.len().saturating_sub(start).min(VAD_WINDOW);
            chunk[..have].copy_from_slice(&samples[start..start + have]);
            chunk[have..].fill(0.0);
            probs.push(self.chunk_probability(&mut state, &chunk)?);
        }
        Ok(probs)
    }

    /// The speech spans of `samples` (16 kHz mono) in samples, as faster-whisper's
    /// `get_speech_timestamps` finds them.
    pub fn speech_timestamps(
        &self,
        samples: &[f32],
        opts: &VadOptions,
    ) -> Result<Vec<Range<usize>>> {
        opts.validate()?;
        let probs = self.speech_probabilities(samples)?;
        Ok(speech_timestamps_from_probs(&probs, samples.len(), opts))
    }
}

fn not_silero(path: &Path, why: &str) -> Error {
    Error::InvalidConfig {
        field: "vad model".into(),
        reason: format!(
            "{} is not a Silero VAD v5 model (silero_vad.onnx of silero-vad 5.x): {why}",
            path.display()
        ),
    }
}
