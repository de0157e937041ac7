//! The stock-counter conformance suite: every [`CounterBackend`] must pass it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::Error;
use lock_core::counter::{CounterBackend, MAX_QUANTITY, Purchase, Reservation, Settle, Stock};

const HOLD: Duration = Duration::from_secs(30);

fn done(remaining: u64) -> Purchase {
    Purchase::Done {
        remaining,
        replayed: false,
    }
}

/// Create, read, restock, delete.
pub async fn set_get_restock_delete<B: CounterBackend>(backend: B) {
    let stock = Stock::new(backend);
    assert_eq!(stock.get("item").await.expect("get"), None);
    assert_eq!(stock.restock("item", 1).await.expect("restock"), None);
    stock.set("item", 5).await.expect("set");
    assert_eq!(stock.get("item").await.expect("get"), Some(5));
    assert_eq!(stock.restock("item", 3).await.expect("restock"), Some(8));
    stock.set("item", 0).await.expect("set");
    assert_eq!(stock.get("item").await.expect("get"), Some(0));
    assert!(stock.delete("item").await.expect("delete"));
    assert!(!stock.delete("item").await.expect("delete"));
    assert_eq!(stock.get("item").await.expect("get"), None);
}

/// Decrements succeed only while enough remains; stock never goes below zero;
/// a restocked item sells again.
pub async fn decrement_never_oversells<B: CounterBackend>(backend: B) {
    let stock = Stock::new(backend);
    stock.set("sku", 3).await.expect("set");
    assert_eq!(stock.decrement("sku", 2).await.expect("dec"), done(1));
    assert_eq!(
        stock.decrement("sku", 2).await.expect("dec"),
        Purchase::SoldOut { available: 1 }
    );
    assert_eq!(stock.decrement("sku", 1).await.expect("dec"), done(0));
    assert_eq!(
        stock.decrement("sku", 1).await.expect("dec"),
        Purchase::SoldOut { available: 0 }
    );
    assert_eq!(stock.get("sku").await.expect("get"), Some(0));
    assert_eq!(
        stock.decrement("nope", 1).await.expect("dec"),
        Purchase::UnknownItem
    );
    assert_eq!(stock.restock("sku", 5).await.expect("restock"), Some(5));
    assert_eq!(stock.decrement("sku", 1).await.expect("dec"), done(4));
}

/// Many concurrent buyers of 100 units sell exactly 100.
pub async fn concurrent_buyers_sell_exactly_the_stock<B: CounterBackend>(backend: B) {
    let stock = Stock::new(backend);
    stock.set("flash", 100).await.expect("set");
    let sold = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..500 {
        let (stock, sold) = (stock.clone(), sold.clone());
        tasks.push(tokio::spawn(async move {
            match stock.decrement("flash", 1).await.expect("dec") {
                Purchase::Done { .. } => {
                    sold.fetch_add(1, Ordering::SeqCst);
                }
                Purchase::SoldOut { available } => assert_eq!(available, 0),
                other => panic!("unexpected {other:?}"),
            }
        }));
    }
    for task in tasks {
        task.await.expect("task panicked");
    }
    assert_eq!(sold.load(Ordering::SeqCst), 100);
    assert_eq!(stock.get("flash").await.expect("get"), Some(0));
}

