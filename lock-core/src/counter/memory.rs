//! Stock counters in memory: same operations and outcomes as on Redis.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::{CounterBackend, MAX_QUANTITY, Purchase, Reservation, Settle, too_much};
use crate::backend::{MemoryBackend, MemoryConfig, MemoryState};
use crate::error::Result;
use crate::map::shrink_swept;
use crate::name::Name;

/// One item: the units on hand (not sold: available or held) and its holds.
/// Available = on hand - held.
#[derive(Default)]
struct Item {
    on_hand: u64,
    /// The sum of the live holds.
    held: u64,
    /// order -> (quantity, expiry)
    holds: HashMap<Name, (u64, Instant)>,
    /// The holds in the order they expire.
    by_expiry: BTreeSet<(Instant, Name)>,
}

impl Item {
    fn available(&self) -> u64 {
        self.on_hand - self.held
    }

    /// Drops the holds that expired: their units are available again.
    fn reclaim(&mut self, now: Instant) {
        let mut dropped = false;
        while let Some((expires, _)) = self.by_expiry.first()
            && *expires <= now
        {
            let Some((_, order)) = self.by_expiry.pop_first() else {
                break;
            };
            if let Some((quantity, _)) = self.holds.remove(&order) {
                self.held -= quantity;
            }
            dropped = true;
        }
        if dropped {
            shrink_swept(&mut self.holds);
        }
    }

    fn hold(&mut self, order: &Name, quantity: u64, expires: Instant) {
        self.held += quantity;
        self.holds.insert(order.clone(), (quantity, expires));
        self.by_expiry.insert((expires, order.clone()));
    }

    /// Removes `order`'s hold; its quantity.
    fn unhold(&mut self, order: &Name) -> Option<u64> {
        let (quantity, expires) = self.holds.remove(order)?;
        self.by_expiry.remove(&(expires, order.clone()));
        self.held -= quantity;
        Some(quantity)
    }
}

#[derive(Default)]
struct State {
    items: HashMap<Name, Item>,
    /// (item, operation) -> (outcome, forget at)
    operations: HashMap<(Name, Name), (Purchase, Instant)>,
    /// (item, order) -> forget at
    confirmed: HashMap<(Name, Name), Instant>,
    calls: u64,
}

const SWEEP_EVERY: u64 = 1024;

/// Stock counters of one [`MemoryBackend`]. Remembered operation ids and
/// confirmations are swept once expired.
#[derive(Default)]
pub(crate) struct CounterTable {
    state: Mutex<State>,
}

impl MemoryState for CounterTable {
    fn new(_: &MemoryConfig) -> Self {
        CounterTable::default()
    }
}

impl CounterTable {
    /// Locks the state, sweeps expired memories now and then, and returns
    /// expired holds of `item` to its stock.
    fn with<T>(&self, item: &Name, f: impl FnOnce(&mut State, Instant) -> T) -> T {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.calls += 1;
        if state.calls.is_multiple_of(SWEEP_EVERY) {
            state.operations.retain(|_, (_, until)| *until > now);
            state.confirmed.retain(|_, until| *until > now);
            shrink_swept(&mut state.operations);
            shrink_swept(&mut state.confirmed);
        }
        if let Some(it) = state.items.get_mut(item) {
            it.reclaim(now);
        }
        f(&mut state, now)
    }
}

impl CounterBackend for MemoryBackend {
    async fn set(&self, item: &Name, quantity: u64) -> Result<()> {
        self.state::<CounterTable>().with(item, |s, _| {
            let it = s.items.entry(item.clone()).or_default();
            let on_hand = quantity + it.held;
            if on_hand > MAX_QUANTITY {
                return Err(too_much());
            }
            it.on_hand = on_hand;
            Ok(())
        })
    }

    async fn create(&self, item: &Name, quantity: u64) -> Result<bool> {
        Ok(self.state::<CounterTable>().with(item, |s, _| {
            if s.items.contains_key(item) {
                return false;
            }
            let it = Item {
                on_hand: quantity,
                ..Item::default()
            };
            s.items.insert(item.clone(), it);
            true
        }))
    }

    async fn get(&self, item: &Name) -> Result<Option<u64>> {
        Ok(self
            .state::<CounterTable>()
            .with(item, |s, _| s.items.get(item).map(Item::available)))
    }

    async fn restock(&self, item: &Name, quantity: u64) -> Result<Option<u64>> {
        self.state::<CounterTable>().with(item, |s, _| {
            let Some(it) = s.items.get_mut(item) else {
                return Ok(None);
            };
            let on_hand = it.on_hand + quantity;
            if on_hand > MAX_QUANTITY {
                return Err(too_much());
            }
            it.on_hand = on_hand;
            Ok(Some(it.available()))
        })
    }

