//! CNI results of every version as plugins read them (`prevResult`, delegated IPAM output,
//! cached results): `CniResult::from_slice`, then printed in every supported version.
//! Invariant: a result printed in a version reads back and prints again identically.
#![no_main]

use ferrocni_fuzz::{check_error, check_json_round_trip};
use libcni::result::{convert, CniResult};
use libcni::version::SUPPORTED_VERSIONS;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let result = match CniResult::from_slice(data) {
        Ok(r) => r,
        Err(e) => return check_error(&e),
    };
    for version in SUPPORTED_VERSIONS.iter().chain(&[""]) {
        let printed = match result.to_value(version) {
            Ok(v) => v,
            Err(e) => {
                check_error(&e);
                continue;
            }
        };
        check_json_round_trip(&printed);
        let back = CniResult::from_value(&printed).unwrap_or_else(|e| {
            panic!("a result printed as {version:?} does not read back: {e:?}")
        });
        let again = back.to_value(version).expect("printed once, prints again");
        assert_eq!(
            again, printed,
            "result as {version:?} changed on a round trip"
        );
        assert_eq!(convert(&printed, version).ok(), Some(printed.clone()));
    }
});
