//! The tuning plugin's backups of link settings (`<dataDir>/<containerID>_<ifname>.json`, the
//! reference's shape plus our owner), read by DEL and GC. Invariants: a backup read back after
//! being written is the same; keeping older originals keeps every field either had.
#![no_main]
// The plugin's own modules, compiled here as they are in its binary (whose parser is
// private to it); the target uses their parser, not all of them.
#![allow(dead_code)]

#[path = "../../../plugins/tuning/src/backup.rs"]
mod backup;
#[path = "../../../plugins/tuning/src/error.rs"]
mod error;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(backup) = libcni::gojson::from_slice::<backup::Backup>(data) else {
        return;
    };
    let written = serde_json::to_vec_pretty(&backup).expect("a backup encodes");
    let back: backup::Backup = libcni::gojson::from_slice(&written).expect("our backup decodes");
    assert_eq!(back, backup, "tuning backup changed on a round trip");
    let merged = backup::Backup::default().keep_originals_from(backup.clone());
    assert_eq!(merged.mtu, backup.mtu);
    assert_eq!(merged.mac, backup.mac);
});
