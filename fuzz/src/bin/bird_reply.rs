//! A reply on BIRD's control socket, as the bgp backend reads it (`show protocols all`), then
//! the sessions and their changes it logs and counts; and the same bytes as lines of BIRD's log,
//! the refusals in them counted and logged. Invariant: reading is deterministic.
#![no_main]

use ferrocni_agent::backend::bgp::control::read_reply;
use ferrocni_agent::backend::bgp::refusal_log::{Refusals, Refused};
use ferrocni_agent::backend::bgp::status::{changes, parse_protocols};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut refusals = Refusals::default();
    for line in String::from_utf8_lossy(data).lines() {
        if let Some(r) = Refused::parse_line(line) {
            assert_eq!(Refused::parse_line(line).as_ref(), Some(&r));
            let _ = refusals.record(&r);
        }
    }
    let Ok(lines) = read_reply(&mut &data[..]) else {
        return;
    };
    let sessions = parse_protocols(&lines);
    assert_eq!(parse_protocols(&lines), sessions);
    let _ = changes(&[], &sessions);
    let _ = changes(&sessions, &[]);
});
