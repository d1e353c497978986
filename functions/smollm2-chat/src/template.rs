//! The GGUF's chat template (`tokenizer.chat_template`), ChatML as SmolLM2 writes it:
//! each message `<|im_start|>{role}\n{content}<|im_end|>\n`, preceded by the template's
//! own default system message when the first message is not a system one, and
//! followed by `<|im_start|>assistant\n` (the generation prompt). The default system
//! prompt is read from the template's text, not written here.

use serde::Deserialize;
use sluice_guest::{Error, Result};

/// One chat message of the `messages` input.
#[derive(Debug, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

/// What the template is made of: its default system prompt.
#[derive(Debug)]
pub struct ChatTemplate {
    default_system: String,
}

/// How the template writes the default system message (the prompt follows).
const SYSTEM_OPENING: &str = "'<|im_start|>system\n";

impl ChatTemplate {
    /// Checks that `template` is SmolLM2's ChatML and takes its default system prompt.
    pub fn parse(template: &str) -> Result<ChatTemplate> {
        let chatml = ["'<|im_start|>' + message['role'] + '\n'", "<|im_end|>", "<|im_start|>assistant\n"];
        if let Some(missing) = chatml.iter().find(|p| !template.contains(*p)) {
            return Err(Error::failed(format!("the chat template is not ChatML (no {missing:?})")));
        }
        let start = template
            .find(SYSTEM_OPENING)
            .ok_or_else(|| Error::failed("the chat template has no default system message"))?
            + SYSTEM_OPENING.len();
        let len = template[start..]
            .find("<|im_end|>")
            .ok_or_else(|| Error::failed("the chat template's system message does not end"))?;
        Ok(ChatTemplate { default_system: template[start..start + len].to_owned() })
    }

    /// The prompt for `messages`, ending with the generation prompt.
    pub fn render(&self, messages: &[Message]) -> String {
        let mut out = String::new();
        if messages.first().is_some_and(|m| m.role != "system") {
            out.push_str(&format!("<|im_start|>system\n{}<|im_end|>\n", self.default_system));
        }
        for m in messages {
            out.push_str(&format!("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content));
        }
        out.push_str("<|im_start|>assistant\n");
        out
    }
}

/// Parses the `messages` input: a JSON array of `{role, content}`.
pub fn messages(json: &str) -> Result<Vec<Message>> {
    serde_json::from_str(json)
        .map_err(|e| Error::invalid_input(format!("`messages` must be a JSON array of {{role, content}}: {e}")))
}
