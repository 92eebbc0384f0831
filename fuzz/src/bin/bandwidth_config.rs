//! The bandwidth plugin's config (`Config::from_map`: rates and bursts from the config or
//! `runtimeConfig.bandwidth`, Go's case-insensitive keys). Invariant: an accepted limit has
//! both a rate and a burst, the burst in bytes below u32::MAX as the reference checks.
#![no_main]

use bandwidth::config;
use ferrocni_fuzz::{request, requests_per_verb, split_config};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (stdin, cni_args) = split_config(data);
    let Some(args) = request(stdin, &cni_args) else {
        return;
    };
    for args in requests_per_verb(&args) {
        let Ok(conf) = config::Config::from_map(&args.config) else {
            continue;
        };
        let _ = conf.limits.is_empty();
        for limit in [&conf.limits.ingress, &conf.limits.egress]
            .into_iter()
            .flatten()
        {
            let again = config::validate(limit.rate_bits, limit.burst_bits, "ingress");
            assert!(
                matches!(again, Ok(Some(_))),
                "{limit:?} accepted, not valid again"
            );
        }
    }
});
