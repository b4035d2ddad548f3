//! Streaming a generation to stdout with Ctrl-C support, and printing its metrics.

use cyb_media::image::RgbImage;
use cyb_runtime::{GenerationMetrics, Generator, SamplingParams, TokenConstraint};
use cyb_tensor::Result;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static HANDLER: OnceLock<bool> = OnceLock::new();

/// Installs the Ctrl-C handler once: a Ctrl-C during generation stops it cleanly; a second one
/// while nothing is generating exits.
fn install_handler() {
    HANDLER.get_or_init(|| {
        ctrlc::set_handler(|| {
            if INTERRUPTED.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
        })
        .is_ok()
    });
}

/// Generates from `ids`, printing text as it arrives. Returns the text and the metrics.
pub fn stream_answer(
    session: &mut Generator,
    ids: &[u32],
    images: &[RgbImage],
    params: SamplingParams,
) -> Result<(String, GenerationMetrics)> {
    stream_constrained(session, ids, images, params, None)
}

/// [`stream_answer`], with only the tokens `constraint` allows (a grammar).
pub fn stream_constrained(
    session: &mut Generator,
    ids: &[u32],
    images: &[RgbImage],
    params: SamplingParams,
    constraint: Option<Box<dyn TokenConstraint>>,
) -> Result<(String, GenerationMetrics)> {
    install_handler();
    INTERRUPTED.store(false, Ordering::SeqCst);
    let mut gen = session.generate_with_images(ids, images, params)?;
    if let Some(c) = constraint {
        gen = gen.with_constraint(c);
    }
    let mut text = String::new();
    let mut out = std::io::stdout().lock();
    for piece in gen.by_ref() {
        let piece = piece?;
        text.push_str(&piece.text);
        let _ = out.write_all(piece.text.as_bytes());
        let _ = out.flush();
        if INTERRUPTED.load(Ordering::SeqCst) {
            eprint!("\n[interrupted]");
            break;
        }
    }
    INTERRUPTED.store(false, Ordering::SeqCst);
    Ok((text, gen.metrics().clone()))
}

/// One line of metrics on stderr.
pub fn print_metrics(m: &GenerationMetrics) {
    eprintln!(
        "load {:.0} ms | prompt {} tok ({} prefilled) | ttft {:.0} ms | prefill {:.1} tok/s | decode {:.1} tok/s | {} tokens",
        m.load_ms,
        m.prompt_tokens,
        m.prefilled_tokens,
        m.time_to_first_token_ms,
        m.prefill_tps(),
        m.decode_tps(),
        m.generated_tokens
    );
    if m.draft_proposed > 0 {
        eprintln!(
            "draft: {} of {} proposed tokens accepted ({:.1}%)",
            m.draft_accepted,
            m.draft_proposed,
            100.0 * m.draft_accepted as f64 / m.draft_proposed as f64
        );
    }
}
