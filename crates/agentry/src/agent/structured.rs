//! Structured output through the finish function `generate_response`.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::AgentError;
use crate::message::{Msg, ToolUseBlock};
use crate::model::ToolSchema;
use crate::tool::schema::{schema_errors, unusable_arguments};
use crate::tool::{ToolResponse, schema_for};

/// Name of the finish function the model calls with the structured output.
pub const FINISH_FUNCTION_NAME: &str = "generate_response";

pub(super) const SUCCESS_TEXT: &str = "Successfully generated response.";
pub(super) const TEXT_AFTER_STRUCTURED_HINT: &str =
    "<system-hint>Now generate a text response based on your current situation</system-hint>";
pub(super) const STRUCTURED_REQUIRED_HINT: &str = "<system-hint>Structured output is required, go on to finish \
     your task or call 'generate_response' to generate the required structured output.</system-hint>";

type Check = dyn Fn(&Value) -> Result<(), String> + Send + Sync;

/// The finish function of one structured reply.
pub(crate) struct StructuredSpec {
    pub(super) schema: ToolSchema,
    validator: jsonschema::Validator,
    deserializes: Box<Check>,
}

impl StructuredSpec {
    pub(super) fn new<T: JsonSchema + DeserializeOwned>() -> Result<Self, AgentError> {
        let parameters = schema_for::<T>();
        if parameters.get("type").and_then(Value::as_str) != Some("object") {
            return Err(AgentError::Config(
                "the structured output type must serialize as a JSON object (a struct or a map)".into(),
            ));
        }
        let validator = jsonschema::validator_for(&parameters)
            .map_err(|e| AgentError::Config(format!("the structured output schema is invalid: {e}")))?;
        Ok(StructuredSpec {
            schema: ToolSchema {
                name: FINISH_FUNCTION_NAME.to_owned(),
                description:
                    "Generate the final response to the user as structured data. Call this function \
                              when you have everything the response needs."
                        .to_owned(),
                parameters,
            },
            validator,
            deserializes: Box::new(|v| {
                serde_json::from_value::<T>(v.clone())
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }),
        })
    }

    /// Handles a call of the finish function: the result for the model, and the structured
    /// output when the arguments are valid.
    pub(super) fn handle(&self, call: &ToolUseBlock) -> (ToolResponse, Option<Map<String, Value>>) {
        let Value::Object(args) = &call.input else {
            let text = format!("Arguments Validation Error: {}", unusable_arguments(call));
            return (ToolResponse::error(text), None);
        };
        let mut errors = schema_errors(&self.validator, &call.input);
        if errors.is_empty()
            && let Err(e) = (self.deserializes)(&call.input)
        {
            errors.push(e);
        }
        if errors.is_empty() {
            (ToolResponse::text(SUCCESS_TEXT), Some(args.clone()))
        } else {
            let text = format!("Arguments Validation Error: {}", errors.join("; "));
            (ToolResponse::error(text), None)
        }
    }
}

/// The result of [`ReActAgent::reply_structured`](super::ReActAgent::reply_structured).
#[derive(Debug, Clone, PartialEq)]
pub struct Structured<T> {
    /// The reply message; its metadata holds the structured output as JSON.
    pub msg: Msg,
    /// The structured output.
    pub output: T,
}

impl<T: DeserializeOwned> Structured<T> {
    pub(super) fn from_reply(msg: Msg) -> Result<Self, AgentError> {
        if msg.metadata.is_empty() {
            return Err(AgentError::NoStructuredOutput { reply: Box::new(msg) });
        }
        match serde_json::from_value::<T>(Value::Object(msg.metadata.clone())) {
            Ok(output) => Ok(Structured { msg, output }),
            Err(_) => Err(AgentError::NoStructuredOutput { reply: Box::new(msg) }),
        }
    }
}
