//! A scenario's row of the table, and the violations it found.

use std::collections::BTreeMap;
use std::sync::Once;
use std::time::{Duration, Instant};

use lock_tests::history::{Outcome, Reply, Violation, by_kind};

use crate::env::{Env, lock};

static HEADER: Once = Once::new();

/// Unavailability after each fault: from its end to the first answer
/// (of any operation invoked after it), in ms; the median and the worst.
fn recovery(ops: &[lock_tests::history::Op], healed: &[Instant]) -> (u128, u128) {
    let mut answered: Vec<(Instant, Instant)> = ops
        .iter()
        .filter(|op| matches!(op.outcome, Outcome::Ok(_)))
        .filter_map(|op| Some((op.invoke, op.complete?)))
        .collect();
    answered.sort_by_key(|&(_, done)| done);
    let mut waits: Vec<u128> = healed
        .iter()
        .filter_map(|&end| {
            let (_, done) = answered.iter().find(|&&(invoke, _)| invoke >= end)?;
            Some(done.duration_since(end).as_millis())
        })
        .collect();
    waits.sort_unstable();
    let p50 = waits.get(waits.len() / 2).copied().unwrap_or(0);
    (p50, waits.last().copied().unwrap_or(0))
}

/// Prints scenario `name`'s row, then the first few `violations` of each
/// kind and those only `reported` (documented as possible).
pub(crate) fn report(
    name: &str,
    base: u64,
    env: &Env,
    elapsed: Duration,
    violations: &[Violation],
    reported: &[Violation],
) {
    let ops = env.history.ops();
    let (mut ok, mut busy, mut unknown) = (0, 0, 0);
    for op in &ops {
        match &op.outcome {
            Outcome::Ok(Reply::Busy | Reply::Decision(false, _)) => busy += 1,
            Outcome::Ok(_) => ok += 1,
            Outcome::Unknown(_) | Outcome::Fail(_) => unknown += 1,
            Outcome::Pending => {}
        }
    }
    let faults: Vec<String> = lock(&env.faults)
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let mut kinds: Vec<String> = by_kind(violations)
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if kinds.is_empty() {
        kinds.push("none".to_owned());
    }
    if !reported.is_empty() {
        let lossy: Vec<String> = by_kind(reported)
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        kinds.push(format!("(reported, lossy failover: {})", lossy.join(", ")));
    }
    let from_processes = ops
        .iter()
        .filter(|op| op.worker >= crate::processes::FIRST)
        .count();
    let (p50, max) = recovery(&ops, &lock(&env.healed));
    HEADER.call_once(|| {
        println!(
            "nemesis | {:<17} | {:>10} | {:>5} | {:>6} {:>5} {:>5} {:>5} {:>5} | {:<52} | {:>13} | violations",
            "scenario", "seed", "secs", "ops", "ok", "busy", "unkn", "procs", "faults", "recovery ms"
        );
    });
    println!(
        "nemesis | {name:<17} | {base:>10} | {:>5.1} | {:>6} {ok:>5} {busy:>5} {unknown:>5} {from_processes:>5} | {:<52} | {:>13} | {}",
        elapsed.as_secs_f64(),
        ops.len(),
        faults.join(", "),
        format!("{p50} / {max}"),
        kinds.join(" ")
    );
    if std::env::var_os("NEMESIS_DEBUG").is_some() {
        for op in &ops {
            if let Outcome::Unknown(e) | Outcome::Fail(e) = &op.outcome {
                println!(
                    "  unknown {:?} after {:?}: {}",
                    op.call,
                    op.complete.map(|c| c - op.invoke),
                    e.text
                );
            }
        }
    }
    show(violations, "");
    show(reported, "reported: ");
}

/// The first few of each kind, then how many more.
fn show(violations: &[Violation], prefix: &str) {
    let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
    for v in violations {
        let n = shown.entry(v.kind).or_insert(0);
        *n += 1;
        if *n <= 5 {
            println!("  {prefix}{v}");
        }
    }
    for (kind, n) in shown.into_iter().filter(|&(_, n)| n > 5) {
        println!("  {prefix}[{kind}] ... and {} more", n - 5);
    }
}
