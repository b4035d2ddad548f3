//! Arbitrary chat templates and message text through the template engine: Ok or Err, never a
//! panic, never more than the output limit, and bounded work (the engine's fuel).
#![no_main]

use cyb_runtime::chat_template::MAX_RENDERED_BYTES;
use cyb_runtime::{ChatMessage, ChatTemplate, RenderOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // The first line is the message, the rest the template.
    let (message, source) = text.split_once('\n').unwrap_or(("hi", &text));
    let Ok(t) = ChatTemplate::new(source, Some("<s>"), Some("</s>")) else {
        return;
    };
    let messages = [ChatMessage::system("be brief"), ChatMessage::user(message)];
    if let Ok(out) = t.render(&messages, &RenderOptions::default()) {
        assert!(out.len() <= MAX_RENDERED_BYTES);
    }
});
