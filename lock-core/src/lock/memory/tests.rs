//! The table's sweep.
use super::*;

// On a paused clock: nothing expires before the sleep.
#[tokio::test(start_paused = true)]
async fn expired_locks_are_swept() {
    let table = LockTable::default();
    for i in 0..(2 * SWEEP_EVERY) {
        let name = Name::new(format!("n{i}")).unwrap();
        table.acquire(&AcquireRequest {
            kind: Kind::Plain,
            name: &name,
            token: "t",
            owner: None,
            lease: Duration::from_millis(1),
            fencing: false,
            waits: false,
        });
    }
    let peak = table.slots.lock().unwrap().capacity();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let name = Name::new("last").unwrap();
    for _ in 0..SWEEP_EVERY {
        table.acquire(&AcquireRequest {
            kind: Kind::Plain,
            name: &name,
            token: "t",
            owner: None,
            lease: Duration::from_secs(10),
            fencing: false,
            waits: false,
        });
    }
    let (stored, room) = {
        let slots = table.slots.lock().unwrap();
        (slots.len(), slots.capacity())
    };
    assert!(stored <= 2, "held {stored} entries");
    // The sweep gave back the room the expired locks took.
    assert!(
        peak >= SWEEP_EVERY as usize && room <= 16,
        "room for {room} entries, {peak} before the sweep"
    );
    assert_eq!(table.len(), 1);
}
