//! One shared pub/sub subscriber per backend.
//!
//! Waiters on any number of locks share one subscription. Channels are
//! subscribed when their first local waiter arrives and unsubscribed when
//! the last one leaves; messages are dispatched to local waiters through
//! [`Waiters`]. Subscriptions of different channels go out concurrently;
//! those of one channel are ordered by a per-channel lock, so an
//! unsubscribe never overtakes a later subscribe.
//!
//! The subscription goes over one of two transports:
//!
//! * **A pub/sub connection** of its own (a standalone server, or the
//!   master Sentinel names, whose address may change): made on first use,
//!   made again when it drops.
//! * **The cluster connection itself** (RESP3 pushes), which routes each
//!   `SUBSCRIBE` (or, on Redis 7 or later, `SSUBSCRIBE`: sharded channels,
//!   on the node that owns the lock's slot) and subscribes again after
//!   reconnects and slot moves.
//!
//! When a connection drops, or a node stops serving a sharded channel,
//! every waiter is woken (so it retries at once) and resubscribes. Nothing
//! here can hang a waiter: waits are always bounded by the lock's
//! remaining TTL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSubSink;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Value};

use super::notify::{Note, Reader, WaitHandle, Waiters};
use crate::error::{Error, Result};
use crate::map::shrink_swept;

#[derive(Default)]
struct Conn {
    sink: Option<PubSubSink>,
}

/// How subscriptions reach the server.
enum Transport {
    /// A pub/sub connection of its own, to `client`'s server.
    PubSub {
        client: Box<Mutex<redis::Client>>,
        conn: tokio::sync::Mutex<Conn>,
    },
    /// The cluster connection, whose pushes come to the dispatch task.
    Cluster {
        conn: ClusterConnection,
        sharded: bool,
    },
}

/// Per channel: the epoch it is subscribed in (0 = not subscribed).
type ChannelState = Arc<tokio::sync::Mutex<u64>>;

struct Inner {
    transport: Transport,
    timeout: Duration,
    waiters: Waiters,
    /// Bumped whenever subscriptions may have been lost (a new pub/sub
    /// connection, a dropped cluster node): channels subscribed in an
    /// earlier epoch subscribe again.
    epoch: AtomicU64,
    channels: Mutex<HashMap<String, ChannelState>>,
}

/// The shared subscriber. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Subscriber {
    inner: Arc<Inner>,
}

impl Subscriber {
    /// A subscriber over a pub/sub connection to `client`'s server, made
    /// on first use.
    pub(crate) fn new(client: redis::Client, timeout: Duration) -> Self {
        Self::with(
            Transport::PubSub {
                client: Box::new(Mutex::new(client)),
                conn: tokio::sync::Mutex::default(),
            },
            timeout,
        )
    }

    /// A subscriber over the cluster connection `conn`, whose pushes arrive
    /// on `pushes`; sharded channels when `sharded`.
    pub(crate) fn cluster(
        conn: ClusterConnection,
        pushes: tokio::sync::mpsc::UnboundedReceiver<PushInfo>,
        sharded: bool,
        timeout: Duration,
    ) -> Self {
        let subscriber = Self::with(Transport::Cluster { conn, sharded }, timeout);
        tokio::spawn(dispatch_pushes(Arc::downgrade(&subscriber.inner), pushes));
        subscriber
    }

