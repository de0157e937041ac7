//! One shared pub/sub subscriber per Redis client.
//!
//! Waiters on any number of locks share a single pub/sub connection. Channels
//! are subscribed when their first local waiter arrives and unsubscribed when
//! the last one leaves; messages are dispatched to local waiters through
//! [`Waiters`]. Subscriptions of different channels go out concurrently;
//! those of one channel are ordered by a per-channel lock, so an unsubscribe
//! never overtakes a later subscribe. When the connection drops, every
//! waiter is woken (so it retries at once) and the next waiter reconnects.
//! Nothing here can hang a waiter: waits are always bounded by the lock's
//! remaining TTL.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSubSink;

use super::notify::{Handed, WaitHandle, Waiters};
use super::shrink_swept;
use crate::error::{Error, Result};

#[derive(Default)]
struct Conn {
    sink: Option<PubSubSink>,
    /// Bumped on every new connection; 0 means "never connected".
    epoch: u64,
}

/// Per channel: the connection epoch it is subscribed on (0 = not subscribed).
type ChannelState = Arc<tokio::sync::Mutex<u64>>;

struct Inner {
    client: redis::Client,
    timeout: Duration,
    waiters: Waiters,
    conn: tokio::sync::Mutex<Conn>,
    channels: Mutex<HashMap<String, ChannelState>>,
}

/// The shared subscriber. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Subscriber {
    inner: Arc<Inner>,
}

