//! What an agent hands its tools besides their arguments: one value per type, shared by every
//! call of the agent (its plan notebook, its long-term memory, its knowledge bases).
//!
//! Tools registered once in a toolkit that several agents share (the server makes one agent per
//! session) find the calling agent's state here rather than holding it themselves.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

/// A map from a type to one shared value of it. Cloning it is cheap (one shared map).
///
/// ```
/// use agentry::tool::Extensions;
///
/// #[derive(Debug, PartialEq)]
/// struct UserName(String);
///
/// let mut extensions = Extensions::new();
/// extensions.insert(UserName("ada".into()));
/// assert_eq!(extensions.get::<UserName>(), Some(&UserName("ada".into())));
/// assert!(extensions.get::<u32>().is_none());
/// ```
#[derive(Clone, Default)]
pub struct Extensions {
    values: Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl Extensions {
    /// An empty map.
    pub fn new() -> Self {
        Extensions::default()
    }

    /// Keeps `value`, replacing the value of its type if there was one.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        Arc::make_mut(&mut self.values).insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T`, if one was inserted.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.values
            .get(&TypeId::of::<T>())
            .and_then(|value| value.downcast_ref::<T>())
    }

    /// Whether nothing was inserted.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extensions")
            .field("values", &self.values.len())
            .finish()
    }
}
