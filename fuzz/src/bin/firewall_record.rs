//! The firewall plugin's per-attachment records (`<dataDir>/<network>/<containerID>:<ifname>`,
//! read by DEL and GC), decoded as the plugin decodes them. Invariant: a record read back
//! after being written is the same record.
#![no_main]

use firewall::record;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(record) = libcni::gojson::from_slice::<record::Record>(data) else {
        return;
    };
    let _ = record.backend();
    let written = serde_json::to_vec(&record).expect("a record encodes");
    let back: record::Record = libcni::gojson::from_slice(&written).expect("our record decodes");
    assert_eq!(back, record, "firewall record changed on a round trip");
});
