//! A reply on BIRD's control socket, as the bgp backend reads it (`show protocols all`), then
//! the sessions and their changes it logs and counts. Invariant: reading is deterministic.
#![no_main]

use ferrocni_agent::backend::bgp::control::read_reply;
use ferrocni_agent::backend::bgp::status::{changes, parse_protocols};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(lines) = read_reply(&mut &data[..]) else {
        return;
    };
    let sessions = parse_protocols(&lines);
    assert_eq!(parse_protocols(&lines), sessions);
    let _ = changes(&[], &sessions);
    let _ = changes(&sessions, &[]);
});
