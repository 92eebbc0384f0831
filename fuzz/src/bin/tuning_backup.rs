//! The tuning plugin's backups of link settings (`<dataDir>/<containerID>_<ifname>.json`, the
//! reference's shape plus our owner), read by DEL and GC. Invariants: a backup read back after
//! being written is the same; keeping older originals keeps every field either had.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tuning::backup;

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
