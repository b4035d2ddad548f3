//! `cyb-llm chat [MODEL]`: interactive multi-turn chat. The session's KV cache is kept across
//! turns, so each turn prefills only what is new. `/reset` forgets the conversation,
//! `/system TEXT` sets the system message, `/image PATH` attaches an image to the next message
//! (vision-language models), `/exit` (or end of input) quits.

use crate::session_args::{DraftArgs, EngineArgs, SamplingArgs};
use crate::stream::{print_metrics, stream_answer};
use cyb_runtime::ChatMessage;
use cyb_tensor::{Error, Result};
use std::io::{BufRead, Write};

#[derive(clap::Args)]
pub struct ChatArgs {
    /// A GGUF file or Hugging Face directory (default: SmolLM2-135M-Instruct Q4_1).
    pub model: Option<String>,
    /// System message.
    #[arg(long)]
    pub system: Option<String>,
    /// Print metrics after each answer.
    #[arg(long)]
    pub metrics: bool,
    /// Keep the conversation in FILE: restored at start when it exists (its messages and the
    /// model's cache, so the next turn prefills only what is new), saved after every turn.
    #[arg(long, value_name = "FILE")]
    pub session: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub draft: DraftArgs,
}

pub fn run(args: ChatArgs) -> Result<()> {
    let rt = cyb_runtime::Runtime::new(args.engine.runtime_options()?)?;
    let model = args.engine.load_in(&rt, args.model.as_deref())?;
    if model.chat_template().is_none() {
        return Err(Error::InvalidConfig {
            field: "chat_template".into(),
            reason: "this model has no chat template; use `cyb-llm run --raw` instead".into(),
        });
    }
    let mut session = args.engine.generator(&model)?;
    args.draft.apply(&args.engine, &rt, &mut session)?;
    let mut system = args.system.clone();
    let mut turns: Vec<ChatMessage> = Vec::new();
    if let Some(path) = args.session.as_deref().filter(|p| p.exists()) {
        let note = session.load_session(path)?;
        // Besides the cache the file keeps the system message and the turns.
        let parsed = serde_json::from_slice::<serde_json::Value>(&note).and_then(|mut v| {
            let system = serde_json::from_value(v["system"].take())?;
            let turns = serde_json::from_value(v["turns"].take())?;
            Ok((system, turns))
        });
        (system, turns) = parsed.map_err(|e| Error::InvalidConfig {
            field: format!("session file {}", path.display()),
            reason: format!("its conversation does not parse: {e}"),
        })?;
        eprintln!(
            "[restored {} messages ({} tokens) from {}]",
            turns.len(),
            session.tokens().len(),
            path.display()
        );
    }
    let save =
        |session: &cyb_runtime::Generator, system: &Option<String>, turns: &[ChatMessage]| {
            let Some(path) = &args.session else {
                return Ok(());
            };
            let saved = serde_json::json!({ "system": system, "turns": turns });
            let note =
                serde_json::to_vec(&saved).map_err(|e| Error::invalid("session", e.to_string()))?;
            session.save_session(path, &note)
        };
    let image_help = if model.takes_images() {
        ", /image PATH"
    } else {
        ""
    };
    eprintln!(
        "chat with {} — /reset, /system TEXT{image_help}, /exit",
        model.path().display()
    );
    // The conversation's images in order, and those attached to the next message.
    let mut images = Vec::new();
    let mut pending = Vec::new();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        print!("> ");
        let _ = std::io::stdout().flush();
        let Some(line) = lines.next() else { break };
        let line = line.map_err(|source| Error::Io {
            path: "<stdin>".into(),
            source,
        })?;
        let input = line.trim();
        match input {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                turns.clear();
                images.clear();
                pending.clear();
                session.reset();
                save(&session, &system, &turns)?;
                eprintln!("[conversation cleared]");
                continue;
            }
            _ => {}
        }
        // "/system" alone clears the system message; "/systematic ..." is a user message.
        let system_command = input
            .strip_prefix("/system")
            .filter(|r| r.is_empty() || r.starts_with(char::is_whitespace));
        if let Some(path) = input.strip_prefix("/image ") {
            match crate::run::load_images(&model, &[path.trim().into()]) {
                Ok(mut img) => {
                    pending.append(&mut img);
                    eprintln!("[{} image(s) attached to the next message]", pending.len());
                }
                Err(e) => eprintln!("error: {e}"),
            }
            continue;
        }
        if let Some(rest) = system_command {
            let s = rest.trim();
            system = (!s.is_empty()).then(|| s.to_string());
            turns.clear();
            images.clear();
            session.reset();
            save(&session, &system, &turns)?;
            eprintln!("[system message set; conversation cleared]");
            continue;
        }
        let attached = pending.len();
        turns.push(match attached {
            0 => ChatMessage::user(input),
            n => ChatMessage::with_images("user", n, input),
        });
        images.append(&mut pending);
        let mut messages = Vec::new();
        if let Some(s) = &system {
            messages.push(ChatMessage::system(s.clone()));
        }
        messages.extend(turns.iter().cloned());
        // Context shift: when the conversation outgrows the context (with room for the
        // answer), its oldest turns go; the system message and this turn stay.
        let max_tokens = args.sampling.params().max_tokens;
        let (ids, dropped) =
            cyb_runtime::fit_chat(&mut messages, session.capacity(), max_tokens, |m| {
                model.prompt_ids(&model.render_chat(m, true)?, false)
            })?;
        if dropped > 0 {
            let gone: usize = turns.drain(..dropped).map(|t| t.image_count()).sum();
            images.drain(..gone.min(images.len()));
            eprintln!("[the {dropped} oldest messages were dropped to fit the context]");
        }
        match stream_answer(&mut session, &ids, &images, args.sampling.params()) {
            Ok((answer, metrics)) => {
                println!();
                if args.metrics {
                    print_metrics(&metrics);
                }
                turns.push(ChatMessage::assistant(answer));
                save(&session, &system, &turns)?;
            }
            Err(e) => {
                // The turn failed (a full context, say): report it and keep the chat going.
                turns.pop();
                images.truncate(images.len() - attached);
                eprintln!("error: {e}");
                eprintln!(
                    "(the conversation is kept; /reset starts a new one, or use a larger --ctx)"
                );
            }
        }
    }
    Ok(())
}
