//! OpenTelemetry export of agentry's GenAI trace spans.
//!
//! The agent loop opens `tracing` spans that follow the OpenTelemetry GenAI semantic conventions
//! (`invoke_agent {agent}`, `chat {model}`, `execute_tool {tool}`; see
//! `agentry::agent::TRACE_TARGET` for their attributes and events). This crate turns them into
//! OpenTelemetry spans with `tracing-opentelemetry` and sends them over OTLP/HTTP (protobuf)
//! with a batch processor.
//!
//! [`init_from_env`] does nothing unless `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and `OTEL_SDK_DISABLED` is not `true`): then it
//! returns a layer to add to a `tracing_subscriber` registry and a guard that flushes the spans
//! when dropped. The layer carries its own filter (target `agentry::gen_ai`, level info), so
//! the log filter of the other layers changes nothing of what is exported.
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt;
//! use tracing_subscriber::util::SubscriberInitExt;
//!
//! let otel = agentry_otel::init_from_env().unwrap_or_else(|e| {
//!     eprintln!("warning: traces are not exported: {e}");
//!     None
//! });
//! let (layer, guard) = otel.unzip();
//! tracing_subscriber::registry().with(layer).init();
//! // ... run agents ...
//! drop(guard); // exports what is left
//! ```
//!
//! The variables read, besides the two endpoints: `OTEL_SERVICE_NAME` (default `agentry`),
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS` / `..._TRACES_HEADERS`,
//! `..._TIMEOUT`, `..._COMPRESSION`, `OTEL_BSP_*` (batching) and `OTEL_EXPORTER_OTLP_PROTOCOL`,
//! which must be `http/protobuf` when set.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Array, KeyValue, StringValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SdkTracer, SdkTracerProvider, SpanData, SpanExporter, SpanProcessor,
};
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{Filtered, LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;

pub use agentry::agent::{TRACE_CONTENT_ENV, TRACE_TARGET};

#[cfg(feature = "receiver")]
pub mod receiver;

/// The endpoint for all signals; `/v1/traces` is appended.
pub const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The traces endpoint, used as it is.
pub const TRACES_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// The service name of the exported spans' resource (default `agentry`).
pub const SERVICE_NAME_ENV: &str = "OTEL_SERVICE_NAME";
/// The service name when `OTEL_SERVICE_NAME` is not set.
pub const DEFAULT_SERVICE_NAME: &str = "agentry";

/// How long [`OtelGuard`] waits for the last export when it shuts down.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Why traces cannot be exported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// The OTLP exporter could not be built (an invalid endpoint, for one).
    #[error("cannot set up the OTLP trace exporter: {0}")]
    Exporter(String),
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` asks for a protocol other than `http/protobuf`.
    #[error("{var}={value} is not supported: agentry exports traces over http/protobuf only")]
    Protocol {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// Flushing or shutting down the span pipeline failed.
    #[error("exporting the last spans failed: {0}")]
    Flush(String),
}

/// The layer that exports the GenAI spans: `tracing-opentelemetry`, filtered to
/// [`TRACE_TARGET`].
pub type OtelLayer<S> = Filtered<OpenTelemetryLayer<S, SdkTracer>, Targets, S>;

/// Keeps the span pipeline; dropping it (or [`OtelGuard::shutdown`]) exports the spans still
/// batched and stops the export thread.
#[derive(Debug)]
pub struct OtelGuard {
    provider: Option<SdkTracerProvider>,
}

impl OtelGuard {
    /// Exports every ended span now, waiting for the export.
    pub fn flush(&self) -> Result<(), OtelError> {
        match &self.provider {
            Some(provider) => provider
                .force_flush()
                .map_err(|e| OtelError::Flush(e.to_string())),
            None => Ok(()),
        }
    }

    /// Exports every ended span and stops the pipeline.
    pub fn shutdown(mut self) -> Result<(), OtelError> {
        match self.provider.take() {
            Some(provider) => provider
                .shutdown_with_timeout(SHUTDOWN_TIMEOUT)
                .map_err(|e| OtelError::Flush(e.to_string())),
            None => Ok(()),
        }
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT)
        {
            tracing::warn!(error = %e, "exporting the last trace spans failed");
        }
    }
}

/// Whether the environment asks for traces: an OTLP endpoint is set and the SDK is not
/// disabled.
pub fn enabled_by_env() -> bool {
    let set = |var: &str| std::env::var(var).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
    !disabled && (set(ENDPOINT_ENV) || set(TRACES_ENDPOINT_ENV))
}

