//! WGSL sources and compiled pipelines. Every kernel follows one binding convention: binding 0 is
//! the 32-word parameter block, then the read-only inputs, then the read-write outputs, so one
//! bind group layout per (inputs, outputs) count serves them all.

use cyb_tensor::DType;
use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex, PoisonError};

const COMMON: &str = include_str!("shaders/common.wgsl");
const DEQUANT: &str = include_str!("shaders/dequant.wgsl");
const MATVEC_DOT: &str = include_str!("shaders/matvec_dot.wgsl");
const MATVEC_FAST: &str = include_str!("shaders/matvec_fast.wgsl");
const MATVEC_FAST_COMMON: &str = include_str!("shaders/matvec_fast_common.wgsl");
const MATVEC_MULTI_BODY: &str = include_str!("shaders/matvec_multi_body.wgsl");
const MATVEC_Q16: &str = include_str!("shaders/matvec_q16.wgsl");

/// Decode matvec code as `family` reads its activation row: `A4[i]` from the binding, or for
/// `MatVecNorm` `xn(i)`, the row times the norm's weights (matvec_norm.wgsl).
fn activations(family: Family, src: &str) -> String {
    if family != Family::MatVecNorm {
        return src.to_string();
    }
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(at) = rest.find("A4[") {
        out.push_str(&rest[..at]);
        rest = &rest[at + 3..];
        // Index expressions hold no brackets.
        let end = rest.find(']').unwrap_or(rest.len());
        out.push_str("xn(");
        out.push_str(&rest[..end]);
        out.push(')');
        rest = rest.get(end + 1..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

/// dequant.wgsl's readers for weight binding `W{i}`: every reader renamed with the suffix `i`
/// (one kernel reads several weight buffers, and WGSL functions cannot take a buffer).
fn numbered_dequant(i: usize, wide: bool) -> String {
    let mut s = dequant(wide).replace("W[", &format!("W{i}["));
    for f in ["wu", "wq", "rb", "rsb", "rh", "rw", "kscale_min", "deq"] {
        s = s.replace(&format!("{f}("), &format!("{f}{i}("));
    }
    s
}

/// Whether kernels bind weights of this kind (dequant.wgsl's numbering) as 16-byte words: Q4_K
/// and Q5_K, whose blocks (144 and 176 bytes) start at multiples of 16 bytes, so that the decode
/// matvec reads a unit's levels and a block's scales in one load each (matvec_fast.wgsl's
/// `kdot`). The others are bound as u32 words.
fn wide_words(kind: u32) -> bool {
    matches!(kind, 7 | 8)
}

/// dequant.wgsl behind its word readers for the weight binding `W` (of element type `WT`, which
/// `source` defines): `wu(i)` the u32 word i, `wq(i)` the 16 bytes from byte 16i.
fn dequant(wide: bool) -> String {
    let readers = if wide {
        "fn wu(i: u32) -> u32 { return W[i >> 2u][i & 3u]; }\n\
         fn wq(i: u32) -> vec4<u32> { return W[i]; }\n"
    } else {
        "fn wu(i: u32) -> u32 { return W[i]; }\n\
         fn wq(i: u32) -> vec4<u32> {\n    \
         return vec4<u32>(W[4u * i], W[4u * i + 1u], W[4u * i + 2u], W[4u * i + 3u]);\n}\n"
    };
    format!("{readers}{DEQUANT}")
}

/// What every kernel starts with: `SG`, the subgroup size (0: no subgroup operations), `SGD`
/// (the same, at least 1: a divisor), `SGR` (reductions use subgroups), and `sg_add` /
/// `sg_max`, the sum and maximum over the subgroup (called only where `SGR`; naga takes
/// `subgroupAdd` when the device has the feature, without WGSL's `enable subgroups`).
fn subgroup_prelude(size: u32) -> String {
    let mut s = format!(
        "const SG: u32 = {size}u;\nconst SGD: u32 = {}u;\nconst SGR: bool = SG != 0u;\n",
        size.max(1)
    );
    s.push_str(if size == 0 {
        "fn sg_add(x: f32) -> f32 { return x; }\nfn sg_max(x: f32) -> f32 { return x; }\n"
    } else {
        "fn sg_add(x: f32) -> f32 { return subgroupAdd(x); }\n\
         fn sg_max(x: f32) -> f32 { return subgroupMax(x); }\n"
    });
    s
}

/// A kernel family: its WGSL file and whether it reads weights through `dequant.wgsl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    MatMul,
    Embedding,
    Unary,
    Binary,
    Norm,
    Softmax,
    Rope,
    Copy,
    Sdpa,
    ArgMax,
    LayerNorm,
    AddNorm,
    /// Two or three matvecs of one activation (and optionally their gated unit) in one launch.
    MatVecMulti,
    /// A decode matvec that also adds the residual (matvec_res.wgsl).
    MatVecRes,
    /// The RMS norm of a decode row and one to three matvecs of its output (and optionally their
    /// gated unit) in one launch (matvec_norm.wgsl).
    MatVecNorm,
    RopePair,
    CopyPair,
    /// Rope of q and k and the KV appends of k and v.
    RopeAppend,
    /// Decode attention with the rope of q and k and the KV appends before it.
    SdpaRope,
    /// Attention over one chunk of keys (sdpa_part.wgsl) and the merge of the chunks
    /// (sdpa_merge.wgsl).
    SdpaPart,
    SdpaMerge,
    /// Decode attention over one chunk of keys for all query heads of a kv head
    /// (sdpa_dec.wgsl), merged by `SdpaMerge`.
    SdpaDec,
    /// Prompt attention over tiles of queries and keys (sdpa_tile.wgsl).
    SdpaTile,
    BinaryPair,
    NormPair,
    /// Prefill matmuls on cooperative matrices (matmul_coop.wgsl; needs the device's f16 and
    /// cooperative matrix features, `AdapterReport::coop`).
    MatMulCoop,
}

impl Family {
    fn source(self) -> &'static str {
        match self {
            Family::MatMul => include_str!("shaders/matmul.wgsl"),
            Family::MatMulCoop => include_str!("shaders/matmul_coop.wgsl"),
            Family::Embedding => include_str!("shaders/embedding.wgsl"),
            Family::Unary => include_str!("shaders/unary.wgsl"),
            Family::Binary => include_str!("shaders/binary.wgsl"),
            Family::Norm => include_str!("shaders/norm.wgsl"),
            Family::Softmax => include_str!("shaders/softmax.wgsl"),
            Family::Rope => include_str!("shaders/rope_one.wgsl"),
            Family::Copy => include_str!("shaders/copy_one.wgsl"),
            Family::MatVecMulti => include_str!("shaders/matvec_multi.wgsl"),
            Family::MatVecRes => include_str!("shaders/matvec_res.wgsl"),
            Family::MatVecNorm => include_str!("shaders/matvec_norm.wgsl"),
            Family::RopePair => include_str!("shaders/rope_pair.wgsl"),
            Family::CopyPair => include_str!("shaders/copy_pair.wgsl"),
            Family::RopeAppend => include_str!("shaders/rope_append.wgsl"),
            Family::BinaryPair => include_str!("shaders/binary_pair.wgsl"),
            Family::NormPair => include_str!("shaders/norm_pair.wgsl"),
            Family::Sdpa => include_str!("shaders/sdpa.wgsl"),
            Family::SdpaRope => include_str!("shaders/sdpa_rope.wgsl"),
            Family::SdpaPart => include_str!("shaders/sdpa_part.wgsl"),
            Family::SdpaMerge => include_str!("shaders/sdpa_merge.wgsl"),
            Family::SdpaDec => include_str!("shaders/sdpa_dec.wgsl"),
            Family::SdpaTile => include_str!("shaders/sdpa_tile.wgsl"),
            Family::ArgMax => include_str!("shaders/argmax.wgsl"),
            Family::LayerNorm => include_str!("shaders/layer_norm.wgsl"),
            Family::AddNorm => include_str!("shaders/add_norm.wgsl"),
        }
    }

    /// (read-only inputs, read-write outputs) of the family's bindings.
    fn bindings(self) -> (usize, usize) {
        match self {
            Family::MatMul
            | Family::MatMulCoop
            | Family::Embedding
            | Family::Binary
            | Family::Norm
            | Family::Rope => (2, 1),
            Family::Unary | Family::Softmax | Family::Copy | Family::ArgMax => (1, 1),
            Family::Sdpa | Family::SdpaPart | Family::SdpaDec => (3, 2),
            Family::SdpaMerge => (1, 1),
            Family::SdpaTile => (3, 1),
            Family::LayerNorm => (3, 1),
            Family::AddNorm => (3, 2),
            Family::MatVecMulti => (4, 4),
            Family::MatVecRes => (4, 3),
            Family::MatVecNorm => (5, 5),
            Family::RopePair => (3, 2),
            Family::CopyPair => (2, 2),
            Family::RopeAppend => (4, 4),
            Family::SdpaRope => (4, 6),
            Family::BinaryPair | Family::NormPair => (4, 2),
        }
    }
}

/// Every weight format the dequantizing kernels read (matmul, embedding).
pub const WEIGHT_DTYPES: [DType; 10] = [
    DType::F32,
    DType::F16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
];

/// Weight formats the dequantizing kernels read: (KIND code of dequant.wgsl, elements per
/// block, bytes per block).
pub fn weight_format(dtype: DType) -> Option<(u32, u32, u32)> {
    Some(match dtype {
        DType::F32 => (0, 1, 4),
        DType::F16 => (1, 1, 2),
        DType::Q8_0 => (2, 32, 34),
        DType::Q4_0 => (3, 32, 18),
        DType::Q4_1 => (4, 32, 20),
        DType::Q5_0 => (5, 32, 22),
        DType::Q5_1 => (6, 32, 24),
        DType::Q4_K => (7, 256, 144),
        DType::Q5_K => (8, 256, 176),
        DType::Q6_K => (9, 256, 210),
        _ => return None,
    })
}

/// Which pipeline: a family, an entry point, and for weight readers the dtype and rows per
/// workgroup (for the decode matvec `mv`: lanes per weight row, `ops::matmul::mv_lanes`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KernelKey {
    pub family: Family,
    pub entry: &'static str,
    pub weights: Option<DType>,
    pub rows: u32,
}