/// A retried operation id returns the first outcome and takes nothing more,
/// even when the retries race each other.
pub async fn idempotent_decrements<B: CounterBackend>(backend: B) {
    let stock = Stock::new(backend);
    stock.set("idem", 10).await.expect("set");
    assert_eq!(
        stock.decrement_once("idem", 2, "op-1").await.expect("dec"),
        done(8)
    );
    assert_eq!(
        stock.decrement_once("idem", 2, "op-1").await.expect("dec"),
        Purchase::Done {
            remaining: 8,
            replayed: true
        }
    );
    assert_eq!(stock.get("idem").await.expect("get"), Some(8));
    assert_eq!(
        stock.decrement_once("idem", 1, "op-2").await.expect("dec"),
        done(7)
    );

    let mut tasks = Vec::new();
    for _ in 0..50 {
        let stock = stock.clone();
        tasks.push(tokio::spawn(async move {
            stock.decrement_once("idem", 1, "op-3").await.expect("dec")
        }));
    }
    let mut fresh = 0;
    for task in tasks {
        match task.await.expect("task panicked") {
            Purchase::Done {
                remaining: 6,
                replayed,
            } => fresh += usize::from(!replayed),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(fresh, 1, "one of the racing retries must be the first");
    assert_eq!(stock.get("idem").await.expect("get"), Some(6));

    // The first outcome is replayed even when it was "sold out".
    stock.set("idem-empty", 0).await.expect("set");
    let first = stock
        .decrement_once("idem-empty", 1, "op-4")
        .await
        .expect("dec");
    assert_eq!(first, Purchase::SoldOut { available: 0 });
    stock.restock("idem-empty", 1).await.expect("restock");
    assert_eq!(
        stock
            .decrement_once("idem-empty", 1, "op-4")
            .await
            .expect("dec"),
        first
    );
}

/// Operation ids are forgotten after the configured time.
pub async fn operation_ids_are_forgotten<B: CounterBackend>(backend: B) {
    let stock = Stock::new(backend).remember_for(Duration::from_millis(200));
    stock.set("forget", 5).await.expect("set");
    assert_eq!(
        stock.decrement_once("forget", 1, "op").await.expect("dec"),
        done(4)
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        stock.decrement_once("forget", 1, "op").await.expect("dec"),
        done(3)
    );
}

/// Reserve, retry, confirm, cancel.
pub async fn reservations<B: CounterBackend>(backend: B) {
    let stock = Stock::new(backend);
    stock.set("seat", 5).await.expect("set");
    let held = stock.reserve("seat", 2, "o1", HOLD).await.expect("reserve");
    assert!(matches!(held, Reservation::Held { remaining: 3, expires_in } if expires_in <= HOLD));
    let again = stock.reserve("seat", 2, "o1", HOLD).await.expect("reserve");
    assert!(
        matches!(again, Reservation::AlreadyHeld { quantity: 2, .. }),
        "{again:?}"
    );
    assert_eq!(stock.get("seat").await.expect("get"), Some(3));
    assert_eq!(
        stock.confirm("seat", "o1").await.expect("confirm"),
        Settle::Confirmed
    );
    assert_eq!(
        stock.confirm("seat", "o1").await.expect("confirm"),
        Settle::AlreadyConfirmed
    );
    assert_eq!(
        stock.cancel("seat", "o1").await.expect("cancel"),
        Settle::AlreadyConfirmed
    );
    assert_eq!(
        stock.reserve("seat", 1, "o1", HOLD).await.expect("reserve"),
        Reservation::AlreadyConfirmed
    );
    assert_eq!(stock.get("seat").await.expect("get"), Some(3));

    assert!(matches!(
        stock.reserve("seat", 2, "o2", HOLD).await.expect("reserve"),
        Reservation::Held { remaining: 1, .. }
    ));
    assert_eq!(
        stock.cancel("seat", "o2").await.expect("cancel"),
        Settle::Cancelled { available: 3 }
    );
    assert_eq!(
        stock.cancel("seat", "o2").await.expect("cancel"),
        Settle::NotHeld
    );
    assert_eq!(
        stock.confirm("seat", "o2").await.expect("confirm"),
        Settle::NotHeld
    );
    assert_eq!(
        stock.reserve("seat", 4, "o3", HOLD).await.expect("reserve"),
        Reservation::SoldOut { available: 3 }
    );
    assert_eq!(
        stock.reserve("nope", 1, "o4", HOLD).await.expect("reserve"),
        Reservation::UnknownItem
    );
}

/// A hold that is neither confirmed nor cancelled (a crashed client) gives its
/// stock back when it expires, and can no longer be confirmed.
pub async fn expired_reservation_returns_stock<B: CounterBackend>(backend: B) {
    let stock = Stock::new(backend);
    stock.set("hold", 2).await.expect("set");
    assert!(matches!(
        stock
            .reserve("hold", 2, "crashed", Duration::from_millis(200))
            .await
            .expect("reserve"),
        Reservation::Held { remaining: 0, .. }
    ));
    assert_eq!(
        stock.decrement("hold", 1).await.expect("dec"),
        Purchase::SoldOut { available: 0 }
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(stock.get("hold").await.expect("get"), Some(2));
    assert_eq!(
        stock.confirm("hold", "crashed").await.expect("confirm"),
        Settle::NotHeld
    );
    assert_eq!(stock.decrement("hold", 1).await.expect("dec"), done(1));
}

/// However many holds expired together, a read counts every one of them as
/// available again, and the whole stock can be taken at once.
pub async fn many_expired_holds_all_come_back<B: CounterBackend>(backend: B) {
    const HOLDS: u64 = 2000;
    let stock = Stock::new(backend);
    stock.set("many", HOLDS + 50).await.expect("set");
    let hold = Duration::from_millis(600);
    let orders: Vec<_> = (0..HOLDS)
        .map(|i| {
            let stock = stock.clone();
            tokio::spawn(async move { stock.reserve("many", 1, &format!("o{i}"), hold).await })
        })
        .collect();
    for order in orders {
        let held = order.await.expect("join").expect("reserve");
        assert!(matches!(held, Reservation::Held { .. }), "{held:?}");
    }
    assert_eq!(stock.get("many").await.expect("get"), Some(50));
    tokio::time::sleep(hold + Duration::from_millis(100)).await;
    assert_eq!(stock.get("many").await.expect("get"), Some(HOLDS + 50));
    assert_eq!(
        stock
            .decrement("many", HOLDS + 50)
            .await
            .expect("decrement"),
        done(0)
    );
}

/// No count may pass `MAX_QUANTITY`, available and held together: a set or
/// restock that would is refused, the same on every backend, and changes
/// nothing.
pub async fn totals_past_the_maximum_are_refused<B: CounterBackend>(backend: B) {
    let stock = Stock::new(backend);
    let too_much = |r: Result<_, Error>| matches!(r, Err(Error::InvalidArgument { .. }));
    stock
        .set("big", MAX_QUANTITY)
        .await
        .expect("set to the maximum");
    assert!(too_much(stock.restock("big", 1).await));
    assert_eq!(stock.get("big").await.expect("get"), Some(MAX_QUANTITY));
    stock.set("big", MAX_QUANTITY - 10).await.expect("set");
    assert_eq!(
        stock.restock("big", 10).await.expect("restock"),
        Some(MAX_QUANTITY)
    );
    // Held units count too.
    stock.set("big", 100).await.expect("set");
    stock.reserve("big", 40, "o", HOLD).await.expect("reserve");
    assert!(too_much(
        stock.set("big", MAX_QUANTITY).await.map(|()| None)
    ));
    assert!(too_much(stock.restock("big", MAX_QUANTITY - 99).await));
    assert_eq!(stock.get("big").await.expect("get"), Some(60));
    assert_eq!(
        stock
            .restock("big", MAX_QUANTITY - 100)
            .await
            .expect("restock"),
        Some(MAX_QUANTITY - 40)
    );
}

/// `create` makes an item only once: a second start-up does not put back
/// what was sold.
pub async fn create_keeps_an_existing_item<B: CounterBackend>(backend: B) {
    let stock = Stock::new(backend);
    assert!(stock.create("seeded", 100).await.expect("create"));
    assert_eq!(
        stock.decrement("seeded", 3).await.expect("decrement"),
        done(97)
    );
    assert!(!stock.create("seeded", 100).await.expect("create again"));
    assert_eq!(stock.get("seeded").await.expect("get"), Some(97));
    assert!(stock.delete("seeded").await.expect("delete"));
    assert!(
        stock
            .create("seeded", 5)
            .await
            .expect("create after delete")
    );
    assert_eq!(stock.get("seeded").await.expect("get"), Some(5));
}

/// Bad input is a typed error and changes nothing.
pub async fn bad_input_is_rejected<B: CounterBackend>(backend: B) {
    let stock = Stock::new(backend);
    stock.set("ok", 3).await.expect("set");
    let invalid_arg = |r: Result<_, Error>| matches!(r, Err(Error::InvalidArgument { .. }));
    let invalid_name = |r: Result<_, Error>| matches!(r, Err(Error::InvalidName { .. }));
    assert!(invalid_arg(stock.decrement("ok", 0).await.map(|_| ())));
    assert!(invalid_arg(
        stock.decrement("ok", MAX_QUANTITY + 1).await.map(|_| ())
    ));
    assert!(invalid_arg(stock.restock("ok", 0).await.map(|_| ())));
    assert!(invalid_arg(stock.set("ok", MAX_QUANTITY + 1).await));
    assert!(invalid_arg(
        stock.reserve("ok", 0, "o", HOLD).await.map(|_| ())
    ));
    assert!(invalid_arg(
        stock
            .reserve("ok", 1, "o", Duration::ZERO)
            .await
            .map(|_| ())
    ));
    assert!(invalid_name(stock.decrement("", 1).await.map(|_| ())));
    assert!(invalid_name(stock.decrement("a{b}", 1).await.map(|_| ())));
    assert!(invalid_name(
        stock.decrement_once("ok", 1, "").await.map(|_| ())
    ));
    assert!(invalid_name(
        stock.reserve("ok", 1, "{o}", HOLD).await.map(|_| ())
    ));
    assert_eq!(
        stock.get("ok").await.expect("get"),
        Some(3),
        "bad input changed stock"
    );
}

/// Instantiates the stock-counter conformance suite as `#[tokio::test]`s.
#[macro_export]
macro_rules! counter_suite {
    ($setup:expr) => {
        $crate::counter_suite!(@with @cases $setup);
    };
    (sequentially $backend:expr) => {
        $crate::counter_suite!(@with @seq $backend);
    };
    (@with @$arm:ident $arg:expr) => {
        $crate::counter_suite!(@$arm $arg;
            set_get_restock_delete, decrement_never_oversells,
            concurrent_buyers_sell_exactly_the_stock, idempotent_decrements,
            operation_ids_are_forgotten, reservations, expired_reservation_returns_stock,
            many_expired_holds_all_come_back, totals_past_the_maximum_are_refused,
            create_keeps_an_existing_item, bad_input_is_rejected);
    };
    (@seq $backend:expr; $($case:ident),* $(,)?) => {
        $(
            eprintln!("counter_suite: {}", stringify!($case));
            $crate::counter_suite::$case(($backend)(stringify!($case)).await).await;
        )*
    };
    (@cases $setup:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (_keep_alive, backend) = $setup.await;
                $crate::counter_suite::$case(backend).await;
            }
        )*
    };
}
