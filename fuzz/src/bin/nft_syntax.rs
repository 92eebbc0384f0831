//! The nft match syntax netkit reads from configs (portmap's `conditionsV4`/`conditionsV6`,
//! and the like): `Matches::parse` for `ip` and `ip6` tables, then the expressions and
//! anonymous sets a rule gets from it (`instantiate`). Invariant: a rule built from parsed
//! matches encodes into nf_tables attributes that decode back to the same rule.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netkit::fuzzing::encode_rule;
use netkit::netfilter::nf_tables::syntax::Matches;
use netkit::netfilter::nf_tables::{Family, Rule};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for (v6, family) in [(false, Family::Ip), (true, Family::Ip6)] {
        let Ok(matches) = Matches::parse(text, v6) else {
            continue;
        };
        let mut next_id = 1;
        let (_sets, exprs) = matches.instantiate(family, "nat", &mut next_id);
        let rule = Rule::new(family, "nat", "CNI-DN-fuzz", exprs);
        let back = Rule::decode(family, &encode_rule(&rule)).expect("a built rule decodes");
        assert_eq!(back, rule, "rule from {text:?} changed on encode -> decode");
    }
});
