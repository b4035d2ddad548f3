//! `Tensor` = shape + dtype + storage. Always contiguous, row-major.

use crate::quant;
use crate::storage::{AlignedBuf, Storage};
use crate::{DType, Error, Result, Shape};
use half::{bf16, f16};
use std::borrow::Cow;
use std::sync::Arc;

/// What a backend needs to decide whether it supports an op: shape and dtype, no data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub shape: Shape,
    pub dtype: DType,
}

/// A contiguous row-major tensor. Cloning shares the storage.
#[derive(Clone, Debug)]
pub struct Tensor {
    shape: Shape,
    dtype: DType,
    storage: Storage,
}

impl Tensor {
    /// Wraps a storage, checking that its size is exactly what `dtype` and `shape` need and,
    /// for block formats, that rows are whole blocks.
    pub fn new(shape: Shape, dtype: DType, storage: Storage) -> Result<Tensor> {
        let numel = shape.numel();
        if dtype.is_quantized() && !shape.last().is_multiple_of(dtype.block_elems()) {
            return Err(Error::invalid(
                "tensor",
                format!(
                    "{dtype} rows must be a multiple of {} values, shape is {shape}",
                    dtype.block_elems()
                ),
            ));
        }
        let need = dtype.bytes_for(numel).ok_or_else(|| {
            Error::invalid("tensor", format!("byte size of {dtype} {shape} overflows"))
        })?;
        if storage.byte_len() != need {
            return Err(Error::invalid(
                "tensor",
                format!(
                    "{dtype} {shape} needs {need} bytes, storage has {}",
                    storage.byte_len()
                ),
            ));
        }
        if let Storage::Shared { .. } = storage {
            if storage.host_bytes().is_none() {
                return Err(Error::invalid(
                    "tensor",
                    "shared storage range lies outside its owner",
                ));
            }
        }
        Ok(Tensor {
            shape,
            dtype,
            storage,
        })
    }

    /// A host tensor holding a copy of `bytes`.
    pub fn from_bytes(dims: &[usize], dtype: DType, bytes: &[u8]) -> Result<Tensor> {
        Tensor::new(
            Shape::new(dims)?,
            dtype,
            Storage::Host(Arc::new(AlignedBuf::from_bytes(bytes))),
        )
    }

    /// An F32 host tensor.
    pub fn from_f32(dims: &[usize], data: &[f32]) -> Result<Tensor> {
        Tensor::from_bytes(dims, DType::F32, bytemuck::cast_slice(data))
    }

    /// An I64 host tensor.
    pub fn from_i64(dims: &[usize], data: &[i64]) -> Result<Tensor> {
        Tensor::from_bytes(dims, DType::I64, bytemuck::cast_slice(data))
    }

    /// An I32 host tensor.
    pub fn from_i32(dims: &[usize], data: &[i32]) -> Result<Tensor> {
        Tensor::from_bytes(dims, DType::I32, bytemuck::cast_slice(data))
    }

    /// A zero-filled host tensor (`OutOfMemory` when there is not that much memory).
    pub fn zeros(dims: &[usize], dtype: DType) -> Result<Tensor> {
        let shape = Shape::new(dims)?;
        let n = dtype.bytes_for(shape.numel()).ok_or_else(|| {
            Error::invalid("zeros", format!("{dtype} {shape} is not whole blocks"))
        })?;
        crate::memory::check_tensor("zeros", dims, dtype)?;
        Tensor::new(shape, dtype, Storage::Host(Arc::new(AlignedBuf::zeroed(n))))
    }

