//! Tensor shapes: row-major dimensions, last dimension contiguous (numpy and PyTorch order).
//!
//! GGUF lists dimensions fastest-first (`ne[0]` is the row length); readers reverse them.

use crate::{Error, Result};
use smallvec::SmallVec;
use std::fmt;

/// Row-major dimensions. A rank-0 shape is a scalar with one element. Up to four dimensions
/// are held inline: shapes are made and cloned for every op a model runs (output shapes,
/// the dispatcher's tensor infos), and most have rank four or less.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(SmallVec<[usize; 4]>);

impl Shape {
    /// A shape from dimensions, checking that the element count fits in `usize`.
    pub fn new(dims: impl AsRef<[usize]>) -> Result<Shape> {
        let dims = dims.as_ref();
        checked_numel(dims).ok_or_else(|| Error::InvalidArgument {
            op: "shape".into(),
            reason: format!("element count of {dims:?} overflows"),
        })?;
        Ok(Shape(SmallVec::from_slice(dims)))
    }

    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// Number of elements (checked at construction, so this cannot overflow).
    pub fn numel(&self) -> usize {
        self.0.iter().product()
    }

    /// The last dimension (the contiguous row length); 1 for a scalar.
    pub fn last(&self) -> usize {
        self.0.last().copied().unwrap_or(1)
    }

    /// Number of rows: the product of every dimension but the last.
    pub fn rows(&self) -> usize {
        match self.0.split_last() {
            Some((_, lead)) => lead.iter().product(),
            None => 1,
        }
    }

    /// Row-major strides in elements.
    pub fn strides(&self) -> Vec<usize> {
        let mut s = vec![1usize; self.0.len()];
        for i in (0..self.0.len().saturating_sub(1)).rev() {
            s[i] = s[i + 1] * self.0[i + 1];
        }
        s
    }

    /// Resolves a possibly negative axis against this rank.
    pub fn axis(&self, axis: isize, op: &str) -> Result<usize> {
        let r = self.0.len() as isize;
        let a = if axis < 0 { axis + r } else { axis };
        if a < 0 || a >= r.max(1) {
            return Err(Error::invalid(
                op,
                format!("axis {axis} out of range for rank {r}"),
            ));
        }
        Ok(a as usize)
    }
}

/// The product of `dims`, or `None` on overflow.
pub fn checked_numel(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl From<&Shape> for Vec<usize> {
    fn from(s: &Shape) -> Vec<usize> {
        s.0.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numel_strides_axis() {
        let s = Shape::new(vec![2, 3, 5]).unwrap();
        assert_eq!(s.numel(), 30);
        assert_eq!(s.strides(), vec![15, 5, 1]);
        assert_eq!(s.rows(), 6);
        assert_eq!(s.axis(-1, "t").unwrap(), 2);
        assert!(s.axis(3, "t").is_err());
        assert!(Shape::new(vec![usize::MAX, 2]).is_err());
        assert_eq!(Shape::new(Vec::new()).unwrap().numel(), 1);
    }
}
