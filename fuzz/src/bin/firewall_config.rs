//! The firewall plugin's config (`config::parse`: backend, chains, ingress policy) for every
//! verb its version allows. Invariant: a refusal is a well-formed CNI error.
#![no_main]
// The plugin's own modules, compiled here as they are in its binary (whose parser is
// private to it); the target uses their parser, not all of them.
#![allow(dead_code)]

#[path = "../../../plugins/firewall/src/config.rs"]
mod config;
#[path = "../../../plugins/firewall/src/error.rs"]
mod error;
#[path = "../../../plugins/firewall/src/record.rs"]
mod record;
use ferrocni_fuzz::{check_error, request, requests_per_verb, split_config};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (stdin, cni_args) = split_config(data);
    let Some(args) = request(stdin, &cni_args) else {
        return;
    };
    for args in requests_per_verb(&args) {
        if let Err(e) = config::parse(&args.config) {
            check_error(&e.into());
        }
    }
});