/// The exporting layer and its guard when [`enabled_by_env`], else `None`: nothing is set up
/// and no connection is ever made.
pub fn init_from_env<S>() -> Result<Option<(OtelLayer<S>, OtelGuard)>, OtelError>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    if !enabled_by_env() {
        return Ok(None);
    }
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Ok(value) = std::env::var(var) {
            let value = value.trim();
            if value.is_empty() {
                continue;
            }
            if value != "http/protobuf" {
                return Err(OtelError::Protocol {
                    var,
                    value: value.to_owned(),
                });
            }
            break;
        }
    }
    install_crypto_provider();
    // The endpoint, headers, timeout and compression come from the OTEL_EXPORTER_OTLP_* variables.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|e| OtelError::Exporter(e.to_string()))?;
    Ok(Some(init_with_exporter(exporter)))
}

/// The exporting layer and its guard, sending to `traces_url` (the whole URL, such as
/// `http://127.0.0.1:4318/v1/traces`) whatever the environment says.
pub fn init_with_endpoint<S>(traces_url: &str) -> Result<(OtelLayer<S>, OtelGuard), OtelError>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    install_crypto_provider();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url)
        .build()
        .map_err(|e| OtelError::Exporter(e.to_string()))?;
    Ok(init_with_exporter(exporter))
}

/// The layer and guard exporting through `exporter` with a batch processor.
pub fn init_with_exporter<S, E>(exporter: E) -> (OtelLayer<S>, OtelGuard)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    E: SpanExporter + 'static,
{
    let processor = GenAiProcessor {
        next: BatchSpanProcessor::builder(exporter).build(),
    };
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource())
        .build();
    let tracer = provider.tracer("agentry");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        // The conventions' attributes only: no source locations, threads, levels or timings.
        .with_location(false)
        .with_threads(false)
        .with_level(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        // Parents come from the `tracing` context (which `Instrument` carries across tasks);
        // nothing here reads the OpenTelemetry context, so entering a span needs no work.
        .with_context_activation(false)
        .with_filter(filter());
    (
        layer,
        OtelGuard {
            provider: Some(provider),
        },
    )
}

/// The pipeline with an exporter that drops every span: what tracing costs without the
/// network, for benchmarks.
pub fn init_noop<S>() -> (OtelLayer<S>, OtelGuard)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    init_with_exporter(NoopExporter)
}

/// The spans and events the layer exports: target [`TRACE_TARGET`] at level info and above.
pub fn filter() -> Targets {
    Targets::new().with_target(TRACE_TARGET, LevelFilter::INFO)
}

/// reqwest is built without a TLS crypto provider (as in `agentry`): the process-wide one is
/// ring, installed once; another crate's earlier choice stands.
fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn resource() -> Resource {
    let builder = Resource::builder();
    let named = std::env::var(SERVICE_NAME_ENV).is_ok_and(|v| !v.trim().is_empty());
    if named {
        builder.build()
    } else {
        builder.with_service_name(DEFAULT_SERVICE_NAME).build()
    }
}

/// An exporter that drops every batch.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopExporter;

impl SpanExporter for NoopExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        drop(batch);
        Ok(())
    }
}

/// Gives the attributes `tracing` cannot type their conventions' type before the spans go to
/// the batch processor: `gen_ai.response.finish_reasons`, recorded as a JSON array in a string,
/// becomes a string array.
#[derive(Debug)]
struct GenAiProcessor<P> {
    next: P,
}

impl<P: SpanProcessor> SpanProcessor for GenAiProcessor<P> {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.next.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        for attribute in span.attributes.iter_mut() {
            retype(attribute);
        }
        self.next.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.next.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.next.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.next.set_resource(resource);
    }
}

/// The attributes of string-array type that `agentry` records as JSON arrays.
const STRING_ARRAYS: &[&str] = &["gen_ai.response.finish_reasons"];

fn retype(attribute: &mut KeyValue) {
    if !STRING_ARRAYS.contains(&attribute.key.as_str()) {
        return;
    }
    let Value::String(text) = &attribute.value else {
        return;
    };
    if let Ok(items) = serde_json::from_str::<Vec<String>>(text.as_str()) {
        attribute.value = Value::Array(Array::String(items.into_iter().map(StringValue::from).collect()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_reasons_become_a_string_array() {
        let mut attribute = KeyValue::new("gen_ai.response.finish_reasons", r#"["stop"]"#);
        retype(&mut attribute);
        assert_eq!(
            attribute.value,
            Value::Array(Array::String(vec![StringValue::from("stop")]))
        );
        let mut other = KeyValue::new("gen_ai.tool.call.result", r#"["stop"]"#);
        retype(&mut other);
        assert_eq!(other.value, Value::from(r#"["stop"]"#));
    }
}
