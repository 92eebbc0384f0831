//! The host-device plugin's config (`config::load`, device chosen by name, MAC, kernel path,
//! PCI or auxiliary ID, looked up in /sys, read only), for every verb the config's version
//! allows, as DEL reads it (an unknown device ID taken as a PCI address). Invariant: a
//! refusal is a well-formed CNI error.
#![no_main]
// The plugin's own modules, compiled here as they are in its binary (whose parser is
// private to it); the target uses their parser, not all of them.
#![allow(dead_code)]

#[path = "../../../plugins/host-device/src/config.rs"]
mod config;
#[path = "../../../plugins/host-device/src/error.rs"]
mod error;
#[path = "../../../plugins/host-device/src/find.rs"]
mod find;
use ferrocni_fuzz::{load_per_verb, split_config};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (stdin, cni_args) = split_config(data);
    load_per_verb(stdin, &cni_args, config::load_lenient, |_, _| {});
});