    fn with(transport: Transport, timeout: Duration) -> Self {
        Subscriber {
            inner: Arc::new(Inner {
                transport,
                timeout,
                waiters: Waiters::default(),
                epoch: AtomicU64::new(1),
                channels: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// From now on, subscribe on a pub/sub connection to `client`'s server
    /// (the master moved): the current connection is dropped, and every
    /// waiter is woken to subscribe again there.
    pub(crate) fn move_to(&self, client: redis::Client) {
        if let Transport::PubSub {
            client: current, ..
        } = &self.inner.transport
        {
            *current.lock().unwrap_or_else(PoisonError::into_inner) = client;
            let inner = self.inner.clone();
            tokio::spawn(async move {
                if let Transport::PubSub { conn, .. } = &inner.transport {
                    conn.lock().await.sink = None;
                }
                inner.epoch.fetch_add(1, Ordering::SeqCst);
                inner.waiters.wake_all();
            });
        }
    }

    /// Registers a local waiter on `channel`, whose messages `reader` reads
    /// (none: each is a wake-up). The channel is subscribed on the first
    /// [`Subscription::ensure`].
    pub(crate) fn register(&self, channel: String, reader: Option<Reader>) -> Subscription {
        Subscription {
            handle: Some(self.inner.waiters.register(&channel, reader)),
            channel,
            subscriber: self.clone(),
        }
    }

    /// The current pub/sub connection's sink, connecting if there is none.
    async fn sink(&self) -> Result<PubSubSink> {
        let Transport::PubSub { client, conn } = &self.inner.transport else {
            unreachable!("only a pub/sub transport has a sink");
        };
        let mut conn = conn.lock().await;
        if let Some(sink) = &conn.sink {
            return Ok(sink.clone());
        }
        let client = client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let timeout = self.inner.timeout;
        let pubsub = tokio::time::timeout(timeout, client.get_async_pubsub())
            .await
            .map_err(|_| Error::Timeout(timeout))??;
        let (sink, stream) = pubsub.split();
        let epoch = self.inner.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        conn.sink = Some(sink.clone());
        tokio::spawn(dispatch_messages(
            Arc::downgrade(&self.inner),
            stream,
            epoch,
        ));
        Ok(sink)
    }

    /// Drops the pub/sub connection after a failed command, so that the
    /// next waiter reconnects.
    async fn forget(&self) {
        if let Transport::PubSub { conn, .. } = &self.inner.transport {
            conn.lock().await.sink = None;
            self.inner.epoch.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Sends `SUBSCRIBE` (`subscribe`) or `UNSUBSCRIBE` for `channel`, or
    /// their sharded forms, bounded by the timeout.
    async fn send(&self, channel: &str, subscribe: bool) -> Result<()> {
        let timeout = self.inner.timeout;
        let sent = match &self.inner.transport {
            Transport::PubSub { .. } => {
                let mut sink = self.sink().await?;
                let call = async {
                    if subscribe {
                        sink.subscribe(channel).await
                    } else {
                        sink.unsubscribe(channel).await
                    }
                };
                tokio::time::timeout(timeout, call).await
            }
            Transport::Cluster { conn, sharded } => {
                let mut conn = conn.clone();
                let call = async {
                    match (subscribe, sharded) {
                        (true, true) => conn.ssubscribe(channel).await,
                        (true, false) => conn.subscribe(channel).await,
                        (false, true) => conn.sunsubscribe(channel).await,
                        (false, false) => conn.unsubscribe(channel).await,
                    }
                };
                tokio::time::timeout(timeout, call).await
            }
        };
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => {
                self.forget().await;
                Err(error.into())
            }
            Err(_) => {
                self.forget().await;
                Err(Error::Timeout(timeout))
            }
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
        let mut subscribed_in = state.lock().await;
        if matches!(self.inner.transport, Transport::PubSub { .. }) {
            // Connects if need be, which starts a new epoch.
            self.sink().await?;
        }
        let epoch = self.inner.epoch.load(Ordering::SeqCst);
        if *subscribed_in == epoch {
            return Ok(());
        }
        self.send(channel, true).await?;
        *subscribed_in = epoch;
        Ok(())
    }

    async fn unsubscribe_if_unused(&self, channel: String) {
        let state = self.channel_state(&channel);
        let mut subscribed_in = state.lock().await;
        if self.inner.waiters.is_registered(&channel) {
            return;
        }
        if *subscribed_in == self.inner.epoch.load(Ordering::SeqCst) {
            // A failure drops the connection; the channel goes with it.
            let _ = self.send(&channel, false).await;
        }
        *subscribed_in = 0;
        drop(subscribed_in);
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

/// Passes a message on `channel` to its waiters.
fn deliver(inner: &Inner, channel: &str, payload: &[u8]) {
    inner.waiters.deliver(channel, payload);
}

/// Subscriptions may be gone: subscribe again, and let every waiter retry.
fn start_over(inner: &Inner) {
    inner.epoch.fetch_add(1, Ordering::SeqCst);
    inner.waiters.wake_all();
}

async fn dispatch_messages(inner: Weak<Inner>, mut stream: redis::aio::PubSubStream, epoch: u64) {
    while let Some(msg) = stream.next().await {
        let Some(inner) = inner.upgrade() else { return };
        deliver(&inner, msg.get_channel_name(), msg.get_payload_bytes());
    }
    let Some(inner) = inner.upgrade() else { return };
    tracing::debug!("lock pub/sub connection closed; waiters will resubscribe");
    if let Transport::PubSub { conn, .. } = &inner.transport {
        let mut conn = conn.lock().await;
        if inner.epoch.load(Ordering::SeqCst) == epoch {
            conn.sink = None;
        }
    }
    start_over(&inner);
}

async fn dispatch_pushes(
    inner: Weak<Inner>,
    mut pushes: tokio::sync::mpsc::UnboundedReceiver<PushInfo>,
) {
    while let Some(push) = pushes.recv().await {
        let Some(inner) = inner.upgrade() else { return };
        let text = |value: Option<&Value>| match value {
            Some(Value::BulkString(bytes)) => Some(bytes.clone()),
            _ => None,
        };
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                if let (Some(channel), Some(payload)) =
                    (text(push.data.first()), text(push.data.get(1)))
                    && let Ok(channel) = std::str::from_utf8(&channel)
                {
                    deliver(&inner, channel, &payload);
                }
            }
            PushKind::Disconnection => {
                tracing::debug!("a cluster node's connection closed; waiters will resubscribe");
                start_over(&inner);
            }
            // A node stopped serving a sharded channel (its slot moved):
            // subscribe again, on the node that owns it now.
            PushKind::SUnsubscribe => {
                let channel = text(push.data.first());
                let waited_for = channel
                    .as_deref()
                    .and_then(|c| std::str::from_utf8(c).ok())
                    .is_some_and(|c| inner.waiters.is_registered(c));
                if waited_for {
                    start_over(&inner);
                }
            }
            _ => {}
        }
    }
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

    /// The newest note a message on the channel carried (see [`Reader`]).
    pub(crate) fn note(&self) -> Option<Note> {
        self.handle.as_ref()?.note()
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
