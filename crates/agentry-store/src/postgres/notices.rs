//! Notices of appended events, across every process on the database: `append_events` sends
//! `NOTIFY agentry_events, '<session id>'` in its transaction (so a notice arrives only once its
//! events are committed and readable), and one connection per store `LISTEN`s and hands them
//! to its subscribers. The data always comes from the log, so a notice lost with a broken
//! connection costs a wake-up, not an event: after connecting again, a `Resync` has the
//! subscribers read their logs.

use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{broadcast, mpsc};
use tokio_postgres::AsyncMessage;

use super::Inner;
use crate::{EventNotice, SessionId};

/// The channel of the notices of appended events (the payload: the session id).
pub(super) const CHANNEL: &str = "agentry_events";
/// Of queued controls (the payload: the session id).
pub(super) const CONTROLS: &str = "agentry_controls";
/// Of answered controls (the payload: the control's id).
pub(super) const ANSWERS: &str = "agentry_answers";
/// Notices a slow subscriber may be behind before it is told to resync (a resync costs every
/// stream and every waiting control a read, so the buffer holds a busy node's burst).
const BUFFER: usize = 65_536;

pub(super) fn channel() -> broadcast::Sender<EventNotice> {
    broadcast::channel(BUFFER).0
}

/// A receiver of the store's notices; the first one starts the listening connection.
pub(super) fn subscribe(inner: &Arc<Inner>) -> broadcast::Receiver<EventNotice> {
    let receiver = inner.notices.subscribe();
    let mut listener = inner.listener.lock().unwrap_or_else(PoisonError::into_inner);
    if listener.is_none() && tokio::runtime::Handle::try_current().is_ok() {
        *listener = Some(tokio::spawn(listen(Arc::downgrade(inner))).abort_handle());
    }
    receiver
}

/// Listens until the store is dropped (which aborts it), connecting again after a failure.
async fn listen(store: Weak<Inner>) {
    loop {
        let Some((config, sender)) = store
            .upgrade()
            .map(|inner| (inner.config.clone(), inner.notices.clone()))
        else {
            return;
        };
        match config.connect(tokio_postgres::NoTls).await {
            Ok((client, mut connection)) => {
                let (received, mut payloads) = mpsc::unbounded_channel::<(String, String)>();
                let driver = tokio::spawn(async move {
                    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(message) = messages.next().await {
                        match message {
                            Ok(AsyncMessage::Notification(notice)) => {
                                let notice = (notice.channel().to_owned(), notice.payload().to_owned());
                                if received.send(notice).is_err() {
                                    return;
                                }
                            }
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "the connection listening for events broke");
                                return;
                            }
                        }
                    }
                });
                let listen = format!("LISTEN {CHANNEL}; LISTEN {CONTROLS}; LISTEN {ANSWERS}");
                match client.batch_execute(&listen).await {
                    Ok(()) => {
                        let _ = sender.send(EventNotice::Resync);
                        while let Some((channel, payload)) = payloads.recv().await {
                            let notice = match channel.as_str() {
                                CHANNEL => EventNotice::Appended(SessionId::new(payload)),
                                CONTROLS => EventNotice::Controls(SessionId::new(payload)),
                                ANSWERS => match payload.parse() {
                                    Ok(id) => EventNotice::Answered(id),
                                    Err(_) => continue,
                                },
                                _ => continue,
                            };
                            let _ = sender.send(notice);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "could not listen for events"),
                }
                driver.abort();
            }
            Err(e) => tracing::warn!(error = %e, "could not connect to listen for events"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
