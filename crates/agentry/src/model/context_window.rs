//! How many tokens a request holds, and how many a model can take: what context compaction
//! ([`Compaction`](crate::agent::Compaction)) measures against.

use super::ChatRequest;
use crate::message::ContentBlock;

/// The context windows of well-known remote models, by name prefix (longest prefix wins).
/// A model not here has no known window unless one is configured.
const KNOWN_WINDOWS: &[(&str, u64)] = &[
    ("gpt-4o", 128_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("claude-", 200_000),
    ("gemini-1.5", 1_048_576),
    ("gemini-2", 1_048_576),
    ("deepseek-chat", 65_536),
    ("deepseek-reasoner", 65_536),
    ("qwen2.5", 32_768),
    ("qwen3", 32_768),
    ("llama-3.1", 131_072),
    ("llama-3.2", 131_072),
    ("llama-3.3", 131_072),
    ("mistral-large", 131_072),
];

/// The context window of a well-known model, from its name (`gpt-4o-mini` → 128,000).
///
/// ```
/// use agentry::model::known_context_window;
/// assert_eq!(known_context_window("gpt-4o-mini"), Some(128_000));
/// assert_eq!(known_context_window("claude-sonnet-4-5"), Some(200_000));
/// assert_eq!(known_context_window("my-own-model"), None);
/// ```
pub fn known_context_window(model: &str) -> Option<u64> {
    let name = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    KNOWN_WINDOWS
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|&(_, window)| window)
}

/// An estimate of the tokens of `request` (its messages and its tool definitions) for a model
/// that cannot count them: a token per four ASCII characters, one per other character (CJK
/// text is about a token a character), and a few per message for the chat format.
pub fn estimate_tokens(request: &ChatRequest) -> u64 {
    let mut tally = Tally::default();
    for msg in &request.messages {
        for block in &msg.content {
            match block {
                ContentBlock::Text { text } => tally.text(text),
                ContentBlock::Thinking { thinking, .. } => tally.text(thinking),
                ContentBlock::ToolUse(call) => {
                    tally.text(&call.name);
                    match &call.raw_input {
                        Some(raw) => tally.text(raw),
                        None => tally.text(&call.input.to_string()),
                    }
                }
                ContentBlock::ToolResult(result) => {
                    tally.text(&result.name);
                    for part in &result.output {
                        match part {
                            ContentBlock::Text { text } => tally.text(text),
                            _ => tally.tokens += MEDIA_TOKENS,
                        }
                    }
                }
                _ => tally.tokens += MEDIA_TOKENS,
            }
        }
        tally.tokens += 4;
    }
    if !matches!(request.tool_choice, Some(super::ToolChoice::None)) {
        for tool in request.tools.iter() {
            tally.text(&tool.name);
            tally.text(&tool.description);
            tally.text(&tool.parameters.to_string());
        }
    }
    tally.ascii.div_ceil(4) + tally.tokens
}

/// A rough, generous share for an image or other media.
const MEDIA_TOKENS: u64 = 800;

#[derive(Default)]
struct Tally {
    ascii: u64,
    tokens: u64,
}

impl Tally {
    fn text(&mut self, text: &str) {
        let ascii = text.bytes().filter(u8::is_ascii).count() as u64;
        self.ascii += ascii;
        self.tokens += text.chars().count() as u64 - ascii;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Msg;

    #[test]
    fn the_estimate_counts_messages_and_tools_and_chinese_per_character() {
        let english = ChatRequest::new(vec![Msg::user("a".repeat(400))]);
        assert_eq!(estimate_tokens(&english), 104);
        let chinese = ChatRequest::new(vec![Msg::user("用户的狗叫雷克斯")]);
        assert_eq!(estimate_tokens(&chinese), 8 + 4);
        assert_eq!(known_context_window("openai/gpt-4o-2024-08-06"), Some(128_000));
        assert_eq!(known_context_window("gpt-4-0613"), Some(8_192));
    }
}
