//! The tuning plugin's config (`config::parse`: sysctls with their allowlist, MAC, MTU,
//! promiscuous, allmulti, txQLen, from the config, `runtimeConfig` and CNI_ARGS), for every
//! verb its version allows. Invariant: a refusal is a well-formed CNI error.
#![no_main]

use ferrocni_fuzz::{load_per_verb, split_config};
use libfuzzer_sys::fuzz_target;
use tuning::config;

fuzz_target!(|data: &[u8]| {
    let (stdin, cni_args) = split_config(data);
    load_per_verb(stdin, &cni_args, config::parse, |_, conf| {
        let _ = conf.touches_link();
    });
});
