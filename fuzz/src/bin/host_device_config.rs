//! The host-device plugin's config (`config::load`, device chosen by name, MAC, kernel path,
//! PCI or auxiliary ID, looked up in /sys, read only), for every verb the config's version
//! allows, as DEL reads it (an unknown device ID taken as a PCI address). Invariant: a
//! refusal is a well-formed CNI error.
#![no_main]

use ferrocni_fuzz::{load_per_verb, split_config};
use host_device::config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (stdin, cni_args) = split_config(data);
    load_per_verb(stdin, &cni_args, config::load_lenient, |_, _| {});
});
