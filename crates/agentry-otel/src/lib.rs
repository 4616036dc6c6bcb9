//! OpenTelemetry export of agentry's GenAI trace spans.
//!
//! An agent makes spans that follow the OpenTelemetry GenAI semantic conventions
//! (`invoke_agent {agent}`, `chat {model}`, `execute_tool {tool}`; see `agentry::agent::trace`
//! for their attributes and events) with the OpenTelemetry tracer it is given. This crate builds
//! the pipeline that sends them over OTLP/HTTP (protobuf) with a batch processor, and gives
//! agentry its tracer.
//!
//! [`init_from_env`] does nothing unless `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and `OTEL_SDK_DISABLED` is not `true`): then it
//! makes the pipeline's tracer the one of every agent built afterwards
//! (`agentry::agent::set_default_tracer`) and returns a guard that exports the last spans when
//! dropped.
//!
//! ```no_run
//! let guard = agentry_otel::init_from_env().unwrap_or_else(|e| {
//!     eprintln!("warning: traces are not exported: {e}");
//!     None
//! });
//! // ... build and run agents ...
//! drop(guard); // exports what is left
//! ```
//!
//! The other constructors ([`init_with_endpoint`], [`init_with_exporter`], [`init_noop`]) only
//! build the pipeline: give its [`OtelGuard::tracer`] to one agent
//! (`ReActAgentBuilder::tracer`), or [`OtelGuard::install`] it for all.
//!
//! The variables read, besides the two endpoints: `OTEL_SERVICE_NAME` (default `agentry`),
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS` / `..._TRACES_HEADERS`,
//! `..._TIMEOUT`, `..._COMPRESSION`, `OTEL_BSP_*` (batching) and `OTEL_EXPORTER_OTLP_PROTOCOL`,
//! which must be `http/protobuf` when set.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracer, SdkTracerProvider, SpanData, SpanExporter};

pub use agentry::agent::TRACE_CONTENT_ENV;

#[cfg(feature = "receiver")]
pub mod receiver;

/// The instrumentation scope of agentry's spans.
pub const SCOPE: &str = "agentry";

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

/// Keeps the span pipeline; dropping it (or [`OtelGuard::shutdown`]) exports the spans still
/// batched and stops the export thread.
#[derive(Debug)]
pub struct OtelGuard {
    provider: Option<SdkTracerProvider>,
}

impl OtelGuard {
    /// A tracer of this pipeline, for `ReActAgentBuilder::tracer` (`None` once shut down).
    pub fn tracer(&self) -> Option<SdkTracer> {
        self.provider.as_ref().map(|provider| provider.tracer(SCOPE))
    }

    /// Makes this pipeline's tracer the one of every agent built from now on
    /// (`agentry::agent::set_default_tracer`).
    pub fn install(&self) {
        if let Some(tracer) = self.tracer() {
            agentry::agent::set_default_tracer(tracer);
        }
    }

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

/// When [`enabled_by_env`], the pipeline the variables describe, installed as the tracer of
/// every agent built afterwards; else `None`: nothing is set up and no connection is ever made.
pub fn init_from_env() -> Result<Option<OtelGuard>, OtelError> {
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
    let guard = init_with_exporter(exporter);
    guard.install();
    Ok(Some(guard))
}

/// The pipeline sending to `traces_url` (the whole URL, such as
/// `http://127.0.0.1:4318/v1/traces`) whatever the environment says; not installed.
pub fn init_with_endpoint(traces_url: &str) -> Result<OtelGuard, OtelError> {
    install_crypto_provider();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url)
        .build()
        .map_err(|e| OtelError::Exporter(e.to_string()))?;
    Ok(init_with_exporter(exporter))
}

/// The pipeline exporting through `exporter` with a batch processor; not installed.
pub fn init_with_exporter<E>(exporter: E) -> OtelGuard
where
    E: SpanExporter + 'static,
{
    let provider = SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(exporter).build())
        .with_resource(resource())
        .build();
    OtelGuard {
        provider: Some(provider),
    }
}

/// The pipeline with an exporter that drops every span: what tracing costs without the
/// network, for benchmarks; not installed.
pub fn init_noop() -> OtelGuard {
    init_with_exporter(NoopExporter)
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
