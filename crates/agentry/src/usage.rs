//! What a reply costs: prices per model, and the budgets that stop a reply.
//!
//! Prices are US dollars per million tokens, per model (a name, or a prefix ending in `*`).
//! Cached prompt tokens are billed at their own prices when given, else as plain input:
//!
//! ```
//! use agentry::model::ChatUsage;
//! use agentry::usage::{Price, PriceTable};
//!
//! let mut prices = PriceTable::new();
//! prices.insert("claude-sonnet-*", Price::new(3.0, 15.0).cache(0.30, 3.75));
//! let usage = ChatUsage { input_tokens: 1_000_000, output_tokens: 100_000, cache_read_tokens: 800_000, ..Default::default() };
//! let cost = prices.cost("claude-sonnet-4-5", &usage).unwrap();
//! assert!((cost - (0.2 * 3.0 + 0.8 * 0.30 + 0.1 * 15.0)).abs() < 1e-9);
//! assert_eq!(prices.cost("gpt-4o", &usage), None, "no price, no cost");
//! ```

use serde::{Deserialize, Serialize};

use crate::model::ChatUsage;

/// The price of one model's tokens, in US dollars per million.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// Prompt tokens.
    pub input: f64,
    /// Generated tokens (reasoning included).
    pub output: f64,
    /// Prompt tokens read from the cache (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    /// Prompt tokens written to the cache (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

impl Price {
    /// Input and output prices; cached tokens at the input price.
    pub fn new(input: f64, output: f64) -> Self {
        Price {
            input,
            output,
            cache_read: None,
            cache_write: None,
        }
    }

    /// Sets the prices of cache reads and cache writes.
    pub fn cache(mut self, read: f64, write: f64) -> Self {
        self.cache_read = Some(read);
        self.cache_write = Some(write);
        self
    }

    /// What `usage` costs at this price.
    pub fn cost(&self, usage: &ChatUsage) -> f64 {
        let cached = usage.cache_read_tokens + usage.cache_write_tokens;
        let plain = usage.input_tokens.saturating_sub(cached);
        let per = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        per(plain, self.input)
            + per(usage.cache_read_tokens, self.cache_read.unwrap_or(self.input))
            + per(usage.cache_write_tokens, self.cache_write.unwrap_or(self.input))
            + per(usage.output_tokens, self.output)
    }
}

/// Prices by model name: an exact name, or a prefix ending in `*` (the longest match wins).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PriceTable {
    prices: std::collections::BTreeMap<String, Price>,
}

impl PriceTable {
    /// No prices: no cost is known.
    pub fn new() -> Self {
        PriceTable::default()
    }

    /// Sets the price of a model name or `prefix*`.
    pub fn insert(&mut self, pattern: impl Into<String>, price: Price) {
        self.prices.insert(pattern.into(), price);
    }

    /// Whether no price is set.
    pub fn is_empty(&self) -> bool {
        self.prices.is_empty()
    }

    /// The price of `model`: its exact entry, else the longest `prefix*` it starts with.
    pub fn price(&self, model: &str) -> Option<&Price> {
        if let Some(price) = self.prices.get(model) {
            return Some(price);
        }
        self.prices
            .iter()
            .filter_map(|(pattern, price)| {
                let prefix = pattern.strip_suffix('*')?;
                model.starts_with(prefix).then_some((prefix.len(), price))
            })
            .max_by_key(|(len, _)| *len)
            .map(|(_, price)| price)
    }

    /// What `usage` of `model` costs, when its price is known.
    pub fn cost(&self, model: &str, usage: &ChatUsage) -> Option<f64> {
        self.price(model).map(|price| price.cost(usage))
    }
}

/// Limits on one reply. Reaching one stops the reply as a cancel whose reason is the budget:
/// running tools get their `on_cancel`, calls not started are closed, the model's last complete
/// text is kept, and the model reads a note saying why the reply stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplyBudget {
    /// Most tokens (prompt and generated, over all the reply's model calls and what its tools
    /// report) one reply may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Most US dollars one reply may cost (needs the model's price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<f64>,
}