impl KernelKey {
    /// How many of the kernel's buffers (after the parameters) it only reads; the rest it
    /// writes.
    pub fn reads(&self) -> usize {
        self.family.bindings().0
    }

    pub fn plain(family: Family, entry: &'static str) -> KernelKey {
        KernelKey {
            family,
            entry,
            weights: None,
            rows: 1,
        }
    }
}

pub struct Kernel {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

pub struct Kernels {
    pipelines: Mutex<FxHashMap<KernelKey, Arc<Kernel>>>,
    /// Compile with wgpu's runtime checks (see [`Kernels::new`]).
    checked: bool,
    /// The subgroup size reductions may use (`GpuContext::subgroup`), 0 for none.
    subgroup: u32,
}

impl Kernels {
    /// Kernels compiled without wgpu's shader runtime checks, unless `checked`
    /// (`CYB_WGPU_CHECKS=1`, for debugging a kernel).
    ///
    /// The checks are naga's clamping of every index into a workgroup or private array, a
    /// counter in every loop that ends it after 2^64 iterations, and a guard around every
    /// integer division; on the H200 they took ~40% of prefill time and ~10% of decode time
    /// (docs/performance.md). What they guard against is established here instead: every
    /// loop of these kernels steps by a positive constant or doubles a bounded counter, every
    /// workgroup or private array index is bounded by the workgroup size or a constant, and
    /// every divisor is a constant or a dimension of the launch's shapes (a launch over an
    /// empty tensor has no workgroups and is never recorded; where a zero reaches a division
    /// anyway, the quotient is an unspecified value, not a fault). Storage buffer accesses stay
    /// bounds-checked where the driver does it (Vulkan's robust buffer access, which wgpu
    /// enables); on Metal and DX12 they rely on the host's shape checks alone.
    pub fn new(checked: bool, subgroup: u32) -> Kernels {
        Kernels {
            pipelines: Mutex::default(),
            checked,
            subgroup,
        }
    }

