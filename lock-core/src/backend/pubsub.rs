//! One shared pub/sub subscriber per Redis client.
//!
//! Waiters on any number of locks share a single pub/sub connection. Channels
//! are subscribed when their first local waiter arrives and unsubscribed when
//! the last one leaves; messages are dispatched to local waiters through
//! [`Waiters`]. When the connection drops, every waiter is woken (so it
//! retries at once) and the next waiter reconnects. Nothing here can hang a
//! waiter: waits are always bounded by the lock's remaining TTL.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSubSink;

use super::notify::{WaitHandle, Waiters};
use crate::error::{Error, Result};

#[derive(Default)]
struct Conn {
    sink: Option<PubSubSink>,
    /// Bumped on every new connection, so a dispatcher only clears its own.
    epoch: u64,
    subscribed: HashSet<String>,
}

struct Inner {
    client: redis::Client,
    timeout: Duration,
    waiters: Waiters,
    conn: tokio::sync::Mutex<Conn>,
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

    async fn ensure(&self, channel: &str) -> Result<()> {
        let inner = &self.inner;
        let mut conn = inner.conn.lock().await;
        if conn.sink.is_some() && conn.subscribed.contains(channel) {
            return Ok(());
        }
        if conn.sink.is_none() {
            let pubsub = tokio::time::timeout(inner.timeout, inner.client.get_async_pubsub())
                .await
                .map_err(|_| Error::Timeout(inner.timeout))??;
            let (sink, stream) = pubsub.split();
            conn.epoch += 1;
            conn.sink = Some(sink);
            conn.subscribed.clear();
            tokio::spawn(dispatch(Arc::downgrade(&self.inner), stream, conn.epoch));
        }
        let Some(sink) = conn.sink.as_mut() else {
            return Err(Error::UnexpectedReply("pub/sub sink missing".into()));
        };
        match tokio::time::timeout(inner.timeout, sink.subscribe(channel)).await {
            Ok(Ok(())) => {
                conn.subscribed.insert(channel.to_owned());
                Ok(())
            }
            Ok(Err(e)) => {
                conn.sink = None;
                Err(e.into())
            }
            Err(_) => {
                conn.sink = None;
                Err(Error::Timeout(inner.timeout))
            }
        }
    }

    async fn unsubscribe_if_unused(&self, channel: String) {
        let mut conn = self.inner.conn.lock().await;
        if self.inner.waiters.is_registered(&channel) || !conn.subscribed.remove(&channel) {
            return;
        }
        if let Some(sink) = conn.sink.as_mut() {
            let timeout = self.inner.timeout;
            if !matches!(
                tokio::time::timeout(timeout, sink.unsubscribe(&channel)).await,
                Ok(Ok(()))
            ) {
                conn.sink = None;
            }
        }
    }
}

async fn dispatch(inner: std::sync::Weak<Inner>, mut stream: redis::aio::PubSubStream, epoch: u64) {
    while let Some(msg) = stream.next().await {
        let Some(inner) = inner.upgrade() else { return };
        inner.waiters.wake(msg.get_channel_name());
    }
    let Some(inner) = inner.upgrade() else { return };
    tracing::debug!("lock pub/sub connection closed; waiters will resubscribe");
    {
        let mut conn = inner.conn.lock().await;
        if conn.epoch == epoch {
            conn.sink = None;
            conn.subscribed.clear();
        }
    }
    inner.waiters.wake_all();
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
