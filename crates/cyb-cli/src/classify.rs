//! `cyb-llm classify MODEL "text"...`: label scores of each text from a sequence-classification
//! model (softmax; sigmoid for one-logit rerankers and multi-label heads, raw for regression;
//! `--function` overrides), or the label of every token from a token-classification model, as
//! a JSON array (one object per text, in order) on stdout. `--pair TEXT` classifies
//! text pairs (token types 0/1); `--labels a,b,c` is zero-shot classification with an NLI model
//! (each label as the hypothesis "This example is {label}.").

use crate::session_args::EngineArgs;
use cyb_tensor::{Error, Result};
use serde_json::json;

#[derive(clap::Args)]
pub struct ClassifyArgs {
    /// A model saved as *ForSequenceClassification (its config.json names the labels).
    pub model: String,
    /// Texts to classify.
    #[arg(required = true)]
    pub texts: Vec<String>,
    /// Cut texts longer than the model takes instead of refusing them.
    #[arg(long)]
    pub truncate: bool,
    /// Second text of a pair (e.g. premise/hypothesis, question/passage) for every text.
    #[arg(long, conflicts_with = "labels")]
    pub pair: Option<String>,
    /// Zero-shot classification over these candidate labels (comma-separated) with an NLI
    /// model: each label becomes a hypothesis, scored by its entailment logit.
    #[arg(long, value_delimiter = ',')]
    pub labels: Vec<String>,
    /// Hypothesis template for --labels; `{}` is replaced by the label.
    #[arg(long, default_value = "This example is {}.", requires = "labels")]
    pub template: String,
    /// With --labels: score each label on its own (entailment vs contradiction) instead of
    /// one softmax over all labels.
    #[arg(long, requires = "labels")]
    pub multi_label: bool,
    /// How logits become scores: softmax, sigmoid or none (default: as transformers'
    /// text-classification pipeline decides from the config: none for regression, sigmoid
    /// for one label or multi-label, else softmax).
    #[arg(long, conflicts_with = "labels")]
    pub function: Option<String>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub fn run(args: ClassifyArgs) -> Result<()> {
    let model = args.engine.load(Some(&args.model))?;
    let texts: Vec<&str> = args.texts.iter().map(String::as_str).collect();
    let opts = cyb_runtime::ClassifyOptions {
        truncate: args.truncate,
        function: args
            .function
            .as_deref()
            .map(cyb_runtime::ScoreFunction::parse)
            .transpose()?,
    };
    if model.has_token_classifier() {
        let mut out = Vec::with_capacity(texts.len());
        for t in &texts {
            let tokens: Vec<_> = model
                .classify_tokens(t, args.truncate)?
                .into_iter()
                .map(|l| json!({"token": l.token, "label": l.label, "score": l.score}))
                .collect();
            out.push(json!({"text": t, "tokens": tokens}));
        }
        let json = serde_json::to_string_pretty(&out)
            .map_err(|e| Error::invalid("classify", format!("cannot write JSON: {e}")))?;
        println!("{json}");
        return Ok(());
    }
    let results = if !args.labels.is_empty() {
        let labels: Vec<&str> = args.labels.iter().map(String::as_str).collect();
        let opts = cyb_runtime::ZeroShotOptions {
            hypothesis_template: args.template.clone(),
            multi_label: args.multi_label,
        };
        texts
            .iter()
            .map(|t| model.zero_shot(t, &labels, &opts))
            .collect::<Result<Vec<_>>>()?
    } else if let Some(pair) = &args.pair {
        let pairs: Vec<(&str, &str)> = texts.iter().map(|t| (*t, pair.as_str())).collect();
        model.classify_pair_with(&pairs, &opts)?
    } else {
        model.classify_with(&texts, &opts)?
    };
    let out: Vec<_> = texts
        .iter()
        .zip(results)
        .map(|(t, scores)| {
            let labels: Vec<_> = scores
                .iter()
                .map(|s| json!({"label": s.label, "score": s.score}))
                .collect();
            json!({"text": t, "label": scores.first().map(|s| s.label.clone()), "scores": labels})
        })
        .collect();
    let json = serde_json::to_string_pretty(&out)
        .map_err(|e| Error::invalid("classify", format!("cannot write JSON: {e}")))?;
    println!("{json}");
    Ok(())
}
