//! cyb-runtime

pub mod chat_template;
pub mod sampling;
pub mod tokenizer;

pub use chat_template::{ChatMessage, ChatTemplate, RenderOptions};
pub use sampling::{Sampler, SamplingParams, StopMatcher};
pub use tokenizer::{IncrementalDecoder, Tokenizer};