    async fn decrement(
        &self,
        item: &Name,
        n: u64,
        op: Option<(&Name, Duration)>,
    ) -> Result<Purchase> {
        Ok(self.state::<CounterTable>().with(item, |s, now| {
            let op_key = op.map(|(op, remember)| ((item.clone(), op.clone()), now + remember));
            let remembered = op_key
                .as_ref()
                .and_then(|(key, _)| s.operations.get(key))
                .filter(|(_, until)| *until > now);
            if let Some((outcome, _)) = remembered {
                return match *outcome {
                    Purchase::Done { remaining, .. } => Purchase::Done {
                        remaining,
                        replayed: true,
                    },
                    other => other,
                };
            }
            let Some(it) = s.items.get_mut(item) else {
                return Purchase::UnknownItem;
            };
            let outcome = if it.available() >= n {
                it.on_hand -= n;
                Purchase::Done {
                    remaining: it.available(),
                    replayed: false,
                }
            } else {
                Purchase::SoldOut {
                    available: it.available(),
                }
            };
            if let Some((key, until)) = op_key {
                s.operations.insert(key, (outcome, until));
            }
            outcome
        }))
    }

    async fn reserve(
        &self,
        item: &Name,
        n: u64,
        order: &Name,
        hold: Duration,
    ) -> Result<Reservation> {
        Ok(self.state::<CounterTable>().with(item, |s, now| {
            let confirmed = s
                .confirmed
                .get(&(item.clone(), order.clone()))
                .is_some_and(|until| *until > now);
            if confirmed {
                return Reservation::AlreadyConfirmed;
            }
            let Some(it) = s.items.get_mut(item) else {
                return Reservation::UnknownItem;
            };
            if let Some((quantity, expires)) = it.holds.get(order) {
                return Reservation::AlreadyHeld {
                    quantity: *quantity,
                    expires_in: *expires - now,
                };
            }
            if it.available() < n {
                return Reservation::SoldOut {
                    available: it.available(),
                };
            }
            it.hold(order, n, now + hold);
            Reservation::Held {
                remaining: it.available(),
                expires_in: hold,
            }
        }))
    }

    async fn confirm(&self, item: &Name, order: &Name, remember: Duration) -> Result<Settle> {
        Ok(self.state::<CounterTable>().with(item, |s, now| {
            let key = (item.clone(), order.clone());
            let sold = s.items.get_mut(item).and_then(|it| {
                let quantity = it.unhold(order)?;
                it.on_hand -= quantity;
                Some(quantity)
            });
            if sold.is_some() {
                s.confirmed.insert(key, now + remember);
                Settle::Confirmed
            } else if s.confirmed.get(&key).is_some_and(|until| *until > now) {
                Settle::AlreadyConfirmed
            } else {
                Settle::NotHeld
            }
        }))
    }

    async fn cancel(&self, item: &Name, order: &Name) -> Result<Settle> {
        Ok(self.state::<CounterTable>().with(item, |s, now| {
            if let Some(it) = s.items.get_mut(item)
                && it.unhold(order).is_some()
            {
                return Settle::Cancelled {
                    available: it.available(),
                };
            }
            let key = (item.clone(), order.clone());
            if s.confirmed.get(&key).is_some_and(|until| *until > now) {
                Settle::AlreadyConfirmed
            } else {
                Settle::NotHeld
            }
        }))
    }

    async fn delete(&self, item: &Name) -> Result<bool> {
        Ok(self
            .state::<CounterTable>()
            .with(item, |s, _| s.items.remove(item).is_some()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Remembered operation ids are swept once expired, and the map gives
    /// back the room they took.
    #[tokio::test(start_paused = true)]
    async fn expired_operations_are_swept() {
        let backend = MemoryBackend::new();
        let item = Name::new("item").unwrap();
        backend.set(&item, MAX_QUANTITY).await.unwrap();
        let remember = Duration::from_millis(1);
        let room = || {
            let state = backend.state::<CounterTable>().state.lock().unwrap();
            (state.operations.len(), state.operations.capacity())
        };
        for i in 0..(2 * SWEEP_EVERY) {
            let op = Name::new(format!("op{i}")).unwrap();
            backend
                .decrement(&item, 1, Some((&op, remember)))
                .await
                .unwrap();
        }
        // On the paused clock nothing has expired yet: every one is held.
        let peak = room().1;
        tokio::time::advance(Duration::from_millis(5)).await;
        for _ in 0..SWEEP_EVERY {
            backend.get(&item).await.unwrap();
        }
        let (stored, room) = room();
        assert_eq!(stored, 0);
        assert!(
            peak >= SWEEP_EVERY as usize && room == 0,
            "room for {room} entries, {peak} before the sweep"
        );
    }

    /// Expired holds flow back to the stock, and the item's map of holds
    /// gives back the room they took.
    #[tokio::test(start_paused = true)]
    async fn expired_holds_give_their_room_back() {
        let backend = MemoryBackend::new();
        let item = Name::new("item").unwrap();
        backend.set(&item, 10_000).await.unwrap();
        for i in 0..2000 {
            let order = Name::new(format!("order{i}")).unwrap();
            backend
                .reserve(&item, 1, &order, Duration::from_millis(1))
                .await
                .unwrap();
        }
        let holds = || {
            let state = backend.state::<CounterTable>().state.lock().unwrap();
            let it = &state.items[&item];
            (it.holds.len(), it.holds.capacity())
        };
        let peak = holds().1;
        tokio::time::advance(Duration::from_millis(5)).await;
        assert_eq!(backend.get(&item).await.unwrap(), Some(10_000));
        let (held, room) = holds();
        assert_eq!(held, 0);
        assert!(
            peak >= 1000 && room == 0,
            "room for {room} holds, {peak} before they expired"
        );
    }
}
