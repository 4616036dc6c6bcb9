//! Values as a store writes them: JSON documents and the bare serde names of unit enums.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::StoreError;

pub(crate) fn json<T: Serialize>(what: &'static str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::encode(what, e))
}

pub(crate) fn from_json<T: DeserializeOwned>(what: &'static str, text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::decode(what, e))
}

/// An enum of unit variants as its bare serde name (`"session_grant"`).
pub(crate) fn name_of<T: Serialize>(what: &'static str, value: &T) -> Result<String, StoreError> {
    match serde_json::to_value(value).map_err(|e| StoreError::encode(what, e))? {
        serde_json::Value::String(s) => Ok(s),
        other => Ok(other.to_string()),
    }
}

/// An enum of unit variants from its bare serde name.
pub(crate) fn from_name<T: DeserializeOwned>(what: &'static str, name: String) -> Result<T, StoreError> {
    serde_json::from_value(serde_json::Value::String(name)).map_err(|e| StoreError::decode(what, e))
}
