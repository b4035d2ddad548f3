//! The hook through which a grammar (JSON schema, regex, ...) constrains decoding. The
//! generator asks the constraint which tokens may come next before each draw and tells it
//! which token was drawn; the grammar engine itself lives with the caller.

use cyb_tensor::Result;

/// A constraint on the generated token sequence.
pub trait TokenConstraint: Send {
    /// Sets the logit of every token that may not come next to `-inf`. End-of-sequence ids
    /// must stay allowed only where the constrained text may end.
    fn mask(&mut self, logits: &mut [f32]) -> Result<()>;
    /// Advances past the sampled `token` (one that `mask` allowed).
    fn accept(&mut self, token: u32) -> Result<()>;
    /// True when no further token is possible: generation ends with `FinishReason::Stop`.
    fn is_finished(&self) -> bool;
}