    /// Whether the kernels are compiled with wgpu's runtime checks.
    pub fn checked(&self) -> bool {
        self.checked
    }

    /// The subgroup size the kernels' reductions use (0: none).
    pub fn subgroup(&self) -> u32 {
        self.subgroup
    }

    /// The WGSL module of `key`: the shared preludes, the weight readers where it reads
    /// weights, and the family's file.
    pub fn source(&self, key: &KernelKey) -> String {
        // Enable directives come before everything else in a module.
        let mut src = if key.family == Family::MatMulCoop {
            "enable f16;\nenable wgpu_cooperative_matrix;\n".to_string()
        } else {
            String::new()
        };
        src.push_str(&subgroup_prelude(self.subgroup));
        src.push_str(COMMON);
        if let Some(dt) = key.weights {
            let (kind, block, bytes) = weight_format(dt).unwrap_or((0, 1, 4));
            // `rows` is, for the decode matvec's entries `mv*`, the lanes per weight row (low
            // 16 bits) and the weight rows per lane (high bits, 0 meaning 1: matvec_fast.wgsl's
            // `vdotm`); for the others the activation rows per workgroup.
            let (mb, lpr, mr) = if key.entry.starts_with("mv") {
                (1, key.rows & 0xffff, (key.rows >> 16).max(1))
            } else {
                (key.rows, 32, 1)
            };
            // Units per block of the decode matvec: of eight values (matvec_fast.wgsl's `udot`),
            // of 32 for Q4_K and Q5_K (`kdot`).
            let upb = match kind {
                0 | 1 => 1,
                7 | 8 => crate::ops::matmul::K_UNITS,
                9 => 32,
                _ => 4,
            };
            // Q4_0 decode matvecs walk their blocks in pairs of one alignment each
            // (matvec_fast.wgsl's `vdotp`; the other formats take one block per step). On the H200 the 1B shape's merged norm + matvecs went 15.66 →
            // 14.48 µs per launch. Q8_0's 34-byte blocks alternate too, but walked in pairs
            // its merged launches gained 0.5 µs and its residual matvecs lost 0.4: no gain.
            let pairwalk = kind == 3;
            let wide = wide_words(kind);
            let wt = if wide { "vec4<u32>" } else { "u32" };
            src.push_str(&format!(
                "const KIND: u32 = {kind}u;\nconst BLOCK: u32 = {block}u;\n\
                 const BYTES: u32 = {bytes}u;\nconst MB: u32 = {mb}u;\nconst LPR: u32 = {lpr}u;\n\
                 const UPB: u32 = {upb}u;\nconst MR: u32 = {mr}u;\nconst PAIRWALK: bool = {pairwalk};\n\
                 alias WT = {wt};\n"
            ));
            // The weight buffer must be declared before dequant.wgsl's readers use it; the
            // family source declares it, and WGSL allows use before declaration at module scope.
            let multi = matches!(key.family, Family::MatVecMulti | Family::MatVecNorm);
            if multi {
                for i in 0..3 {
                    src.push_str(&numbered_dequant(i, wide));
                    src.push_str(&MATVEC_DOT.replace('@', &i.to_string()));
                    src.push_str(&activations(
                        key.family,
                        &MATVEC_FAST.replace('@', &i.to_string()),
                    ));
                }
            } else {
                src.push_str(&dequant(wide));
            }
            if multi || matches!(key.family, Family::MatMul | Family::MatVecRes) {
                src.push_str(MATVEC_FAST_COMMON);
            }
            if matches!(key.family, Family::MatMul | Family::MatVecRes) {
                src.push_str(&MATVEC_FAST.replace('@', ""));
                src.push_str(MATVEC_Q16);
            }
        }
        match key.family {
            Family::Unary => src.push_str(include_str!("shaders/activation.wgsl")),
            Family::MatVecMulti | Family::MatVecNorm => {
                src.push_str(include_str!("shaders/activation.wgsl"));
                src.push_str(include_str!("shaders/reduce.wgsl"));
                src.push_str(&activations(key.family, MATVEC_MULTI_BODY));
            }
            Family::MatVecRes => src.push_str(Family::MatMul.source()),
            Family::Binary => {
                src.push_str(include_str!("shaders/activation.wgsl"));
                src.push_str(include_str!("shaders/broadcast.wgsl"));
            }
            Family::BinaryPair => src.push_str(include_str!("shaders/broadcast.wgsl")),
            // `rows`: values per load of q and k (sdpa.wgsl), plus 8 when v is read four
            // values at a time (sdpa_rope.wgsl: always both).
            Family::Sdpa | Family::SdpaRope | Family::SdpaPart | Family::SdpaDec => {
                src.push_str(if key.rows & 4 != 0 {
                    "alias QK = vec4<f32>;\nconst QW: u32 = 4u;\n\
                     fn qk_mul(a: QK, b: QK) -> f32 { return dot(a, b); }\n"
                } else {
                    "alias QK = f32;\nconst QW: u32 = 1u;\n\
                     fn qk_mul(a: QK, b: QK) -> f32 { return a * b; }\n"
                });
                src.push_str(if key.rows & 8 != 0 {
                    "alias VV = vec4<f32>;\nconst VW: u32 = 4u;\n\
                     fn store_o(at: u32, o: VV) {\n\
                     O[at] = o.x; O[at + 1u] = o.y; O[at + 2u] = o.z; O[at + 3u] = o.w;\n}\n"
                } else {
                    "alias VV = f32;\nconst VW: u32 = 1u;\n\
                     fn store_o(at: u32, o: VV) { O[at] = o; }\n"
                });
                if matches!(key.family, Family::SdpaPart | Family::SdpaDec) {
                    src.push_str(if key.rows & 8 != 0 {
                        "fn store_p(at: u32, o: VV) {\n\
                         PART[at] = o.x; PART[at + 1u] = o.y; PART[at + 2u] = o.z; \
                         PART[at + 3u] = o.w;\n}\n"
                    } else {
                        "fn store_p(at: u32, o: VV) { PART[at] = o; }\n"
                    });
                    if key.family == Family::SdpaPart {
                        src.push_str(include_str!("shaders/reduce.wgsl"));
                    }
                } else {
                    if key.family == Family::SdpaRope {
                        src.push_str("const SP: u32 = 16u;\n");
                        src.push_str(include_str!("shaders/rope.wgsl"));
                    } else {
                        src.push_str("const SP: u32 = 0u;\n");
                    }
                    src.push_str(include_str!("shaders/reduce.wgsl"));
                    src.push_str(include_str!("shaders/sdpa_body.wgsl"));
                }
            }
            Family::Rope | Family::RopePair => src.push_str(include_str!("shaders/rope.wgsl")),
            Family::Copy | Family::CopyPair => src.push_str(include_str!("shaders/copy.wgsl")),
            Family::RopeAppend => {
                src.push_str(include_str!("shaders/rope.wgsl"));
                src.push_str(include_str!("shaders/copy.wgsl"));
            }
            _ => {}
        }
        src.push_str(key.family.source());
        src
    }

