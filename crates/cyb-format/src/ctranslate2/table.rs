//! Tensors cut from `model.bin` variables: a whole variable or a row range of one (CTranslate2
//! fuses projections by rows, and a row range of a row-major matrix is one byte range), each
//! under the name of the layout it is presented as.
//!
//! Float tensors (float32, float16, bfloat16) keep their dtype and are used in place when their
//! bytes are aligned to the element size, copied into aligned memory otherwise (`model.bin`
//! has no padding). Quantized weights (int8 with a per-row scale, int16 with one scale) are
//! dequantized to F32 when read (`q / scale`). Shapes are checked as the table is built, and a
//! weight variable no tensor came from is an error, so nothing in the file goes unread.

use super::{dtype_name, Ct2File, Ct2Variable};
use crate::cursor::format_error;
use crate::safetensors::SafetensorsTensorInfo;
use cyb_tensor::{AlignedBuf, DType, Error, Result, Shape, Storage, Tensor};
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

/// How one tensor of the table is read from `model.bin`.
#[derive(Clone, Debug)]
struct Plan {
    /// The CTranslate2 variable it comes from.
    source: String,
    source_dtype: DType,
    /// Absolute byte range of its values in `model.bin`.
    bytes: Range<usize>,
    dequantize: Option<Dequantize>,
}

/// A quantized weight's scale: one per row (int8) or one for the matrix (int16).
#[derive(Clone, Debug)]
struct Dequantize {
    scale_dtype: DType,
    /// Absolute byte range of the scales of these rows (a single value for a matrix scale).
    scale_bytes: Range<usize>,
    per_row: bool,
}

/// The tensors, in the order they were added.
pub(crate) struct Table {
    infos: Vec<SafetensorsTensorInfo>,
    plans: Vec<Plan>,
    by_name: HashMap<String, usize>,
}

