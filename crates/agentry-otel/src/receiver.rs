//! An OTLP/HTTP trace receiver for tests: `POST /v1/traces` with a protobuf
//! `ExportTraceServiceRequest`, kept as [`ReceivedSpan`]s (feature `receiver`).
//!
//! It listens on `127.0.0.1`, answers every export with success, and lets a test wait for the
//! spans it expects with a deadline, without sleeping.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use tokio::sync::watch;

/// An attribute value as received.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A float.
    Double(f64),
    /// A boolean.
    Bool(bool),
    /// An array.
    Array(Vec<AttrValue>),
    /// Anything else (bytes, maps, nothing).
    Other,
}

impl AttrValue {
    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            AttrValue::Int(n) => Some(*n),
            _ => None,
        }
    }

    fn from_any(value: Option<&AnyValue>) -> AttrValue {
        match value.and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => AttrValue::Str(s.clone()),
            Some(any_value::Value::IntValue(n)) => AttrValue::Int(*n),
            Some(any_value::Value::DoubleValue(x)) => AttrValue::Double(*x),
            Some(any_value::Value::BoolValue(b)) => AttrValue::Bool(*b),
            Some(any_value::Value::ArrayValue(items)) => AttrValue::Array(
                items
                    .values
                    .iter()
                    .map(|v| AttrValue::from_any(Some(v)))
                    .collect(),
            ),
            _ => AttrValue::Other,
        }
    }
}

fn attributes(list: &[KeyValue]) -> BTreeMap<String, AttrValue> {
    list.iter()
        .map(|kv| (kv.key.clone(), AttrValue::from_any(kv.value.as_ref())))
        .collect()
}

/// A span event as received.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedEvent {
    /// The event name.
    pub name: String,
    /// Its attributes.
    pub attributes: BTreeMap<String, AttrValue>,
}

/// A span as received.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// The span name.
    pub name: String,
    /// The trace id.
    pub trace_id: Vec<u8>,
    /// The span id.
    pub span_id: Vec<u8>,
    /// The parent's span id (empty for a root).
    pub parent_span_id: Vec<u8>,
    /// OTLP span kind (1 internal, 2 server, 3 client, ...).
    pub kind: i32,
    /// Its attributes.
    pub attributes: BTreeMap<String, AttrValue>,
    /// Its events, in order.
    pub events: Vec<ReceivedEvent>,
    /// OTLP status code (0 unset, 1 ok, 2 error).
    pub status_code: i32,
    /// The status message.
    pub status_message: String,
    /// `service.name` of the resource that sent it.
    pub service_name: Option<String>,
}

impl ReceivedSpan {
    /// The attribute `key`.
    pub fn attr(&self, key: &str) -> Option<&AttrValue> {
        self.attributes.get(key)
    }

    /// The string attribute `key`.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.attr(key).and_then(AttrValue::as_str)
    }

    /// The integer attribute `key`.
    pub fn int(&self, key: &str) -> Option<i64> {
        self.attr(key).and_then(AttrValue::as_int)
    }

    /// The first event named `name`.
    pub fn event(&self, name: &str) -> Option<&ReceivedEvent> {
        self.events.iter().find(|e| e.name == name)
    }
}

struct Shared {
    spans: watch::Sender<Vec<ReceivedSpan>>,
    requests: AtomicUsize,
}

/// The receiver; it stops when dropped.
pub struct OtlpReceiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

/// Why a wait ended without the expected spans.
#[derive(Debug, thiserror::Error)]
#[error("the expected spans did not arrive within {waited:?}; received: {received:#?}")]
pub struct NotReceived {
    /// How long it waited.
    pub waited: Duration,
    /// What arrived meanwhile.
    pub received: Vec<ReceivedSpan>,
}

impl OtlpReceiver {
    /// Listens on a free port of `127.0.0.1`. Must be called in a Tokio runtime.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            spans: watch::channel(Vec::new()).0,
            requests: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/v1/traces", post(export))
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "the OTLP test receiver stopped");
            }
        });
        Ok(OtlpReceiver { addr, shared, task })
    }

    /// The base URL, for `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` is appended by exporters).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The traces URL, for `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`.
    pub fn traces_url(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    /// The spans received so far, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.shared.spans.borrow().clone()
    }

    /// How many export requests arrived (any body).
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Waits until the spans received satisfy `done`, at most `deadline`; returns them.
    pub async fn wait_for(
        &self,
        deadline: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Result<Vec<ReceivedSpan>, NotReceived> {
        let mut rx = self.shared.spans.subscribe();
        match tokio::time::timeout(deadline, rx.wait_for(|spans| done(spans))).await {
            Ok(Ok(spans)) => Ok(spans.clone()),
            _ => Err(NotReceived {
                waited: deadline,
                received: self.spans(),
            }),
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn export(State(shared): State<Arc<Shared>>, body: Bytes) -> (StatusCode, Vec<u8>) {
    shared.requests.fetch_add(1, Ordering::SeqCst);
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(request) => request,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string().into_bytes()),
    };
    let mut received = Vec::new();
    for resource_spans in &request.resource_spans {
        let service_name = resource_spans.resource.as_ref().and_then(|r| {
            attributes(&r.attributes)
                .get("service.name")
                .and_then(AttrValue::as_str)
                .map(str::to_owned)
        });
        for scope_spans in &resource_spans.scope_spans {
            for span in &scope_spans.spans {
                let status = span.status.as_ref();
                received.push(ReceivedSpan {
                    name: span.name.clone(),
                    trace_id: span.trace_id.clone(),
                    span_id: span.span_id.clone(),
                    parent_span_id: span.parent_span_id.clone(),
                    kind: span.kind,
                    attributes: attributes(&span.attributes),
                    events: span
                        .events
                        .iter()
                        .map(|e| ReceivedEvent {
                            name: e.name.clone(),
                            attributes: attributes(&e.attributes),
                        })
                        .collect(),
                    status_code: status.map_or(0, |s| s.code),
                    status_message: status.map(|s| s.message.clone()).unwrap_or_default(),
                    service_name: service_name.clone(),
                });
            }
        }
    }
    shared.spans.send_modify(|spans| spans.extend(received));
    let response = ExportTraceServiceResponse {
        partial_success: None,
    };
    (StatusCode::OK, response.encode_to_vec())
}