    /// The pipeline for `key`, compiled on first use.
    pub fn get(&self, device: &wgpu::Device, key: &KernelKey) -> Arc<Kernel> {
        let mut map = self
            .pipelines
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(k) = map.get(key) {
            return k.clone();
        }
        let src = self.source(key);
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(key.entry),
            source: wgpu::ShaderSource::Wgsl(src.into()),
        };
        let module = if self.checked {
            device.create_shader_module(desc)
        } else {
            // SAFETY: `Kernels::new` gives why these kernels need none of the checks: no loop
            // runs forever, no index leaves its array, no divisor is zero.
            unsafe {
                device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
            }
        };
        let (n_in, n_out) = key.family.bindings();
        let mut entries = vec![wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        }];
        for i in 0..n_in + n_out {
            entries.push(wgpu::BindGroupLayoutEntry {
                binding: (i + 1) as u32,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage {
                        read_only: i < n_in,
                    },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            });
        }
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(key.entry),
            entries: &entries,
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(key.entry),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(key.entry),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(key.entry),
            compilation_options: Default::default(),
            cache: None,
        });
        let k = Arc::new(Kernel { pipeline, layout });
        map.insert(key.clone(), k.clone());
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses and validates `src` as naga does for a device with f16, subgroups and cooperative
    /// matrices, then lowers it to SPIR-V as the Vulkan backend would.
    fn validate(src: &str, what: &str) {
        let module = naga::front::wgsl::parse_str(src)
            .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(src)));
        let caps = naga::valid::Capabilities::COOPERATIVE_MATRIX
            | naga::valid::Capabilities::SHADER_FLOAT16
            | naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32
            | naga::valid::Capabilities::SUBGROUP;
        let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
            .subgroup_operations(naga::valid::SubgroupOperationSet::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(src)));
        let options = naga::back::spv::Options {
            lang_version: (1, 3),
            ..Default::default()
        };
        naga::back::spv::write_vec(&module, &info, &options, None)
            .unwrap_or_else(|e| panic!("{what}: SPIR-V: {e}"));
    }

    /// The cooperative matrix prefill compiles for every weight format, though no adapter of
    /// a CI machine (lavapipe) runs it; tests/kernels.rs checks its results where one does.
    #[test]
    fn coop_matmul_validates_for_every_weight_format() {
        let kernels = Kernels::new(false, 32);
        // F32 weights never take it (their prefill stays f32 throughout).
        for dt in WEIGHT_DTYPES.into_iter().filter(|&d| d != DType::F32) {
            let key = KernelKey {
                family: Family::MatMulCoop,
                entry: "coop",
                weights: Some(dt),
                rows: 1,
            };
            validate(&kernels.source(&key), &format!("coop {dt}"));
        }
    }
}
