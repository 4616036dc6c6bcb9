//! An optional deadline for `select!`: approvals and tool timeouts both wait on one.

/// Sleeps until `deadline`, or forever without one (an optional timer for `select!`).
pub(super) async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