impl Table {
    /// Every tensor: `file_offset` is where its values start in `model.bin`.
    pub(crate) fn infos(&self) -> &[SafetensorsTensorInfo] {
        &self.infos
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// False for a tensor computed when read (a dequantized weight): its listed offset is
    /// where the source values start, not a range holding it.
    pub(crate) fn in_place(&self, name: &str) -> bool {
        self.by_name
            .get(name)
            .and_then(|&k| self.plans.get(k))
            .is_some_and(|p| p.dequantize.is_none())
    }

    /// The tensor `name`: float data in place when aligned, else copied; quantized weights
    /// dequantized to F32.
    pub(crate) fn tensor(&self, file: &Ct2File, name: &str, required_by: &Path) -> Result<Tensor> {
        let k = self.by_name.get(name).copied();
        let (Some(info), Some(plan)) = (
            k.and_then(|k| self.infos.get(k)),
            k.and_then(|k| self.plans.get(k)),
        ) else {
            return Err(Error::MissingTensor {
                name: name.to_string(),
                required_by: required_by.display().to_string(),
            });
        };
        let buf: &[u8] = (**file.shared_bytes()).as_ref();
        let outside = || {
            format_error(
                file.path(),
                plan.bytes.start,
                format!("tensor {name:?} lies outside the file"),
            )
        };
        let data = buf.get(plan.bytes.clone()).ok_or_else(outside)?;
        let Some(dq) = &plan.dequantize else {
            if data.as_ptr().align_offset(plan.source_dtype.block_bytes()) == 0 {
                let storage = Storage::Shared {
                    owner: file.shared_bytes().clone(),
                    offset: plan.bytes.start,
                    len: plan.bytes.len(),
                };
                return Tensor::new(info.shape.clone(), info.dtype, storage);
            }
            // An owned copy, but shared storage like a mapping's, so the backends' caches of
            // derived weights (repacked panels) keep theirs for it.
            return Tensor::new(info.shape.clone(), info.dtype, shared_copy(data));
        };
        let scale_bytes = buf.get(dq.scale_bytes.clone()).ok_or_else(outside)?;
        let n_scales = scale_bytes.len() / dq.scale_dtype.block_bytes().max(1);
        let scales = cyb_tensor::decode_f32_vec(dq.scale_dtype, scale_bytes, n_scales)?;
        let n = info.shape.numel();
        let rows = if dq.per_row {
            info.shape.dims().first().copied().unwrap_or(1)
        } else {
            1
        };
        let row_len = n.checked_div(rows).unwrap_or(0);
        let q: Vec<f32> = match plan.source_dtype {
            DType::I8 => data.iter().map(|&b| f32::from(b as i8)).collect(),
            DType::I16 => data
                .chunks_exact(2)
                .map(|c| f32::from(i16::from_le_bytes(c.try_into().unwrap_or([0; 2]))))
                .collect(),
            other => {
                return Err(format_error(
                    file.path(),
                    plan.bytes.start,
                    format!("variable {:?}: cannot dequantize {other}", plan.source),
                ))
            }
        };
        if q.len() != n || scales.len() != rows {
            return Err(outside());
        }
        let mut out = Vec::with_capacity(n);
        for (r, &s) in scales.iter().enumerate() {
            let row = q.get(r * row_len..(r + 1) * row_len).unwrap_or_default();
            out.extend(row.iter().map(|&x| x / s));
        }
        let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor::new(info.shape.clone(), DType::F32, shared_copy(&bytes))
    }
}

/// `data` copied into aligned memory, as shared (read-only) storage.
fn shared_copy(data: &[u8]) -> Storage {
    Storage::Shared {
        owner: Arc::new(AlignedBuf::from_bytes(data)),
        offset: 0,
        len: data.len(),
    }
}

/// One part of a row-split variable.
pub(crate) enum Part {
    /// Rows that become the tensor of this name.
    Tensor(String),
    /// Rows that must be zero and are dropped (the bias `k_proj` does not have).
    Zero(&'static str),
}

/// Builds a [`Table`], checking shapes as it goes and which variables it used.
pub(crate) struct Builder<'a> {
    pub(crate) file: &'a Ct2File,
    used: Vec<bool>,
    infos: Vec<SafetensorsTensorInfo>,
    plans: Vec<Plan>,
}

impl<'a> Builder<'a> {
    pub(crate) fn new(file: &'a Ct2File) -> Builder<'a> {
        Builder {
            file,
            used: vec![false; file.variables().len()],
            infos: Vec::new(),
            plans: Vec::new(),
        }
    }

    /// The table, once every weight variable found its tensor (`layout` names what the
    /// tensors are laid out as, for the error about one that did not).
    pub(crate) fn finish(self, layout: &str) -> Result<Table> {
        let unused = self
            .file
            .variables()
            .iter()
            .zip(&self.used)
            .find(|(v, used)| !**used && !v.is_scalar());
        if let Some((v, _)) = unused {
            return Err(format_error(
                self.file.path(),
                v.record_offset,
                format!("variable {:?} has no counterpart in {layout}", v.name),
            ));
        }
        let by_name = self
            .infos
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(Table {
            infos: self.infos,
            plans: self.plans,
            by_name,
        })
    }

    pub(crate) fn error(&self, v: &Ct2Variable, reason: String) -> Error {
        format_error(
            self.file.path(),
            v.record_offset,
            format!("variable {:?}: {reason}", v.name),
        )
    }

    /// The variable `name` (after aliases), marked used, with its dims checked against
    /// `want` (`None` entries are free and returned).
    pub(crate) fn var(&mut self, name: &str, want: &[Option<usize>]) -> Result<&'a Ct2Variable> {
        let file = self.file;
        let k = file
            .variable_index(name)
            .ok_or_else(|| Error::MissingTensor {
                name: name.to_string(),
                required_by: format!("{} (WhisperSpec)", file.path().display()),
            })?;
        let v = file
            .variables()
            .get(k)
            .ok_or_else(|| Error::MissingTensor {
                name: name.to_string(),
                required_by: file.path().display().to_string(),
            })?;
        if let Some(u) = self.used.get_mut(k) {
            *u = true;
        }
        let dims = v.shape.dims();
        let fits = dims.len() == want.len()
            && dims
                .iter()
                .zip(want)
                .all(|(d, w)| w.is_none_or(|w| w == *d));
        if !fits {
            let want: Vec<String> = want
                .iter()
                .map(|w| w.map_or_else(|| "_".into(), |w| w.to_string()))
                .collect();
            return Err(self.error(v, format!("shape {dims:?}, expected [{}]", want.join(", "))));
        }
        Ok(v)
    }