    /// A host tensor of `dtype` made from f32 values: converted for floats and integers,
    /// quantized with the reference quantizer for block formats.
    pub fn from_f32_as(dims: &[usize], data: &[f32], dtype: DType) -> Result<Tensor> {
        let shape = Shape::new(dims)?;
        if data.len() != shape.numel() {
            return Err(Error::shape("from_f32_as", dims, &[data.len()]));
        }
        let n = dtype.bytes_for(data.len()).ok_or_else(|| {
            Error::invalid(
                "from_f32_as",
                format!("{dtype} {shape} is not whole blocks"),
            )
        })?;
        let mut buf = AlignedBuf::zeroed(n);
        encode_f32(dtype, data, buf.as_bytes_mut())?;
        Tensor::new(shape, dtype, Storage::Host(Arc::new(buf)))
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    pub fn numel(&self) -> usize {
        self.shape.numel()
    }

    pub fn byte_len(&self) -> usize {
        self.storage.byte_len()
    }

    pub fn info(&self) -> TensorInfo {
        TensorInfo {
            shape: self.shape.clone(),
            dtype: self.dtype,
        }
    }

    /// The raw bytes, when the tensor is in host memory.
    pub fn host_bytes(&self) -> Option<&[u8]> {
        self.storage.host_bytes()
    }

    fn bytes_or_err(&self, op: &str) -> Result<&[u8]> {
        self.host_bytes().ok_or_else(|| {
            Error::invalid(
                op,
                format!(
                    "tensor is on device {}, download it first",
                    self.storage.location()
                ),
            )
        })
    }

    /// The same storage viewed with other dimensions of equal element count.
    pub fn reshape(&self, dims: &[usize]) -> Result<Tensor> {
        let shape = Shape::new(dims)?;
        if shape.numel() != self.numel() {
            return Err(Error::shape("reshape", self.dims(), dims));
        }
        Tensor::new(shape, self.dtype, self.storage.clone())
    }

    /// F32 values borrowed in place when the bytes are aligned, copied otherwise.
    pub fn as_f32(&self) -> Result<Cow<'_, [f32]>> {
        if self.dtype != DType::F32 {
            return Err(Error::invalid(
                "as_f32",
                format!("tensor is {}, not F32", self.dtype),
            ));
        }
        let b = self.bytes_or_err("as_f32")?;
        Ok(match bytemuck::try_cast_slice::<u8, f32>(b) {
            Ok(s) => Cow::Borrowed(s),
            Err(_) => Cow::Owned(
                b.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
        })
    }

    /// Every value as f32: floats converted, integers cast, block formats dequantized with the
    /// reference dequantizer.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        let b = self.bytes_or_err("to_f32")?;
        decode_f32_vec(self.dtype, b, self.numel())
    }

    /// Every value of an integer or boolean tensor as i64.
    pub fn to_i64_vec(&self) -> Result<Vec<i64>> {
        let b = self.bytes_or_err("to_i64")?;
        let v = match self.dtype {
            DType::I64 => b
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
            DType::I32 => b
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap_or([0; 4])) as i64)
                .collect(),
            DType::I8 => b.iter().map(|&x| x as i8 as i64).collect(),
            DType::U8 | DType::Bool => b.iter().map(|&x| x as i64).collect(),
            DType::I16 => b
                .chunks_exact(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]) as i64)
                .collect(),
            DType::U16 => b
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]) as i64)
                .collect(),
            DType::U32 => b
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                .collect(),
            // Bit reinterpretation: callers that care about values past i64::MAX check the dtype.
            DType::U64 => b
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as i64)
                .collect(),
            d => {
                return Err(Error::invalid(
                    "to_i64",
                    format!("tensor is {d}, not an integer type"),
                ))
            }
        };
        Ok(v)
    }

    /// Every value as f64: F64 as stored, other floats and block formats through f32, integers
    /// cast (U64 keeps its full unsigned range).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        let b = self.bytes_or_err("to_f64")?;
        Ok(match self.dtype {
            DType::F64 => b
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
            DType::U64 => self
                .to_i64_vec()?
                .into_iter()
                .map(|x| x as u64 as f64)
                .collect(),
            d if d.is_integer() => self.to_i64_vec()?.into_iter().map(|x| x as f64).collect(),
            _ => self.to_f32_vec()?.into_iter().map(f64::from).collect(),
        })
    }

    /// A host tensor of a scalar `dtype` made from f64 values: F64 stored as is, other floats
    /// rounded, integers truncated toward zero and saturated (NaN becomes 0), BOOL is `x != 0`.
    pub fn from_f64_as(dims: &[usize], data: &[f64], dtype: DType) -> Result<Tensor> {
        let bytes: Vec<u8> = match dtype {
            DType::F64 => data.iter().flat_map(|x| x.to_le_bytes()).collect(),
            DType::U64 => data
                .iter()
                .flat_map(|&x| (x as u64).to_le_bytes())
                .collect(),
            DType::Bool => data.iter().map(|&x| u8::from(x != 0.0)).collect(),
            d if d.is_integer() => {
                let (lo, hi) = match d {
                    DType::I8 => (i8::MIN as f64, i8::MAX as f64),
                    DType::U8 => (0.0, u8::MAX as f64),
                    DType::I16 => (i16::MIN as f64, i16::MAX as f64),
                    DType::U16 => (0.0, u16::MAX as f64),
                    DType::I32 => (i32::MIN as f64, i32::MAX as f64),
                    DType::U32 => (0.0, u32::MAX as f64),
                    _ => (i64::MIN as f64, i64::MAX as f64),
                };
                let v: Vec<i64> = data.iter().map(|&x| x.clamp(lo, hi) as i64).collect();
                return Tensor::from_i64_as(dims, &v, d);
            }
            d => {
                let v: Vec<f32> = data.iter().map(|&x| x as f32).collect();
                return Tensor::from_f32_as(dims, &v, d);
            }
        };
        Tensor::from_bytes(dims, dtype, &bytes)
    }

    /// A host tensor of a scalar `dtype` made from i64 values: integers wrap to the dtype's
    /// width (two's complement), BOOL is `x != 0`, floats convert.
    pub fn from_i64_as(dims: &[usize], data: &[i64], dtype: DType) -> Result<Tensor> {
        let bytes: Vec<u8> = match dtype {
            DType::I64 | DType::U64 => data.iter().flat_map(|x| x.to_le_bytes()).collect(),
            DType::I32 | DType::U32 => data
                .iter()
                .flat_map(|&x| (x as i32).to_le_bytes())
                .collect(),
            DType::I16 | DType::U16 => data
                .iter()
                .flat_map(|&x| (x as i16).to_le_bytes())
                .collect(),
            DType::I8 | DType::U8 => data.iter().map(|&x| x as u8).collect(),
            DType::Bool => data.iter().map(|&x| u8::from(x != 0)).collect(),
            DType::F64 => data
                .iter()
                .flat_map(|&x| (x as f64).to_le_bytes())
                .collect(),
            d => {
                let v: Vec<f32> = data.iter().map(|&x| x as f32).collect();
                return Tensor::from_f32_as(dims, &v, d);
            }
        };
        Tensor::from_bytes(dims, dtype, &bytes)
    }
}

