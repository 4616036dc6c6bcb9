//! Token accounting.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Token accounting of one call.
///
/// `input_tokens` counts every prompt token, including those read from or written to the
/// provider's prompt cache (which `cache_read_tokens` and `cache_write_tokens` then detail);
/// `output_tokens` counts every generated token, including the reasoning that
/// `reasoning_tokens` details, when the provider says.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatUsage {
    /// Prompt tokens, cached ones included.
    pub input_tokens: u64,
    /// Generated tokens, reasoning included.
    pub output_tokens: u64,
    /// Prompt tokens read from the provider's cache (billed at a reduced price).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's cache (billed at a premium).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// Generated tokens spent on reasoning, when the provider reports them apart.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
    /// Wall time of the call, from sending the request to the last byte.
    #[serde(rename = "time_ms", with = "super::duration_ms")]
    pub time: Duration,
}

impl ChatUsage {
    /// Adds another call's counts and time to these.
    pub fn add(&mut self, other: &ChatUsage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
        self.time += other.time;
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
