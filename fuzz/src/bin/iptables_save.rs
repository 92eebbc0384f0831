//! `iptables -S` output as netkit reads it (`parse_rules`, `split_rule_line`), e.g. to find
//! and delete the rules of a dead pod. Invariant: the arguments of a rule, quoted for
//! iptables-restore (`quote_restore_token`, `restore::quote`) and split again, are the same
//! arguments: what was read is what is deleted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use netkit::netfilter::iptables::{parse_rules, quote_restore_token, split_rule_line};
use netkit::netfilter::restore;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(rules) = parse_rules(text) else {
        return;
    };
    for rule in rules {
        let _ = rule.target();
        let args: Vec<&String> = rule.spec.iter().collect();
        if args.iter().any(|a| a.contains(['\r', '\0'])) {
            continue;
        }
        let quoted: Vec<String> = args
            .iter()
            .map(|a| quote_restore_token(a).expect("a token of one line has no line break"))
            .collect();
        let back = split_rule_line(&quoted.join(" ")).expect("quoted arguments split");
        assert_eq!(back.iter().collect::<Vec<_>>(), args, "quote_restore_token");
        let quoted: Vec<String> = args.iter().map(|a| restore::quote(a)).collect();
        let back = split_rule_line(&quoted.join(" ")).expect("quoted arguments split");
        assert_eq!(back.iter().collect::<Vec<_>>(), args, "restore::quote");
    }
});
