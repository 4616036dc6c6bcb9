//! One key of a session's configuration (a JSON object) read and written on its own: how what
//! an agent keeps besides its messages (its tool groups, its plans) lives with the session.

use serde_json::{Map, Value};

use crate::{SessionMemory, StoreError};

/// The value under `key` in `memory`'s session configuration, if any.
pub(crate) async fn config_value(memory: &SessionMemory, key: &str) -> Result<Option<Value>, StoreError> {
    let id = &memory.session().id;
    let Some(info) = memory.store().session(id).await? else {
        return Err(StoreError::SessionNotFound(id.to_string()));
    };
    Ok(info.config.get(key).cloned())
}

/// Sets `key` of `memory`'s session configuration to `value` (nothing is written when it holds
/// that already). A configuration that is not an object is kept, under `agent`.
pub(crate) async fn set_config_value(
    memory: &SessionMemory,
    key: &str,
    value: Value,
) -> Result<(), StoreError> {
    let store = memory.store();
    let id = &memory.session().id;
    let mut config = match store.session(id).await? {
        Some(info) => info.config,
        None => return Err(StoreError::SessionNotFound(id.to_string())),
    };
    if config.get(key) == Some(&value) {
        return Ok(());
    }
    match &mut config {
        Value::Object(map) => {
            map.insert(key.to_owned(), value);
        }
        other => {
            let mut map = Map::new();
            map.insert("agent".to_owned(), other.take());
            map.insert(key.to_owned(), value);
            *other = Value::Object(map);
        }
    }
    store.set_config(memory.lease(), &config).await
}
