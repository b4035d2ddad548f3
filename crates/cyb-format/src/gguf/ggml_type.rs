//! ggml's tensor types as GGUF stores them: type id, name and block layout.
//!
//! cyb-tensor's `DType` covers the types this build computes with, but a valid GGUF file may
//! hold any type ggml defines (IQ2_XXS, MXFP4, F64, ...). Knowing every type's block layout lets
//! the reader size, place and bounds-check such tensors like any other, so the file still opens
//! and lists; only reading one as a `Tensor` is refused.

use cyb_tensor::DType;

/// One ggml tensor type: a block of `block_elems` consecutive values of a row takes
/// `block_bytes` bytes (scalar types: 1 value, its size in bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlType {
    /// The `enum ggml_type` value stored in GGUF tensor infos.
    pub id: u32,
    /// The name ggml's tools and gguf-py print.
    pub name: &'static str,
    pub block_elems: usize,
    pub block_bytes: usize,
}

const fn t(id: u32, name: &'static str, block_elems: usize, block_bytes: usize) -> GgmlType {
    GgmlType {
        id,
        name,
        block_elems,
        block_bytes,
    }
}

/// Every type ggml defines (ggml.h `enum ggml_type`), sizes from ggml-common.h's block structs
/// (`ggml_half` is 2 bytes, `QK_K` is 256). Checked against gguf-py's `GGML_QUANT_SIZES` by
/// tests/gguf_unsupported_types.rs.
pub const GGML_TYPES: [GgmlType; 34] = [
    t(0, "F32", 1, 4),
    t(1, "F16", 1, 2),
    t(2, "Q4_0", 32, 18),      // d + 16 nibble bytes
    t(3, "Q4_1", 32, 20),      // d, m + 16
    t(6, "Q5_0", 32, 22),      // d + qh[4] + 16
    t(7, "Q5_1", 32, 24),      // d, m + qh[4] + 16
    t(8, "Q8_0", 32, 34),      // d + 32
    t(9, "Q8_1", 32, 36),      // d, s + 32 (gguf-py still says 40, from when d and s were f32)
    t(10, "Q2_K", 256, 84),    // scales[16] + qs[64] + d, dmin
    t(11, "Q3_K", 256, 110),   // hmask[32] + qs[64] + scales[12] + d
    t(12, "Q4_K", 256, 144),   // d, dmin + scales[12] + qs[128]
    t(13, "Q5_K", 256, 176),   // d, dmin + scales[12] + qh[32] + qs[128]
    t(14, "Q6_K", 256, 210),   // ql[128] + qh[64] + scales[16] + d
    t(15, "Q8_K", 256, 292),   // f32 d + qs[256] + i16 bsums[16]
    t(16, "IQ2_XXS", 256, 66), // d + u16 qs[32]
    t(17, "IQ2_XS", 256, 74),  // d + u16 qs[32] + scales[8]
    t(18, "IQ3_XXS", 256, 98), // d + qs[96]
    t(19, "IQ1_S", 256, 50),   // d + qs[32] + u16 qh[8]
    t(20, "IQ4_NL", 32, 18),   // d + 16
    t(21, "IQ3_S", 256, 110),  // d + qs[64] + qh[8] + signs[32] + scales[4]
    t(22, "IQ2_S", 256, 82),   // d + qs[64] + qh[8] + scales[8]
    t(23, "IQ4_XS", 256, 136), // d + u16 scales_h + scales_l[4] + qs[128]
    t(24, "I8", 1, 1),
    t(25, "I16", 1, 2),
    t(26, "I32", 1, 4),
    t(27, "I64", 1, 8),
    t(28, "F64", 1, 8),
    t(29, "IQ1_M", 256, 56), // qs[32] + qh[16] + scales[8] (the scale lives in scales)
    t(30, "BF16", 1, 2),
    t(34, "TQ1_0", 256, 54), // qs[48] + qh[4] + d
    t(35, "TQ2_0", 256, 66), // qs[64] + d
    t(39, "MXFP4", 32, 17),  // E8M0 e + 16
    t(40, "NVFP4", 64, 36),  // 4 UE4M3 scales + 32
    t(41, "Q1_0", 128, 18),  // d + 16 sign-bit bytes
];

impl GgmlType {
    /// The type with this id, or `None` for ids ggml does not define (or has removed).
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GGML_TYPES.iter().copied().find(|g| g.id == id)
    }

    /// The dtype this build computes with for it, or `None`.
    pub fn dtype(self) -> Option<DType> {
        DType::from_ggml_type(self.id)
    }

    /// Bytes for `n` values, or `None` if `n` is not a whole number of blocks or it overflows.
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_elems) {
            return None;
        }
        (n / self.block_elems).checked_mul(self.block_bytes)
    }
}

/// What an id that is not in [`GGML_TYPES`] once meant, for the error that refuses it.
pub(crate) fn removed_type_name(id: u32) -> Option<&'static str> {
    match id {
        4 => Some("Q4_2"),
        5 => Some("Q4_3"),
        31..=33 => Some("Q4_0_4_4/Q4_0_4_8/Q4_0_8_8"),
        36..=38 => Some("IQ4_NL_4_4/IQ4_NL_4_8/IQ4_NL_8_8"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implemented_dtypes_agree_with_the_table() {
        for d in DType::ALL {
            let Some(id) = d.ggml_type() else { continue };
            let g = GgmlType::from_id(id).unwrap();
            assert_eq!(g.name, d.name(), "{d}");
            assert_eq!(
                (g.block_elems, g.block_bytes),
                (d.block_elems(), d.block_bytes())
            );
            assert_eq!(g.dtype(), Some(d));
        }
        for g in GGML_TYPES {
            assert!(removed_type_name(g.id).is_none(), "{}", g.name);
        }
    }

    #[test]
    fn ids_are_unique_and_unknown_ids_are_none() {
        for (i, a) in GGML_TYPES.iter().enumerate() {
            assert!(GGML_TYPES[..i]
                .iter()
                .all(|b| b.id != a.id && b.name != a.name));
        }
        for id in [4, 5, 31, 36, 42, u32::MAX] {
            assert_eq!(GgmlType::from_id(id), None, "{id}");
        }
        let iq4_xs = GgmlType::from_id(23).unwrap();
        assert_eq!(iq4_xs.dtype(), None);
        assert_eq!(iq4_xs.bytes_for(512), Some(272));
        assert_eq!(iq4_xs.bytes_for(100), None);
        let f64_type = GgmlType::from_id(28).unwrap();
        assert_eq!(f64_type.bytes_for(usize::MAX / 4), None);
    }
}
