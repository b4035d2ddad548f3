//! Element types: plain scalars and ggml's block-quantized formats.
//!
//! A block format stores `block_elems()` consecutive values of a row in `block_bytes()` bytes.
//! The byte layouts are ggml's own (see `quant/` for each), so a tensor read from a GGUF file is
//! used in place, straight from the mapping.

use std::fmt;

/// The element type of a tensor.
///
/// Scalar types hold one value per element. Block types (`Q*`, `TQ*`, `IQ*`) hold
/// `block_elems()` values per block of `block_bytes()` bytes; a row's length must be a
/// multiple of `block_elems()`.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    I8,
    I32,
    I64,
    U8,
    Bool,
    /// IEEE double; the graph path computes it natively (ONNX DOUBLE).
    F64,
    I16,
    U16,
    U32,
    /// Unsigned 64-bit; `to_i64_vec` reinterprets its bits as i64 (two's complement).
    U64,
    /// 32 values: f16 scale `d`, 16 bytes of 4-bit quants; `x = d * (q - 8)`.
    Q4_0,
    /// 32 values: f16 `d`, f16 `m`, 16 bytes of 4-bit quants; `x = d * q + m`.
    Q4_1,
    /// 32 values: f16 `d`, 4 bytes of 5th bits, 16 bytes of low nibbles; `x = d * (q - 16)`.
    Q5_0,
    /// 32 values: f16 `d`, f16 `m`, 4 bytes of 5th bits, 16 bytes of nibbles; `x = d * q + m`.
    Q5_1,
    /// 32 values: f16 `d`, 32 signed bytes; `x = d * q`.
    Q8_0,
    /// 32 values: f16 `d`, f16 `s = d * sum(q)`, 32 signed bytes; `x = d * q`.
    Q8_1,
    /// 256 values in 16 sub-blocks of 16: 2-bit quants, 4-bit scales and mins.
    Q2_K,
    /// 256 values in 16 sub-blocks of 16: 3-bit quants (2 low bits + high-bit mask), 6-bit scales.
    Q3_K,
    /// 256 values in 8 sub-blocks of 32: 4-bit quants, 6-bit scales and mins.
    Q4_K,
    /// 256 values in 8 sub-blocks of 32: 5-bit quants, 6-bit scales and mins.
    Q5_K,
    /// 256 values in 16 sub-blocks of 16: 6-bit quants, 8-bit signed scales.
    Q6_K,
    /// 256 values: f32 `d`, 256 signed bytes, 16 i16 sums of 16; the activation format of K-quant dots.
    Q8_K,
    /// 256 ternary values {-1, 0, 1} packed 5 per byte (base-3) plus 4 per byte in `qh`; f16 `d`.
    TQ1_0,
    /// 256 ternary values packed 2 bits each (stored as q+1); f16 `d`.
    TQ2_0,
    /// 32 values: f16 `d`, 16 bytes of 4-bit indices into a fixed non-linear 16-entry table.
    IQ4_NL,
}