/// The `n` values that `bytes` of `dtype` hold, as f32. F32 bytes are copied once, into a
/// vector that is not zeroed first (a decode step reads a vocabulary of logits this way).
pub fn decode_f32_vec(dtype: DType, bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    if cfg!(target_endian = "little")
        && dtype == DType::F32
        && Some(bytes.len()) == n.checked_mul(4)
    {
        if let Ok(v) = bytemuck::try_cast_slice::<u8, f32>(bytes) {
            return Ok(v.to_vec());
        }
    }
    let mut out = vec![0f32; n];
    decode_f32(dtype, bytes, &mut out)?;
    Ok(out)
}

/// Decodes `bytes` of `dtype` into `out` (one f32 per value).
pub(crate) fn decode_f32(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let need = dtype.bytes_for(out.len());
    if need != Some(bytes.len()) {
        return Err(Error::WeightFormatMismatch {
            name: "<decode>".into(),
            declared: dtype,
            actual_bytes: bytes.len(),
        });
    }
    match dtype {
        DType::F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        DType::F16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        DType::BF16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        DType::I8 => {
            for (o, &x) in out.iter_mut().zip(bytes) {
                *o = x as i8 as f32;
            }
        }
        DType::U8 | DType::Bool => {
            for (o, &x) in out.iter_mut().zip(bytes) {
                *o = x as f32;
            }
        }
        DType::I32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32;
            }
        }
        DType::I64 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(8)) {
                *o = i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32;
            }
        }
        DType::F64 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(8)) {
                *o = f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32;
            }
        }
        DType::U64 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(8)) {
                *o = u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32;
            }
        }
        DType::I16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f32::from(i16::from_le_bytes([c[0], c[1]]));
            }
        }
        DType::U16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f32::from(u16::from_le_bytes([c[0], c[1]]));
            }
        }
        DType::U32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32;
            }
        }
        _ => quant::dequantize(dtype, bytes, out)?,
    }
    Ok(())
}

