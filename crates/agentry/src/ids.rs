//! Identifier newtypes.
//!
//! A call id and a reply id are both strings on the wire, but one must never be passed where the
//! other is expected: [`AgentHandle::cancel_call`](crate::agent::AgentHandle::cancel_call) takes
//! a [`CallId`], and a [`ReplyId`] does not convert into one. Both serialize as a bare JSON
//! string (see `docs/protocol.md`).
//!
//! ```
//! use agentry::{CallId, ReplyId};
//!
//! let call = CallId::from("call_1");
//! assert_eq!(call, "call_1");
//! assert_eq!(serde_json::to_string(&call).unwrap(), "\"call_1\"");
//! let reply: ReplyId = serde_json::from_str("\"r-7\"").unwrap();
//! assert_eq!(reply.as_str(), "r-7");
//! ```
//!
//! A reply id is not a call id:
//!
//! ```compile_fail
//! fn cancel(handle: &agentry::agent::AgentHandle, reply: &agentry::ReplyId) {
//!     handle.cancel_call(reply);
//! }
//! ```

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps an id.
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Whether the id is the empty string (a streamed call whose id has not arrived).
            pub fn is_empty(&self) -> bool {
                self.0.is_empty()
            }

            /// The id as an owned `String`.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        // Reading an id as text is always fine; it is building one from the wrong kind of text
        // that the type prevents (there is no conversion between the id types).
        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(id)
            }
        }

        impl From<&String> for $name {
            fn from(id: &String) -> Self {
                Self(id.clone())
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(id.to_owned())
            }
        }

        impl From<&$name> for $name {
            fn from(id: &$name) -> Self {
                id.clone()
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }
    };
}

string_id! {
    /// The id of one tool call, unique for the life of a reply: the id the model gave, rewritten
    /// when the model reuses one (the assistant message, the result, the events and the wire all
    /// carry the rewritten id).
    CallId
}

string_id! {
    /// The id of one reply: one `reply` call, from the user's message to the final answer.
    ReplyId
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_bare_json_strings_and_compare_with_text() {
        let id = CallId::new("c1");
        assert_eq!(serde_json::to_value(&id).ok(), Some(serde_json::json!("c1")));
        assert_eq!(id, "c1");
        assert_eq!("c1", id);
        assert_eq!(id.to_string(), "c1");
        let back: Result<CallId, _> = serde_json::from_str("\"c1\"");
        assert_eq!(back.ok(), Some(id));
    }
}
