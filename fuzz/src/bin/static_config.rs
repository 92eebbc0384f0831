//! The static IPAM plugin's config (`config::load`: addresses, routes and DNS from the config,
//! `runtimeConfig`, `args` and CNI_ARGS `IP`/`GATEWAY`), for every verb its version allows.
//! Invariant: a refusal is a well-formed CNI error.
#![no_main]

use ferrocni_fuzz::{load_per_verb, split_config};
use libfuzzer_sys::fuzz_target;
use static_ipam::config;

fuzz_target!(|data: &[u8]| {
    let (stdin, cni_args) = split_config(data);
    load_per_verb(stdin, &cni_args, config::load, |_, _| {});
});