impl Subscriber {
    pub(crate) fn new(client: redis::Client, timeout: Duration) -> Self {
        Subscriber {
            inner: Arc::new(Inner {
                client,
                timeout,
                waiters: Waiters::default(),
                conn: tokio::sync::Mutex::new(Conn::default()),
                channels: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Registers a local waiter on `channel`. The channel is subscribed on the
    /// first [`Subscription::ensure`].
    pub(crate) fn register(&self, channel: String) -> Subscription {
        Subscription {
            handle: Some(self.inner.waiters.register(&channel)),
            channel,
            subscriber: self.clone(),
        }
    }

    /// The current connection's sink and epoch, connecting if there is none.
    async fn sink(&self) -> Result<(PubSubSink, u64)> {
        let inner = &self.inner;
        let mut conn = inner.conn.lock().await;
        if let Some(sink) = &conn.sink {
            return Ok((sink.clone(), conn.epoch));
        }
        let pubsub = tokio::time::timeout(inner.timeout, inner.client.get_async_pubsub())
            .await
            .map_err(|_| Error::Timeout(inner.timeout))??;
        let (sink, stream) = pubsub.split();
        conn.epoch += 1;
        conn.sink = Some(sink.clone());
        tokio::spawn(dispatch(Arc::downgrade(&self.inner), stream, conn.epoch));
        Ok((sink, conn.epoch))
    }

    /// Drops the connection of `epoch` (after a failed command), so the next
    /// waiter reconnects.
    async fn forget(&self, epoch: u64) {
        let mut conn = self.inner.conn.lock().await;
        if conn.epoch == epoch {
            conn.sink = None;
        }
    }

    fn channel_state(&self, channel: &str) -> ChannelState {
        let mut channels = self
            .inner
            .channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        channels.entry(channel.to_owned()).or_default().clone()
    }

    async fn ensure(&self, channel: &str) -> Result<()> {
        let state = self.channel_state(channel);
        let mut subscribed_on = state.lock().await;
        let (mut sink, epoch) = self.sink().await?;
        if *subscribed_on == epoch {
            return Ok(());
        }
        let timeout = self.inner.timeout;
        match tokio::time::timeout(timeout, sink.subscribe(channel)).await {
            Ok(Ok(())) => {
                *subscribed_on = epoch;
                Ok(())
            }
            Ok(Err(e)) => {
                self.forget(epoch).await;
                Err(e.into())
            }
            Err(_) => {
                self.forget(epoch).await;
                Err(Error::Timeout(timeout))
            }
        }
    }

    async fn unsubscribe_if_unused(&self, channel: String) {
        let state = self.channel_state(&channel);
        let mut subscribed_on = state.lock().await;
        if self.inner.waiters.is_registered(&channel) {
            return;
        }
        let current = {
            let conn = self.inner.conn.lock().await;
            conn.sink.clone().map(|sink| (sink, conn.epoch))
        };
        if let Some((mut sink, epoch)) = current
            && *subscribed_on == epoch
        {
            let timeout = self.inner.timeout;
            if !matches!(
                tokio::time::timeout(timeout, sink.unsubscribe(&channel)).await,
                Ok(Ok(()))
            ) {
                self.forget(epoch).await;
            }
        }
        *subscribed_on = 0;
        drop(subscribed_on);
        // Forget the channel unless someone came back for it meanwhile.
        let mut channels = self
            .inner
            .channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if Arc::strong_count(&state) == 2 && !self.inner.waiters.is_registered(&channel) {
            channels.remove(&channel);
            shrink_swept(&mut channels);
        }
    }
}

async fn dispatch(inner: std::sync::Weak<Inner>, mut stream: redis::aio::PubSubStream, epoch: u64) {
    while let Some(msg) = stream.next().await {
        let Some(inner) = inner.upgrade() else { return };
        let channel = msg.get_channel_name();
        match handoff(msg.get_payload_bytes()) {
            Some(handed) => inner.waiters.hand_over(channel, handed),
            None => inner.waiters.wake(channel),
        }
    }
    let Some(inner) = inner.upgrade() else { return };
    tracing::debug!("lock pub/sub connection closed; waiters will resubscribe");
    {
        let mut conn = inner.conn.lock().await;
        if conn.epoch == epoch {
            conn.sink = None;
        }
    }
    inner.waiters.wake_all();
}

/// The handoff a `held:<number>:<fence>` message announces, which a fair
/// lock's scripts send to the waiter they hand the lock to (fence 0: no
/// token asked for).
fn handoff(payload: &[u8]) -> Option<Handed> {
    let text = std::str::from_utf8(payload.strip_prefix(b"held:")?).ok()?;
    let (number, fence) = text.split_once(':')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(number) || !digits(fence) {
        return None;
    }
    Some(Handed {
        number: number.parse().ok()?,
        fence: fence.parse().ok()?,
    })
}

/// A local waiter's registration on one channel.
pub(crate) struct Subscription {
    handle: Option<WaitHandle>,
    channel: String,
    subscriber: Subscriber,
}

impl Subscription {
    /// Makes sure the channel is subscribed on the current connection, then
    /// marks all earlier messages as seen.
    pub(crate) async fn ensure(&mut self) -> Result<()> {
        let result = self.subscriber.ensure(&self.channel).await;
        if let Some(handle) = self.handle.as_mut() {
            handle.mark_seen();
        }
        result
    }

    /// The latest handoff a message on the channel announced to this waiter.
    pub(crate) fn handed(&self) -> Option<Handed> {
        self.handle.as_ref()?.handed()
    }

    /// Waits for a message on the channel (or a reconnect).
    pub(crate) async fn changed(&mut self) {
        match self.handle.as_mut() {
            Some(handle) => handle.changed().await,
            None => std::future::pending().await,
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        drop(self.handle.take());
        if self.subscriber.inner.waiters.is_registered(&self.channel) {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let subscriber = self.subscriber.clone();
            let channel = std::mem::take(&mut self.channel);
            runtime.spawn(async move { subscriber.unsubscribe_if_unused(channel).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Handed, handoff};

    #[test]
    fn only_a_well_formed_handoff_message_hands_over() {
        assert_eq!(
            handoff(b"held:3:0"),
            Some(Handed {
                number: 3,
                fence: 0
            })
        );
        assert_eq!(
            handoff(b"held:1732800000000007:1732800000000001"),
            Some(Handed {
                number: 1_732_800_000_000_007,
                fence: 1_732_800_000_000_001
            })
        );
        for other in [
            &b"wake"[..],
            b"released",
            b"held:",
            b"held:0",
            b"held:1:",
            b"held::1",
            b"held:-1:2",
            b"held:1:+2",
            b"held:1e15:0",
            b"held:1:2:3",
            b"xheld:1:1",
        ] {
            assert_eq!(handoff(other), None, "{:?}", String::from_utf8_lossy(other));
        }
    }
}