    /// The scale of the quantized variable `v`, marked used.
    fn scale(&mut self, v: &Ct2Variable) -> Result<Option<&'a Ct2Variable>> {
        match v.dtype {
            DType::F32 | DType::F16 | DType::BF16 => Ok(None),
            DType::I8 | DType::I16 => {
                let name = format!("{}_scale", v.name);
                let file = self.file;
                let Some(k) = file.variable_index(&name) else {
                    return Err(self.error(
                        v,
                        format!("{} without {name:?} to dequantize it", dtype_name(v.dtype)),
                    ));
                };
                if let Some(u) = self.used.get_mut(k) {
                    *u = true;
                }
                let s = file.variables().get(k);
                let ok = s.filter(|s| matches!(s.dtype, DType::F32 | DType::F16 | DType::BF16));
                match ok {
                    Some(s) => Ok(Some(s)),
                    None => Err(self.error(v, format!("{name:?} is not a float tensor"))),
                }
            }
            other => Err(self.error(
                v,
                format!(
                    "{} weights are not read (float32, float16, bfloat16, int8 and int16 are)",
                    dtype_name(other)
                ),
            )),
        }
    }

    /// Rows `rows` of `v` (all of dim 0) as the tensor `hf`.
    pub(crate) fn push(&mut self, v: &Ct2Variable, rows: Range<usize>, hf: String) -> Result<()> {
        let scale = self.scale(v)?;
        let dims = v.shape.dims();
        let total_rows = dims.first().copied().unwrap_or(1);
        let row_elems = v.shape.numel().checked_div(total_rows).unwrap_or(0);
        let elem = v.dtype.block_bytes();
        let bad = || self.error(v, format!("rows {rows:?} overflow"));
        let start = rows
            .start
            .checked_mul(row_elems)
            .and_then(|e| e.checked_mul(elem))
            .and_then(|b| b.checked_add(v.offset))
            .ok_or_else(bad)?;
        let end = rows
            .end
            .checked_mul(row_elems)
            .and_then(|e| e.checked_mul(elem))
            .and_then(|b| b.checked_add(v.offset))
            .filter(|&e| e >= start && e <= v.offset.saturating_add(v.byte_len))
            .ok_or_else(bad)?;
        let mut out_dims = dims.to_vec();
        if let Some(d0) = out_dims.first_mut() {
            *d0 = rows.len();
        }
        let shape = Shape::new(&out_dims).map_err(|_| bad())?;
        let dequantize = match scale {
            None => None,
            Some(s) => Some(self.dequantize(v, s, &rows)?),
        };
        let dtype = if dequantize.is_some() {
            DType::F32
        } else {
            v.dtype
        };
        let byte_len = dtype.bytes_for(shape.numel()).ok_or_else(bad)?;
        self.infos.push(SafetensorsTensorInfo {
            name: hf,
            dtype,
            shape,
            file_offset: start,
            byte_len,
        });
        self.plans.push(Plan {
            source: v.name.clone(),
            source_dtype: v.dtype,
            bytes: start..end,
            dequantize,
        });
        Ok(())
    }

    fn dequantize(
        &self,
        v: &Ct2Variable,
        s: &Ct2Variable,
        rows: &Range<usize>,
    ) -> Result<Dequantize> {
        let size = s.dtype.block_bytes();
        let total_rows = v.shape.dims().first().copied().unwrap_or(1);
        if v.dtype == DType::I16 {
            if s.shape.numel() != 1 {
                return Err(
                    self.error(v, format!("int16 scale {:?} is not a single value", s.name))
                );
            }
            return Ok(Dequantize {
                scale_dtype: s.dtype,
                scale_bytes: s.offset..s.offset.saturating_add(size),
                per_row: false,
            });
        }
        if s.shape.dims() != [total_rows] {
            return Err(self.error(
                v,
                format!(
                    "int8 scale {:?} has shape {:?}, expected one per row [{total_rows}]",
                    s.name,
                    s.shape.dims()
                ),
            ));
        }
        // rows.end <= total_rows was checked against the variable's bytes.
        let at = |r: usize| s.offset.saturating_add(r.saturating_mul(size));
        Ok(Dequantize {
            scale_dtype: s.dtype,
            scale_bytes: at(rows.start)..at(rows.end),
            per_row: true,
        })
    }

    /// The whole variable `ct2` (shape `want`) as the tensor `hf`.
    pub(crate) fn whole(&mut self, ct2: &str, want: &[Option<usize>], hf: String) -> Result<()> {
        let v = self.var(ct2, want)?;
        let rows = v.shape.dims().first().copied().unwrap_or(1);
        self.push(v, 0..rows, hf)
    }

