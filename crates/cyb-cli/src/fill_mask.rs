//! `cyb-llm fill-mask MODEL "text with [MASK]"... [--top-k N] [--json]`: the most likely tokens
//! at each mask token of each text, from a masked-LM model (`*ForMaskedLM`). Plain output is
//! one line per candidate (score, token, filled-in text); `--json` prints an array with one
//! object per text whose `masks` holds one candidate list per mask.

use crate::session_args::EngineArgs;
use cyb_tensor::{Error, Result};
use serde_json::json;

#[derive(clap::Args)]
pub struct FillMaskArgs {
    /// A model saved as *ForMaskedLM (BERT, RoBERTa, DistilBERT, DeBERTa).
    pub model: String,
    /// Texts with the tokenizer's mask token (`[MASK]` for BERT, `<mask>` for RoBERTa).
    #[arg(required = true)]
    pub texts: Vec<String>,
    /// Candidates per mask.
    #[arg(long, default_value_t = 5)]
    pub top_k: usize,
    /// Print JSON instead of lines.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub fn run(args: FillMaskArgs) -> Result<()> {
    let model = args.engine.load(Some(&args.model))?;
    let mut out = Vec::with_capacity(args.texts.len());
    for text in &args.texts {
        let masks = model.fill_mask(text, args.top_k)?;
        if !args.json {
            for (i, row) in masks.iter().enumerate() {
                if masks.len() > 1 {
                    println!("{text}  (mask {})", i + 1);
                } else {
                    println!("{text}");
                }
                for c in row {
                    println!("  {:.4}  {:<16} {}", c.score, c.token_str, c.sequence);
                }
            }
            continue;
        }
        let masks: Vec<Vec<_>> = masks
            .iter()
            .map(|row| {
                row.iter()
                    .map(|c| {
                        json!({"token": c.token_id, "token_str": c.token_str,
                               "score": c.score, "sequence": c.sequence})
                    })
                    .collect()
            })
            .collect();
        out.push(json!({"text": text, "masks": masks}));
    }
    if args.json {
        let json = serde_json::to_string_pretty(&out)
            .map_err(|e| Error::invalid("fill-mask", format!("cannot write JSON: {e}")))?;
        println!("{json}");
    }
    Ok(())
}
