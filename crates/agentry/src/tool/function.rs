//! Turning plain functions into tools.

use std::future::Future;
use std::sync::Arc;

use futures::stream::{self, Stream, StreamExt};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{Tool, ToolContext, ToolError, ToolResponse, ToolStream, schema_for};
use crate::message::ContentBlock;

/// What a non-streaming tool function may return.
///
/// Strings, numbers, booleans, `()`, JSON values, content blocks and [`ToolResponse`]s are
/// results; `Result<T, E>` with `E: Display` makes `Err` an error result.
pub trait IntoToolOutput {
    /// Converts the return value into the final chunk.
    fn into_tool_output(self) -> Result<ToolResponse, ToolError>;
}

impl IntoToolOutput for ToolResponse {
    fn into_tool_output(self) -> Result<ToolResponse, ToolError> {
        Ok(self.last(true))
    }
}

impl IntoToolOutput for String {
    fn into_tool_output(self) -> Result<ToolResponse, ToolError> {
        Ok(ToolResponse::text(self))
    }
}

impl IntoToolOutput for &str {
    fn into_tool_output(self) -> Result<ToolResponse, ToolError> {
        Ok(ToolResponse::text(self))
    }
}

impl IntoToolOutput for () {
    fn into_tool_output(self) -> Result<ToolResponse, ToolError> {
        Ok(ToolResponse::text("Done."))
    }
}

impl IntoToolOutput for Value {
    fn into_tool_output(self) -> Result<ToolResponse, ToolError> {
        Ok(match self {
            Value::String(s) => ToolResponse::text(s),
            other => ToolResponse::text(other.to_string()),
        })
    }
}

impl IntoToolOutput for Vec<ContentBlock> {
    fn into_tool_output(self) -> Result<ToolResponse, ToolError> {
        Ok(ToolResponse::new(self))
    }
}

macro_rules! display_output {
    ($($t:ty),*) => {$(
        impl IntoToolOutput for $t {
            fn into_tool_output(self) -> Result<ToolResponse, ToolError> {
                Ok(ToolResponse::text(self.to_string()))
            }
        }
    )*};
}
display_output!(
    i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize, f32, f64, bool, char
);

impl<T: IntoToolOutput, E: std::fmt::Display> IntoToolOutput for Result<T, E> {
    fn into_tool_output(self) -> Result<ToolResponse, ToolError> {
        match self {
            Ok(v) => v.into_tool_output(),
            Err(e) => Err(ToolError::Failed(e.to_string())),
        }
    }
}

/// What a streaming tool function may yield: a chunk, or a `Result` of one.
pub trait IntoToolChunk {
    /// Converts the item into a chunk.
    fn into_tool_chunk(self) -> Result<ToolResponse, ToolError>;
}

impl IntoToolChunk for ToolResponse {
    fn into_tool_chunk(self) -> Result<ToolResponse, ToolError> {
        Ok(self)
    }
}

impl<E: std::fmt::Display> IntoToolChunk for Result<ToolResponse, E> {
    fn into_tool_chunk(self) -> Result<ToolResponse, ToolError> {
        self.map_err(|e| ToolError::Failed(e.to_string()))
    }
}

/// A one-chunk stream from a future's output.
pub fn once<F>(future: F) -> ToolStream
where
    F: Future + Send + 'static,
    F::Output: IntoToolOutput,
{
    stream::once(async move { future.await.into_tool_output() }).boxed()
}

/// A tool stream from a stream of chunks.
pub fn streaming<S>(chunks: S) -> ToolStream
where
    S: Stream + Send + 'static,
    S::Item: IntoToolChunk,
{
    chunks.map(IntoToolChunk::into_tool_chunk).boxed()
}

/// Deserializes validated arguments into the tool's parameter type.
pub fn parse_args<T: DeserializeOwned>(args: Map<String, Value>) -> Result<T, ToolError> {
    serde_json::from_value(Value::Object(args)).map_err(|e| ToolError::InvalidArguments(e.to_string()))
}

type Handler = dyn Fn(Map<String, Value>, ToolContext) -> ToolStream + Send + Sync;

/// A tool made of a name, a description, a schema and a closure.
///
/// ```
/// use agentry::tool::{FunctionTool, Toolkit};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Args {
///     /// Text to shout.
///     text: String,
/// }
///
/// let shout = FunctionTool::typed("shout", "Upper-case a text.", |args: Args, _ctx| async move {
///     args.text.to_uppercase()
/// });
/// Toolkit::new().register(shout).unwrap();
/// ```
pub struct FunctionTool {
    name: String,
    description: String,
    parameters: Value,
    handler: Box<Handler>,
}

impl FunctionTool {
    /// A tool from a raw JSON schema and a closure over the raw arguments.
    pub fn new<F>(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        handler: F,
    ) -> Self
    where
        F: Fn(Map<String, Value>, ToolContext) -> ToolStream + Send + Sync + 'static,
    {
        FunctionTool {
            name: name.into(),
            description: description.into(),
            parameters,
            handler: Box::new(handler),
        }
    }

    /// A tool whose arguments are the type `A` (schema derived with schemars) and whose body
    /// is an async closure returning anything [`IntoToolOutput`].
    pub fn typed<A, F, Fut>(name: impl Into<String>, description: impl Into<String>, body: F) -> Self
    where
        A: DeserializeOwned + schemars::JsonSchema + Send + 'static,
        F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: IntoToolOutput,
    {
        FunctionTool::new(
            name,
            description,
            schema_for::<A>(),
            move |args, ctx| match parse_args::<A>(args) {
                Ok(args) => once(body(args, ctx)),
                Err(e) => stream::once(async move { Err(e) }).boxed(),
            },
        )
    }
}

impl Tool for FunctionTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn call(self: Arc<Self>, args: Map<String, Value>, ctx: ToolContext) -> ToolStream {
        (self.handler)(args, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_convert() {
        assert_eq!(42i64.into_tool_output().unwrap().text_content(), "42");
        assert_eq!(().into_tool_output().unwrap().text_content(), "Done.");
        let json = serde_json::json!({"a": 1}).into_tool_output().unwrap();
        assert_eq!(json.text_content(), r#"{"a":1}"#);
        let err = Err::<String, _>("boom").into_tool_output().unwrap_err();
        assert_eq!(err, ToolError::Failed("boom".into()));
        let partial = ToolResponse::partial("x").into_tool_output().unwrap();
        assert!(partial.is_last, "a returned response is the final one");
    }
}