    /// A layer norm (`gamma`, `beta` of size `d`) as `hf.weight`, `hf.bias`.
    pub(crate) fn norm(&mut self, ct2: &str, d: usize, hf: &str) -> Result<()> {
        self.whole(&format!("{ct2}/gamma"), &[Some(d)], format!("{hf}.weight"))?;
        self.whole(&format!("{ct2}/beta"), &[Some(d)], format!("{hf}.bias"))
    }

    /// A linear layer `[out, inp]` with bias as `hf.weight`, `hf.bias`.
    pub(crate) fn linear(
        &mut self,
        ct2: &str,
        out: Option<usize>,
        inp: usize,
        hf: &str,
    ) -> Result<usize> {
        let w = self.var(&format!("{ct2}/weight"), &[out, Some(inp)])?;
        let out = w.shape.dims().first().copied().unwrap_or(0);
        self.push(w, 0..out, format!("{hf}.weight"))?;
        self.whole(&format!("{ct2}/bias"), &[Some(out)], format!("{hf}.bias"))?;
        Ok(out)
    }

    /// A fused linear layer `[parts * d, d]` and its bias, split by rows.
    pub(crate) fn fused(
        &mut self,
        ct2: &str,
        d: usize,
        weights: &[Part],
        biases: &[Part],
    ) -> Result<()> {
        let n = weights.len();
        let w = self.var(&format!("{ct2}/weight"), &[Some(n * d), Some(d)])?;
        let b = self.var(&format!("{ct2}/bias"), &[Some(n * d)])?;
        for (i, p) in weights.iter().enumerate() {
            if let Part::Tensor(name) = p {
                self.push(w, i * d..(i + 1) * d, name.clone())?;
            }
        }
        for (i, p) in biases.iter().enumerate() {
            match p {
                Part::Tensor(name) => self.push(b, i * d..(i + 1) * d, name.clone())?,
                Part::Zero(what) => self.check_zero(b, i * d..(i + 1) * d, what)?,
            }
        }
        Ok(())
    }

    /// Rows `rows` of the float vector `v` must all be zero.
    fn check_zero(&self, v: &Ct2Variable, rows: Range<usize>, what: &str) -> Result<()> {
        let elem = v.dtype.block_bytes();
        let bytes = self.file.data(v);
        let part = rows
            .start
            .checked_mul(elem)
            .zip(rows.end.checked_mul(elem))
            .and_then(|(a, z)| bytes.get(a..z));
        let values = match (v.dtype, part) {
            (DType::F32 | DType::F16 | DType::BF16, Some(p)) => {
                cyb_tensor::decode_f32_vec(v.dtype, p, rows.len()).ok()
            }
            _ => None,
        };
        match values {
            Some(x) if x.iter().all(|&x| x == 0.0) => Ok(()),
            Some(_) => Err(self.error(
                v,
                format!(
                    "rows {rows:?} ({what}) are not zero, but transformers' Whisper has no \
                     such bias"
                ),
            )),
            None => Err(self.error(
                v,
                format!("rows {rows:?} ({what}) cannot be read as float values"),
            )),
        }
    }

    /// The rank-0 integer variable `name`, at least 1.
    pub(crate) fn count_setting(&mut self, name: &str) -> Result<usize> {
        let v = self.var(name, &[])?;
        self.file
            .scalar(name)
            .and_then(|x| x.as_u64())
            .and_then(|x| usize::try_from(x).ok())
            .filter(|&x| x > 0)
            .ok_or_else(|| self.error(v, "is not a positive integer".into()))
    }

    /// A rank-0 setting that, when present, must be one of `allowed` (`why` says what else
    /// would mean).
    pub(crate) fn setting(&mut self, name: &str, allowed: &[f64], why: &str) -> Result<()> {
        let file = self.file;
        let Some(v) = file.variable(name).filter(|v| v.is_scalar()) else {
            return Ok(());
        };
        let x = file.scalar(name).and_then(|x| x.as_f64());
        if x.is_some_and(|x| allowed.contains(&x)) {
            return Ok(());
        }
        Err(self.error(
            v,
            format!(
                "is {}, expected {allowed:?}: {why}",
                x.map_or_else(|| "unreadable".into(), |x| x.to_string())
            ),
        ))
    }
}
