//! The tokens and cost of the running reply, against its budget.

use std::sync::{Mutex, MutexGuard};

use crate::model::ChatUsage;
use crate::usage::{BudgetExceeded, Price, ReplyBudget};

/// What one reply has used: its model calls and what its tools reported.
#[derive(Default)]
pub(crate) struct Meter {
    state: Mutex<MeterState>,
}

#[derive(Default)]
struct MeterState {
    usage: ChatUsage,
    budget: ReplyBudget,
    price: Option<Price>,
    exceeded: Option<BudgetExceeded>,
}

impl Meter {
    // Mutations cannot panic halfway, so a poisoned lock holds consistent data.
    fn state(&self) -> MutexGuard<'_, MeterState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the budget and the model's price for this reply.
    pub(crate) fn configure(&self, budget: ReplyBudget, price: Option<Price>) {
        let mut state = self.state();
        state.budget = budget;
        state.price = price;
    }

    /// What the reply used so far.
    pub(crate) fn usage(&self) -> ChatUsage {
        self.state().usage.clone()
    }

    /// What the reply cost so far, when the model's price is known.
    pub(crate) fn cost(&self) -> Option<f64> {
        let state = self.state();
        state.price.map(|price| price.cost(&state.usage))
    }

    /// The limit the reply reached, if it did.
    pub(crate) fn exceeded(&self) -> Option<BudgetExceeded> {
        self.state().exceeded
    }

    /// Adds a model call's or a tool's usage; returns the limit this reaches, the first time
    /// one is reached.
    pub(crate) fn add(&self, usage: &ChatUsage) -> Option<BudgetExceeded> {
        let mut state = self.state();
        state.usage.add(usage);
        state.check(0)
    }

    /// Whether the output streaming now (`tokens` estimated, not reported yet) reaches a limit;
    /// returns it the first time.
    pub(crate) fn check_streaming(&self, tokens: u64) -> Option<BudgetExceeded> {
        self.state().check(tokens)
    }

    /// Whether a limit is set at all (to skip the estimates when none is).
    pub(crate) fn is_limited(&self) -> bool {
        self.state().budget.is_limited()
    }
}

impl MeterState {
    fn check(&mut self, streaming: u64) -> Option<BudgetExceeded> {
        if self.exceeded.is_some() {
            return None;
        }
        let hit = self.budget.check(&self.usage, streaming, self.price.as_ref())?;
        self.exceeded = Some(hit);
        Some(hit)
    }
}
