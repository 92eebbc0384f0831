//! The ipvlan plugin's config (`config::load`), for every verb the config's version allows.
//! Invariant: a refusal is a well-formed CNI error.
#![no_main]
// The plugin's own modules, compiled here as they are in its binary (whose parser is
// private to it); the target uses their parser, not all of them.
#![allow(dead_code)]

#[path = "../../../plugins/ipvlan/src/config.rs"]
mod config;
#[path = "../../../plugins/ipvlan/src/error.rs"]
mod error;
use ferrocni_fuzz::{load_per_verb, split_config};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (stdin, cni_args) = split_config(data);
    load_per_verb(stdin, &cni_args, config::load, |_, _| {});
});
