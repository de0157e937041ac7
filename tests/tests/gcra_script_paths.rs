//! `gcra.lua`'s one-quota fast path (`if #KEYS == 1 then ... end`)
//! must answer and write exactly as the general path below it. Both run on
//! a real Redis with `TIME` fixed (the script is wrapped so that
//! `redis.call('TIME')` answers a chosen time, and every `SET` it makes is
//! recorded), over random states, costs (at most, 0, too large), tick
//! sizes (ns and us) and times (including a stored time in the future).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SCRIPT: &str = include_str!("../../lock-core/src/rate/algorithm/gcra.lua");

/// The script without its fast path: the general path alone.
fn general() -> String {
    let start = SCRIPT.find("if #KEYS == 1 then").expect("the fast path");
    let end_marker = "\nend\n";
    let end = start + SCRIPT[start..].find(end_marker).expect("its end") + end_marker.len();
    let body = &SCRIPT[start..end];
    assert!(body.contains("return string.format"), "cut the wrong block");
    format!("{}{}", &SCRIPT[..start], &SCRIPT[end..])
}

fn wrapped(body: &str, sec: u64, usec: u64) -> String {
    format!(
        "local real = redis\nlocal sets = {{}}\n\
         local redis = {{call = function(cmd, ...)\n\
           if cmd == 'TIME' then return {{'{sec}', '{usec}'}} end\n\
           if cmd == 'SET' then local a = {{...}}; table.remove(a, 1); table.insert(sets, table.concat(a, ' ')) end\n\
           return real.call(cmd, ...) end}}\n\
         local function body()\n{body}\nend\n\
         local r = body()\nreturn {{r, table.concat(sets, '|')}}\n"
    )
}

#[test]
fn the_one_quota_path_answers_and_writes_as_the_general_path() {
    let server = lock_tests::RedisServer::start();
    let mut conn = server.connection();
    let general = general();
    let mut rng = StdRng::seed_from_u64(0x6c7a);
    let mut compared = 0;
    for case in 0..3000 {
        let per_us: u64 = if rng.random_bool(0.5) { 1000 } else { 1 };
        let interval: u64 = match rng.random_range(0..6) {
            0 => 1,
            1 => 7,
            2 => 999_983,
            3 => 200_000_000,
            4 => 3_600_000_000,
            _ => rng.random_range(1..10_000_000_000u64),
        };
        let burst: u64 = match rng.random_range(0..4) {
            0 => 1,
            1 => 5,
            2 => 100,
            _ => rng.random_range(1..1000),
        };
        let window = interval * burst;
        if window > 1 << 53 {
            continue;
        }
        let sec = 1_700_000_000 + rng.random_range(0..1_000_000u64);
        let usec = rng.random_range(0..1_000_000u64);
        let now = sec * 1_000_000 + usec;
        let state: Option<String> = match rng.random_range(0..10) {
            0..=6 => {
                let ago: i64 = match rng.random_range(0..5) {
                    0 => 0,
                    1 => -1_000_000, // stored in the future (clock stepped back)
                    2 => rng.random_range(0..10_000_000),
                    3 => rng.random_range(0..100_000_000_000),
                    _ => 1,
                };
                let last = (now as i64 - ago) as u64;
                let debt = match rng.random_range(0..5) {
                    0 => 0,
                    1 => window,
                    2 => window.saturating_sub(interval),
                    3 => rng.random_range(0..=window),
                    _ => window + rng.random_range(0..=interval * 3),
                };
                Some(format!("{last} {debt}"))
            }
            7 => Some("garbage".into()),
            8 => Some("12 ab".into()),
            _ => None,
        };
        let mut cost: i64 = match rng.random_range(0..6) {
            0 => 0,
            1 => 1,
            2 => 2,
            3 => burst as i64,
            4 => burst as i64 + 1,
            _ => rng.random_range(0..=burst as i64),
        };
        if rng.random_bool(0.3) {
            cost = -cost.max(1); // at most
        }
        let mut answers = Vec::new();
        for (which, body) in [("fast", SCRIPT), ("general", general.as_str())] {
            let key = format!("k:{which}");
            let _: () = redis::cmd("DEL").arg(&key).query(&mut conn).unwrap();
            if let Some(state) = &state {
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg(state)
                    .query(&mut conn)
                    .unwrap();
            }
            let answer: Vec<String> = redis::cmd("EVAL")
                .arg(wrapped(body, sec, usec))
                .arg(1)
                .arg(&key)
                .arg(cost)
                .arg(interval)
                .arg(window)
                .arg(per_us)
                .query(&mut conn)
                .unwrap_or_else(|e| panic!("case {case}: {which}: {e}"));
            answers.push(answer);
        }
        assert_eq!(
            answers[0], answers[1],
            "case {case}: per_us={per_us} interval={interval} window={window} now={now} state={state:?} cost={cost}"
        );
        compared += 1;
    }
    assert!(compared > 2000);
}