/// Encodes f32 values as `dtype` into `out`, which must be exactly the right size.
pub(crate) fn encode_f32(dtype: DType, src: &[f32], out: &mut [u8]) -> Result<()> {
    if dtype.bytes_for(src.len()) != Some(out.len()) {
        return Err(Error::invalid(
            "encode",
            format!(
                "{} values of {dtype} do not fit {} bytes",
                src.len(),
                out.len()
            ),
        ));
    }
    match dtype {
        DType::F32 => {
            for (c, v) in out.chunks_exact_mut(4).zip(src) {
                c.copy_from_slice(&v.to_le_bytes());
            }
        }
        DType::F16 => {
            for (c, v) in out.chunks_exact_mut(2).zip(src) {
                c.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
            }
        }
        DType::BF16 => {
            for (c, v) in out.chunks_exact_mut(2).zip(src) {
                c.copy_from_slice(&bf16::from_f32(*v).to_le_bytes());
            }
        }
        // Integer casts truncate toward zero and saturate, like Rust's `as`.
        DType::I8 => {
            for (o, v) in out.iter_mut().zip(src) {
                *o = (*v as i8) as u8;
            }
        }
        DType::U8 => {
            for (o, v) in out.iter_mut().zip(src) {
                *o = *v as u8;
            }
        }
        DType::Bool => {
            for (o, v) in out.iter_mut().zip(src) {
                *o = u8::from(*v != 0.0);
            }
        }
        DType::I32 => {
            for (c, v) in out.chunks_exact_mut(4).zip(src) {
                c.copy_from_slice(&(*v as i32).to_le_bytes());
            }
        }
        DType::I64 => {
            for (c, v) in out.chunks_exact_mut(8).zip(src) {
                c.copy_from_slice(&(*v as i64).to_le_bytes());
            }
        }
        DType::F64 => {
            for (c, v) in out.chunks_exact_mut(8).zip(src) {
                c.copy_from_slice(&f64::from(*v).to_le_bytes());
            }
        }
        DType::U64 => {
            for (c, v) in out.chunks_exact_mut(8).zip(src) {
                c.copy_from_slice(&(*v as u64).to_le_bytes());
            }
        }
        DType::I16 => {
            for (c, v) in out.chunks_exact_mut(2).zip(src) {
                c.copy_from_slice(&(*v as i16).to_le_bytes());
            }
        }
        DType::U16 => {
            for (c, v) in out.chunks_exact_mut(2).zip(src) {
                c.copy_from_slice(&(*v as u16).to_le_bytes());
            }
        }
        DType::U32 => {
            for (c, v) in out.chunks_exact_mut(4).zip(src) {
                c.copy_from_slice(&(*v as u32).to_le_bytes());
            }
        }
        _ => quant::quantize(dtype, src, out)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// F32 bytes come back whole whether or not they sit 4-aligned, other dtypes decode, and
    /// a byte count that does not match the value count is an error.
    #[test]
    fn decode_f32_vec_copies_or_decodes() {
        let vals = [1.5f32, -2.0, 3.25];
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(decode_f32_vec(DType::F32, &bytes, 3).unwrap(), vals);
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(&bytes);
        assert_eq!(decode_f32_vec(DType::F32, &shifted[1..], 3).unwrap(), vals);
        let h: Vec<u8> = vals
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        assert_eq!(decode_f32_vec(DType::F16, &h, 3).unwrap(), vals);
        assert!(decode_f32_vec(DType::F32, &bytes, 2).is_err());
        assert!(decode_f32_vec(DType::F32, &bytes[..11], 3).is_err());
    }

    #[test]
    fn new_checks_sizes() {
        assert!(Tensor::from_bytes(&[2, 3], DType::F32, &[0; 24]).is_ok());
        assert!(Tensor::from_bytes(&[2, 3], DType::F32, &[0; 20]).is_err());
        assert!(Tensor::from_bytes(&[1, 33], DType::Q4_0, &[0; 18]).is_err());
        assert!(Tensor::from_bytes(&[2, 32], DType::Q4_0, &[0; 36]).is_ok());
    }

    #[test]
    fn float_round_trips() {
        let v = [1.0f32, -2.5, 0.125, 3072.0];
        for d in [DType::F32, DType::F16, DType::BF16] {
            let t = Tensor::from_f32_as(&[4], &v, d).unwrap();
            assert_eq!(t.to_f32_vec().unwrap(), v);
        }
        let t = Tensor::from_f32(&[2, 2], &v)
            .unwrap()
            .reshape(&[4])
            .unwrap();
        assert_eq!(&*t.as_f32().unwrap(), &v);
        assert!(t.reshape(&[3]).is_err());
    }

    #[test]
    fn wide_scalar_types_convert() {
        let t = Tensor::from_f64_as(&[3], &[1.0e300, -0.1, 2.5], DType::F64).unwrap();
        assert_eq!(t.to_f64_vec().unwrap(), [1.0e300, -0.1, 2.5]);
        assert_eq!(t.to_f32_vec().unwrap()[2], 2.5);
        let t = Tensor::from_f64_as(&[3], &[-3.7, 70000.0, f64::NAN], DType::I16).unwrap();
        assert_eq!(t.to_i64_vec().unwrap(), [-3, 32767, 0]);
        let t = Tensor::from_i64_as(&[2], &[65535, 65536], DType::U16).unwrap();
        assert_eq!(t.to_i64_vec().unwrap(), [65535, 0]);
        let t = Tensor::from_f64_as(&[2], &[4.0e9, -1.0], DType::U32).unwrap();
        assert_eq!(t.to_i64_vec().unwrap(), [4_000_000_000, 0]);
        let t = Tensor::from_f64_as(&[1], &[1.8e19], DType::U64).unwrap();
        assert_eq!(t.to_f64_vec().unwrap(), [1.8e19]);
        assert_eq!(t.to_i64_vec().unwrap(), [1.8e19 as u64 as i64]);
        let t = Tensor::from_f32_as(&[2], &[-1.5, 2.0], DType::F64).unwrap();
        assert_eq!(t.to_f64_vec().unwrap(), [-1.5, 2.0]);
    }
}
