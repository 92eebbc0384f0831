//! The ipvlan plugin's config (`config::load`), for every verb the config's version allows.
//! Invariant: a refusal is a well-formed CNI error.
#![no_main]

use ferrocni_fuzz::{load_per_verb, split_config};
use ipvlan::config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (stdin, cni_args) = split_config(data);
    load_per_verb(stdin, &cni_args, config::load, |_, _| {});
});
