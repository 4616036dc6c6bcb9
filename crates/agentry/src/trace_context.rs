//! The OpenTelemetry context carried into spawned tasks: a tool's task and a reply's task
//! trace as children of the span that spawned them, as without the spawn. Below both the agent
//! and the tools, so that neither reaches up into the other for it.

use futures::future::Either;
use opentelemetry::Context;
use opentelemetry::trace::{FutureExt as _, TraceContextExt as _};

/// `task` carrying the current OpenTelemetry context when it has a span, for a future about to
/// be spawned: spans made in the task are then children of that span, as without the spawn.
pub(crate) fn in_current_context<F: std::future::Future>(
    task: F,
) -> Either<opentelemetry::context::WithContext<F>, F> {
    let cx = Context::current();
    if cx.has_active_span() {
        Either::Left(task.with_context(cx))
    } else {
        Either::Right(task)
    }
}
