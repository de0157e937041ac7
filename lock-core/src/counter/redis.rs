//! Stock counters on Redis: one script per operation, all sharing a prelude
//! (`stock.lua`) that drops expired holds.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionLike;

use super::{CounterBackend, Purchase, Reservation, Settle};
use crate::backend::RedisBackend;
use crate::backend::script::{Invocation, LuaScript};
use crate::error::{Error, Result};
use crate::name::Name;

macro_rules! stock_script {
    ($file:literal) => {
        LazyLock::new(|| LuaScript::new(&[include_str!("stock.lua"), include_str!($file)]))
    };
}

static GET: LazyLock<LuaScript> = stock_script!("get.lua");
static SET: LazyLock<LuaScript> = stock_script!("set.lua");
static CREATE: LazyLock<LuaScript> = stock_script!("create.lua");
static RESTOCK: LazyLock<LuaScript> = stock_script!("restock.lua");
static DECREMENT: LazyLock<LuaScript> = stock_script!("decrement.lua");
static RESERVE: LazyLock<LuaScript> = stock_script!("reserve.lua");
static CONFIRM: LazyLock<LuaScript> = stock_script!("confirm.lua");
static CANCEL: LazyLock<LuaScript> = stock_script!("cancel.lua");
static DELETE: LazyLock<LuaScript> = stock_script!("delete.lua");

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn count(value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| Error::UnexpectedReply(format!("negative stock {value}")))
}

/// A script's answer that the stock would pass [`MAX_QUANTITY`](super::MAX_QUANTITY).
const TOO_MUCH: i64 = -2;

impl<C> RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Starts an invocation with the item's stock, holds and held keys.
    fn stock_invocation<'a>(&self, script: &'a LuaScript, item: &Name) -> Invocation<'a> {
        let mut invocation = script.call();
        invocation
            .key(self.key(item, "stock"))
            .key(self.key(item, "holds"))
            .key(self.key(item, "held"));
        invocation
    }

    /// Runs a script that changes stock: with writes synced, an error when
    /// too few replicas confirmed the change (which stays made).
    async fn write<T: redis::FromRedisValue + Send>(
        &self,
        invocation: Invocation<'_>,
    ) -> Result<T> {
        match self.invoke_write(invocation).await? {
            (_, Some(replicated)) if !replicated.enough() => Err(replicated.error()),
            (answer, _) => Ok(answer),
        }
    }

    fn order_key(&self, item: &Name, order: &Name) -> String {
        self.key(item, &format!("order:{order}"))
    }
}

impl<C> CounterBackend for RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn set(&self, item: &Name, quantity: u64) -> Result<()> {
        let mut invocation = self.stock_invocation(&SET, item);
        invocation.arg(quantity);
        match self.write(invocation).await? {
            TOO_MUCH => Err(super::too_much()),
            _ => Ok(()),
        }
    }

    async fn create(&self, item: &Name, quantity: u64) -> Result<bool> {
        let mut invocation = self.stock_invocation(&CREATE, item);
        invocation.arg(quantity);
        let created: i64 = self.write(invocation).await?;
        Ok(created == 1)
    }

    async fn get(&self, item: &Name) -> Result<Option<u64>> {
        let stock: i64 = self.invoke(self.stock_invocation(&GET, item)).await?;
        Ok((stock >= 0).then_some(stock.unsigned_abs()))
    }

    async fn restock(&self, item: &Name, quantity: u64) -> Result<Option<u64>> {
        let mut invocation = self.stock_invocation(&RESTOCK, item);
        invocation.arg(quantity);
        match self.write(invocation).await? {
            TOO_MUCH => Err(super::too_much()),
            stock => Ok((stock >= 0).then_some(stock.unsigned_abs())),
        }
    }

    async fn decrement(
        &self,
        item: &Name,
        n: u64,
        op: Option<(&Name, Duration)>,
    ) -> Result<Purchase> {
        let mut invocation = self.stock_invocation(&DECREMENT, item);
        invocation.arg(n);
        if let Some((op, remember)) = op {
            invocation
                .key(self.key(item, &format!("op:{op}")))
                .arg(ms(remember));
        }
        let (status, value, replayed): (i64, i64, i64) = self.write(invocation).await?;
        match status {
            1 => Ok(Purchase::Done {
                remaining: count(value)?,
                replayed: replayed == 1,
            }),
            0 => Ok(Purchase::SoldOut {
                available: count(value)?,
            }),
            -1 => Ok(Purchase::UnknownItem),
            other => Err(Error::UnexpectedReply(format!("decrement status {other}"))),
        }
    }

    async fn reserve(
        &self,
        item: &Name,
        n: u64,
        order: &Name,
        hold: Duration,
    ) -> Result<Reservation> {
        let mut invocation = self.stock_invocation(&RESERVE, item);
        invocation
            .key(self.order_key(item, order))
            .arg(n)
            .arg(ms(hold))
            .arg(order.as_str());
        let (status, a, b): (i64, i64, i64) = self.write(invocation).await?;
        let millis = |v: i64| Duration::from_millis(u64::try_from(v).unwrap_or(0));
        match status {
            1 => Ok(Reservation::Held {
                remaining: count(a)?,
                expires_in: millis(b),
            }),
            2 => Ok(Reservation::AlreadyHeld {
                quantity: count(a)?,
                expires_in: millis(b),
            }),
            3 => Ok(Reservation::AlreadyConfirmed),
            0 => Ok(Reservation::SoldOut {
                available: count(a)?,
            }),
            -1 => Ok(Reservation::UnknownItem),
            other => Err(Error::UnexpectedReply(format!("reserve status {other}"))),
        }
    }

    async fn confirm(&self, item: &Name, order: &Name, remember: Duration) -> Result<Settle> {
        let mut invocation = self.stock_invocation(&CONFIRM, item);
        invocation
            .key(self.order_key(item, order))
            .arg(ms(remember))
            .arg(order.as_str());
        let status: i64 = self.write(invocation).await?;
        match status {
            1 => Ok(Settle::Confirmed),
            2 => Ok(Settle::AlreadyConfirmed),
            0 => Ok(Settle::NotHeld),
            other => Err(Error::UnexpectedReply(format!("confirm status {other}"))),
        }
    }

    async fn cancel(&self, item: &Name, order: &Name) -> Result<Settle> {
        let mut invocation = self.stock_invocation(&CANCEL, item);
        invocation
            .key(self.order_key(item, order))
            .arg(order.as_str());
        let (status, available): (i64, i64) = self.write(invocation).await?;
        match status {
            1 => Ok(Settle::Cancelled {
                available: count(available)?,
            }),
            2 => Ok(Settle::AlreadyConfirmed),
            0 => Ok(Settle::NotHeld),
            other => Err(Error::UnexpectedReply(format!("cancel status {other}"))),
        }
    }

    async fn delete(&self, item: &Name) -> Result<bool> {
        let deleted: i64 = self.write(self.stock_invocation(&DELETE, item)).await?;
        Ok(deleted == 1)
    }
}
