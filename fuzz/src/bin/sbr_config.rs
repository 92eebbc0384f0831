//! The sbr plugin's config (`config::parse`: table, gateways) and the addresses it takes
//! from `prevResult` for the interface, for every verb its version allows. Invariant: a
//! refusal is a well-formed CNI error.
#![no_main]

use ferrocni_fuzz::{check_error, load_per_verb, split_config};
use libfuzzer_sys::fuzz_target;
use sbr::config;

fuzz_target!(|data: &[u8]| {
    let (stdin, cni_args) = split_config(data);
    load_per_verb(stdin, &cni_args, config::parse, |args, conf| {
        if let Ok(Some(prev)) = args.prev_result() {
            match config::addresses_of(&prev, &args.ifname) {
                Ok(ips) => ips.iter().for_each(|ip| {
                    let _ = conf.gateway_for(ip);
                }),
                Err(e) => check_error(&e.into()),
            }
        }
    });
});
