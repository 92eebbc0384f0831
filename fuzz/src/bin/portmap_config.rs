//! The portmap plugin's config (`config::parse`: port mappings from `runtimeConfig`, SNAT and
//! mark options, conditions, backend) and the container addresses it takes from
//! `prevResult`. Invariants: a refusal is a well-formed CNI error; an accepted mark bit is
//! one the kernel's 32-bit mark has.
#![no_main]

use ferrocni_fuzz::{check_error, request, requests_per_verb, split_config};
use libfuzzer_sys::fuzz_target;
use portmap::config;

fuzz_target!(|data: &[u8]| {
    let (stdin, cni_args) = split_config(data);
    let Some(args) = request(stdin, &cni_args) else {
        return;
    };
    for args in requests_per_verb(&args) {
        let conf = match config::parse(&args.config) {
            Ok(c) => c,
            Err(e) => {
                check_error(&e.into());
                continue;
            }
        };
        assert!(conf.mark_masq_bit <= 31, "mark bit {}", conf.mark_masq_bit);
        let backend = conf.backend_from_conditions();
        if let Err(e) = conf.check_backend_options(backend.or(conf.backend)) {
            check_error(&e.into());
        }
        let _ = (conf.conditions(false), conf.conditions(true));
        let _ = config::is_iptables_syntax(conf.conditions(false));
        if let Ok(Some(prev)) = args.prev_result() {
            let (v4, v6) = config::container_addresses(&prev, &args.ifname);
            assert!(v4.is_none_or(|n| n.is_ipv4()) && v6.is_none_or(|n| n.is_ipv6()));
        }
    }
});
