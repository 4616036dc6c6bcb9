//! The terminal states of the calls of earlier replies, for `cancel_call` (C3, C4), bounded.

use std::collections::{HashMap, VecDeque};

use crate::CallId;
use crate::tool::ToolCallState;

/// How many finished calls an agent remembers by default: enough for any conversation a person
/// has, small enough (a few hundred KiB) for a server holding many agents.
pub const DEFAULT_FINISHED_CALLS: usize = 4096;

/// The last `capacity` finished calls, oldest forgotten first. A forgotten call's id answers
/// `NotFound`, as an unknown one does.
#[derive(Debug)]
pub(crate) struct FinishedCalls {
    states: HashMap<CallId, ToolCallState>,
    order: VecDeque<CallId>,
    capacity: usize,
}

impl FinishedCalls {
    pub(crate) fn new(capacity: usize) -> Self {
        FinishedCalls {
            states: HashMap::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    pub(crate) fn get(&self, call_id: &str) -> Option<&ToolCallState> {
        self.states.get(call_id)
    }

    pub(crate) fn contains(&self, call_id: &str) -> bool {
        self.states.contains_key(call_id)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.states.len()
    }

    pub(crate) fn extend(&mut self, calls: impl IntoIterator<Item = (CallId, ToolCallState)>) {
        for (call_id, state) in calls {
            if self.capacity == 0 {
                return;
            }
            if self.states.insert(call_id.clone(), state).is_none() {
                self.order.push_back(call_id);
            }
            while self.order.len() > self.capacity {
                if let Some(oldest) = self.order.pop_front() {
                    self.states.remove(&oldest);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_calls_up_to_its_capacity() {
        let mut calls = FinishedCalls::new(3);
        calls.extend((0..10).map(|i| (CallId::new(format!("c{i}")), ToolCallState::Completed)));
        assert_eq!(calls.len(), 3);
        assert!(!calls.contains("c6"));
        assert!(calls.contains("c7") && calls.contains("c9"));
        calls.extend([("c8".into(), ToolCallState::Failed)]);
        assert_eq!(calls.len(), 3, "an id seen again is updated, not added");
        assert_eq!(calls.get("c8"), Some(&ToolCallState::Failed));
    }
}
