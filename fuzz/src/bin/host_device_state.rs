//! The host-device plugin's state files (what DEL restores: the device's original name and
//! addresses), decoded as the plugin decodes them (strict JSON: only ours are read). Invariant: a state read back after being
//! written is the same.
#![no_main]

use host_device::state;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(backup) = serde_json::from_slice::<state::Backup>(data) else {
        return;
    };
    let written = serde_json::to_vec(&backup).expect("a state encodes");
    let back: state::Backup = serde_json::from_slice(&written).expect("our state decodes");
    assert_eq!(back, backup, "host-device state changed on a round trip");
});
