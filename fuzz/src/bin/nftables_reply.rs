//! nf_tables replies as netkit's nf_tables socket reads them: a datagram framed into
//! messages, each NEWRULE / NEWCHAIN body decoded (`Rule::decode`, `Chain::decode`,
//! expressions, comments in userdata). Invariant: a decoded rule or chain encodes into
//! attributes that decode back to the same value.
//!
//! Input: a datagram as the kernel sends it (captured `nft` dumps are seeds as they are).
#![no_main]

use libfuzzer_sys::fuzz_target;
use netkit::fuzzing::{encode_chain, encode_rule, nf_messages};
use netkit::netfilter::nf_tables::msg::{msg_type, udata_comment};
use netkit::netfilter::nf_tables::{Chain, Family, Rule};

/// The nfgenmsg header before an nf_tables message's attributes.
const NFGENMSG_LEN: usize = 4;
const SUBSYS_SHIFT: u16 = 8;

fn rule(family: Family, attrs: &[u8]) {
    let Some(rule) = Rule::decode(family, attrs) else {
        return;
    };
    let _ = (
        rule.comment(),
        rule.target_chain(),
        udata_comment(&rule.userdata),
    );
    let back = Rule::decode(family, &encode_rule(&rule)).expect("a rule encoded here decodes");
    assert_eq!(back, rule, "rule changed on encode -> decode");
}

fn chain(family: Family, attrs: &[u8]) {
    let Some(chain) = Chain::decode(family, attrs) else {
        return;
    };
    let back = Chain::decode(family, &encode_chain(&chain)).expect("a chain encoded here decodes");
    assert_eq!(back, chain, "chain changed on encode -> decode");
}

fuzz_target!(|data: &[u8]| {
    let Ok(messages) = nf_messages(data) else {
        return;
    };
    for (kind, _flags, _seq, payload) in messages {
        let Some(family) = payload.first().and_then(|&f| Family::from_u8(f)) else {
            continue;
        };
        let Some(attrs) = payload.get(NFGENMSG_LEN..) else {
            continue;
        };
        // Either the message type alone or the subsystem in the high byte (NFNL_SUBSYS_NFTABLES).
        match kind & ((1 << SUBSYS_SHIFT) - 1) {
            msg_type::NEWRULE => rule(family, attrs),
            msg_type::NEWCHAIN => chain(family, attrs),
            _ => {
                rule(family, attrs);
                chain(family, attrs);
            }
        }
    }
});
