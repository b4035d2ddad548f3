//! K-quant dot products (placeholder until kernels land).
use crate::matmul_q4::QDot;
use cyb_tensor::DType;

pub fn kernel(_dtype: DType, _set: crate::KernelSet) -> Option<QDot> {
    None
}
