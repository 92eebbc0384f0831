//! The firewall plugin's config (`config::parse`: backend, chains, ingress policy) for every
//! verb its version allows. Invariant: a refusal is a well-formed CNI error.
#![no_main]

use ferrocni_fuzz::{check_error, request, requests_per_verb, split_config};
use firewall::config;
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
