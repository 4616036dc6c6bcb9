//! Reading a remote agent's card, and choosing the interface to talk to it through.

use serde_json::Value;

use super::A2aError;

/// What a remote agent's card says that the client uses.
#[derive(Debug, Clone)]
pub(crate) struct Card {
    pub name: String,
    pub description: String,
    /// The JSON-RPC endpoint of A2A 1.x.
    pub endpoint: String,
    pub skills: Vec<String>,
}

/// The card's address for `url`: `url` itself when it names a JSON file, else its
/// `/.well-known/agent-card.json`.
pub(crate) fn card_url(url: &str) -> String {
    match url.ends_with(".json") {
        true => url.to_owned(),
        false => format!("{}/.well-known/agent-card.json", url.trim_end_matches('/')),
    }
}

/// The parts of a card the client needs; an error when it offers no JSON-RPC interface of
/// A2A 1.x.
pub(crate) fn parse(card: &Value) -> Result<Card, A2aError> {
    let text = |key: &str| {
        card.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let interfaces = card
        .get("supportedInterfaces")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let endpoint = interfaces
        .iter()
        .filter(|i| i.get("protocolBinding").and_then(Value::as_str) == Some("JSONRPC"))
        .find(|i| {
            i.get("protocolVersion")
                .and_then(Value::as_str)
                .is_none_or(|v| v.split('.').next() == Some("1"))
        })
        .and_then(|i| i.get("url").and_then(Value::as_str))
        .ok_or_else(|| A2aError::Card("the agent card offers no JSON-RPC interface of A2A 1.x".into()))?
        .to_owned();
    let skills = card
        .get("skills")
        .and_then(Value::as_array)
        .map(|skills| {
            skills
                .iter()
                .filter_map(|s| s.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok(Card {
        name: text("name"),
        description: text("description"),
        endpoint,
        skills,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_json_rpc_interface_of_version_1_is_chosen() {
        let card = json!({"name": "a", "description": "d", "supportedInterfaces": [
            {"url": "http://h/v03", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": "http://h/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {"url": "http://h/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ]});
        assert_eq!(
            parse(&card).map(|c| c.endpoint).ok().as_deref(),
            Some("http://h/a2a")
        );
        let old = json!({"supportedInterfaces": [{"url": "u", "protocolBinding": "JSONRPC", "protocolVersion": "0.3.0"}]});
        assert!(parse(&old).is_err());
        assert_eq!(card_url("http://h:1/"), "http://h:1/.well-known/agent-card.json");
        assert_eq!(card_url("http://h/card.json"), "http://h/card.json");
    }
}