impl ReplyBudget {
    /// No limit.
    pub fn unlimited() -> Self {
        ReplyBudget::default()
    }

    /// Whether any limit is set.
    pub fn is_limited(&self) -> bool {
        self.max_tokens.is_some() || self.max_cost.is_some()
    }
}

/// Which limit stopped a reply, and what had been spent then.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "limit", rename_all = "snake_case")]
#[non_exhaustive]
pub enum BudgetExceeded {
    /// The token limit.
    Tokens {
        /// The limit.
        max: u64,
        /// Tokens counted when it was reached (the stream's own output estimated from its
        /// text while it streamed).
        spent: u64,
    },
    /// The cost limit, in US dollars.
    Cost {
        /// The limit.
        max: f64,
        /// Cost counted when it was reached.
        spent: f64,
    },
}

impl std::fmt::Display for BudgetExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BudgetExceeded::Tokens { max, spent } => {
                write!(f, "the reply's budget of {max} tokens was reached ({spent} used)")
            }
            BudgetExceeded::Cost { max, spent } => {
                write!(
                    f,
                    "the reply's budget of ${max:.4} was reached (${spent:.4} spent)"
                )
            }
        }
    }
}

impl ReplyBudget {
    /// The limit `usage` (plus `streaming_tokens` not reported yet) reaches, if any.
    pub fn check(
        &self,
        usage: &ChatUsage,
        streaming_tokens: u64,
        price: Option<&Price>,
    ) -> Option<BudgetExceeded> {
        let spent = usage.input_tokens + usage.output_tokens + streaming_tokens;
        if let Some(max) = self.max_tokens
            && spent >= max
        {
            return Some(BudgetExceeded::Tokens { max, spent });
        }
        if let (Some(max), Some(price)) = (self.max_cost, price) {
            let mut with_stream = usage.clone();
            with_stream.output_tokens += streaming_tokens;
            let spent = price.cost(&with_stream);
            if spent >= max {
                return Some(BudgetExceeded::Cost { max, spent });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_wins_and_an_exact_name_beats_it() {
        let mut t = PriceTable::new();
        t.insert("gpt-*", Price::new(1.0, 1.0));
        t.insert("gpt-4o*", Price::new(2.0, 2.0));
        t.insert("gpt-4o-mini", Price::new(3.0, 3.0));
        assert_eq!(t.price("gpt-4o-2024").unwrap().input, 2.0);
        assert_eq!(t.price("gpt-4o-mini").unwrap().input, 3.0);
        assert_eq!(t.price("gpt-3.5").unwrap().input, 1.0);
        assert!(t.price("claude").is_none());
    }

    #[test]
    fn a_budget_counts_tokens_and_cost() {
        let usage = ChatUsage {
            input_tokens: 900,
            output_tokens: 50,
            ..ChatUsage::default()
        };
        let tokens = ReplyBudget {
            max_tokens: Some(1000),
            max_cost: None,
        };
        assert_eq!(tokens.check(&usage, 0, None), None);
        assert_eq!(
            tokens.check(&usage, 60, None),
            Some(BudgetExceeded::Tokens {
                max: 1000,
                spent: 1010
            })
        );
        let cost = ReplyBudget {
            max_tokens: None,
            max_cost: Some(0.01),
        };
        let price = Price::new(10.0, 10.0);
        assert_eq!(
            cost.check(&usage, 0, Some(&price)),
            None,
            "950 tokens at $10/M is $0.0095"
        );
        assert!(matches!(
            cost.check(&usage, 60, Some(&price)),
            Some(BudgetExceeded::Cost { .. })
        ));
        assert_eq!(cost.check(&usage, 50, None), None, "no price, no cost limit");
    }
}
