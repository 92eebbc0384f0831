//! The result cache's files (`cniCacheV1` records and legacy bare results), as the runtime
//! side reads them for DEL, CHECK and GC: `cache::decode_record`. Invariants: a V1 record
//! encodes (Go libcni's layout) and decodes back to itself; base64 round-trips.
#![no_main]

use ferrocni_fuzz::{check_json_round_trip, same_json};
use libcni::cache::{
    base64_decode, base64_encode, decode_record, encode_entry, CacheEntry, CachedRecord,
};
use libcni::gojson;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(record) = decode_record(data) else {
        return;
    };
    match &record {
        CachedRecord::V1(entry) => {
            let encoded = encode_entry(entry);
            let back = decode_record(&encoded).expect("our own cache record decodes");
            let CachedRecord::V1(back) = back else {
                panic!("our cache record read back as a legacy one");
            };
            let as_json = |e: &CacheEntry| gojson::parse(&encode_entry(e)).expect("ours parses");
            assert!(
                same_json(&as_json(&back), &as_json(entry)),
                "cache record changed on a round trip"
            );
            let text = base64_encode(&entry.config);
            assert_eq!(base64_decode(&text).as_deref(), Ok(&entry.config[..]));
        }
        CachedRecord::Legacy(result) => check_json_round_trip(result),
    }
    // A cached result is a prevResult for DEL: it must read as one or be refused cleanly.
    if let Some(result) = record.result() {
        let _ = libcni::result::CniResult::from_value(result);
    }
});