impl DType {
    /// Every dtype, scalar types first.
    pub const ALL: [DType; 28] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::Bool,
        DType::F64,
        DType::I16,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q8_1,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::Q8_K,
        DType::TQ1_0,
        DType::TQ2_0,
        DType::IQ4_NL,
    ];

    /// Values per block (1 for scalar types).
    pub const fn block_elems(self) -> usize {
        match self {
            DType::F32
            | DType::F16
            | DType::BF16
            | DType::I8
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::Bool
            | DType::F64
            | DType::I16
            | DType::U16
            | DType::U32
            | DType::U64 => 1,
            DType::Q4_0
            | DType::Q4_1
            | DType::Q5_0
            | DType::Q5_1
            | DType::Q8_0
            | DType::Q8_1
            | DType::IQ4_NL => 32,
            DType::Q2_K
            | DType::Q3_K
            | DType::Q4_K
            | DType::Q5_K
            | DType::Q6_K
            | DType::Q8_K
            | DType::TQ1_0
            | DType::TQ2_0 => 256,
        }
    }

    /// Bytes per block (the element size for scalar types).
    pub const fn block_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::I64 | DType::F64 | DType::U64 => 8,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q8_0 => 34,
            DType::Q8_1 => 36,
            DType::Q2_K => 84,
            DType::Q3_K => 110,
            DType::Q4_K => 144,
            DType::Q5_K => 176,
            DType::Q6_K => 210,
            DType::Q8_K => 292,
            DType::TQ1_0 => 54,
            DType::TQ2_0 => 66,
            DType::IQ4_NL => 18,
        }
    }

    /// True for the ggml block formats.
    pub const fn is_quantized(self) -> bool {
        self.block_elems() > 1
    }

    /// True for F32, F16, BF16 and F64.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// True for the integer and boolean scalar types.
    pub const fn is_integer(self) -> bool {
        matches!(
            self,
            DType::I8
                | DType::I16
                | DType::I32
                | DType::I64
                | DType::U8
                | DType::U16
                | DType::U32
                | DType::U64
                | DType::Bool
        )
    }

    /// True for the unsigned integer types (not BOOL).
    pub const fn is_unsigned(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// Bytes needed for `n` values, or `None` if `n` is not a whole number of blocks or the
    /// product overflows.
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        let be = self.block_elems();
        if !n.is_multiple_of(be) {
            return None;
        }
        (n / be).checked_mul(self.block_bytes())
    }

    /// The ggml type id (`enum ggml_type`), as stored in GGUF tensor infos.
    pub const fn ggml_type(self) -> Option<u32> {
        Some(match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Q4_0 => 2,
            DType::Q4_1 => 3,
            DType::Q5_0 => 6,
            DType::Q5_1 => 7,
            DType::Q8_0 => 8,
            DType::Q8_1 => 9,
            DType::Q2_K => 10,
            DType::Q3_K => 11,
            DType::Q4_K => 12,
            DType::Q5_K => 13,
            DType::Q6_K => 14,
            DType::Q8_K => 15,
            DType::IQ4_NL => 20,
            DType::I8 => 24,
            DType::I16 => 25,
            DType::I32 => 26,
            DType::I64 => 27,
            DType::F64 => 28,
            DType::BF16 => 30,
            DType::TQ1_0 => 34,
            DType::TQ2_0 => 35,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool => return None,
        })
    }

    /// The dtype for a ggml type id, or `None` for ids this build does not implement.
    pub fn from_ggml_type(id: u32) -> Option<DType> {
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.ggml_type() == Some(id))
    }

    /// The name ggml and GGUF tools print for a ggml type id, also for ids we do not implement
    /// (so errors can say which format a file used).
    pub fn ggml_type_name(id: u32) -> &'static str {
        match id {
            16 => "IQ2_XXS",
            17 => "IQ2_XS",
            18 => "IQ3_XXS",
            19 => "IQ1_S",
            21 => "IQ3_S",
            22 => "IQ2_S",
            23 => "IQ4_XS",
            29 => "IQ1_M",
            31..=33 => "Q4_0_4_4/Q4_0_4_8/Q4_0_8_8 (removed from ggml)",
            36..=38 => "IQ4_NL_4_4/IQ4_NL_4_8/IQ4_NL_8_8 (removed from ggml)",
            39 => "MXFP4",
            _ => match DType::from_ggml_type(id) {
                Some(d) => d.name(),
                None => "unknown",
            },
        }
    }

    /// The canonical name (`"Q4_K"`, `"F16"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::I8 => "I8",
            DType::I32 => "I32",
            DType::I64 => "I64",
            DType::U8 => "U8",
            DType::Bool => "BOOL",
            DType::F64 => "F64",
            DType::I16 => "I16",
            DType::U16 => "U16",
            DType::U32 => "U32",
            DType::U64 => "U64",
            DType::Q4_0 => "Q4_0",
            DType::Q4_1 => "Q4_1",
            DType::Q5_0 => "Q5_0",
            DType::Q5_1 => "Q5_1",
            DType::Q8_0 => "Q8_0",
            DType::Q8_1 => "Q8_1",
            DType::Q2_K => "Q2_K",
            DType::Q3_K => "Q3_K",
            DType::Q4_K => "Q4_K",
            DType::Q5_K => "Q5_K",
            DType::Q6_K => "Q6_K",
            DType::Q8_K => "Q8_K",
            DType::TQ1_0 => "TQ1_0",
            DType::TQ2_0 => "TQ2_0",
            DType::IQ4_NL => "IQ4_NL",
        }
    }

    /// Parses a name case-insensitively (`"q4_k"`, `"bf16"`, `"bool"`).
    pub fn parse(s: &str) -> Option<DType> {
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.name().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ggml_ids_round_trip() {
        for d in DType::ALL {
            if let Some(id) = d.ggml_type() {
                assert_eq!(DType::from_ggml_type(id), Some(d));
                assert_eq!(DType::ggml_type_name(id), d.name());
            }
            assert_eq!(DType::parse(&d.name().to_lowercase()), Some(d));
        }
        assert_eq!(DType::from_ggml_type(23), None);
        assert_eq!(DType::ggml_type_name(23), "IQ4_XS");
    }

    #[test]
    fn bytes_for_checks_blocks_and_overflow() {
        assert_eq!(DType::Q4_K.bytes_for(512), Some(288));
        assert_eq!(DType::Q4_0.bytes_for(33), None);
        assert_eq!(DType::F32.bytes_for(usize::MAX), None);
        assert_eq!(DType::Q6_K.bytes_for(256), Some(210));
    }
}
