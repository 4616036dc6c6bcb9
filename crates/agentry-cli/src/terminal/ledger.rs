//! Token use and cost as the terminal prints them (`--verbose`, `/usage`, `sessions show`).

/// One reply's tokens and cost, as `--verbose` and `/usage` print them.
pub(crate) fn ledger_line(usage: &agentry::model::ChatUsage, cost: Option<f64>) -> String {
    let mut line = format!("usage: {} tokens in", usage.input_tokens);
    if usage.cache_read_tokens + usage.cache_write_tokens > 0 {
        line.push_str(&format!(
            " ({} read from the cache, {} written to it)",
            usage.cache_read_tokens, usage.cache_write_tokens
        ));
    }
    line.push_str(&format!(", {} out", usage.output_tokens));
    if usage.reasoning_tokens > 0 {
        line.push_str(&format!(" ({} reasoning)", usage.reasoning_tokens));
    }
    match cost {
        Some(cost) => line.push_str(&format!("; cost ${cost:.4}")),
        None => line.push_str("; cost unknown (no price for this model in the config's \"prices\")"),
    }
    line
}

/// Cache, reasoning and cost figures of a ledger, when there are any.
pub(crate) fn ledger_detail(u: &agentry_store::UsageTotals) -> String {
    let mut out = String::new();
    if u.cache_read_tokens + u.cache_write_tokens > 0 {
        out.push_str(&format!(
            " (cache: {} read, {} written)",
            u.cache_read_tokens, u.cache_write_tokens
        ));
    }
    if u.reasoning_tokens > 0 {
        out.push_str(&format!(", {} reasoning", u.reasoning_tokens));
    }
    if let Some(cost) = u.cost_usd {
        out.push_str(&format!(", cost ${cost:.4}"));
    }
    out
}
