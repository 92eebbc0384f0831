//! The host-local binary carries the build stamp its library knows, so that a plugin linking
//! this build answers for it in-process (`libcni::linked`).

use std::path::Path;

#[test]
fn the_binary_carries_the_stamp_of_its_build() {
    let binary = Path::new(env!("CARGO_BIN_EXE_host-local"));
    assert_eq!(
        libcni::linked::file_stamp(binary),
        Some(host_local::plugin::STAMP)
    );
    assert!(host_local::plugin::LINKED.answers_for(binary));
}
