//! DHCPv4 messages from a server as the dhcp daemon reads them (`Message::decode`: the fixed
//! header, options, RFC 3396 long options, option 52 overload into `sname`/`file`), and the
//! CNI result it builds from a DHCPACK (`lease::result_of`: mask, router, classless and
//! classful static routes). Invariants: a decoded message encodes into one that decodes back
//! the same; a result's address is the offered one, and the result survives printing.
//!
//! Input: a DHCP message as it arrives in a UDP datagram (captured replies are seeds).
#![no_main]

use dhcp::{lease, message};
use ferrocni_fuzz::check_json_round_trip;
use libcni::result::CniResult;
use libfuzzer_sys::fuzz_target;
use message::{opt, Message};

fuzz_target!(|data: &[u8]| {
    let Some(message) = Message::decode(data) else {
        return;
    };
    let back = Message::decode(&message.encode()).expect("an encoded message decodes");
    assert_eq!(back, message, "DHCP message changed on encode -> decode");
    let _ = (message.message_type(), message.u32_option(opt::LEASE_TIME));
    let _ = message.ipv4_option(opt::SERVER_ID);
    for priority in [0, 100] {
        let Ok(result) = lease::result_of(&message, priority) else {
            continue;
        };
        assert!(
            result
                .ips
                .iter()
                .any(|ip| ip.address.ip() == message.yiaddr),
            "result {result:?} does not hold the offered {}",
            message.yiaddr
        );
        let printed = result.to_value("1.0.0").expect("a DHCP result prints");
        check_json_round_trip(&printed);
        CniResult::from_value(&printed).expect("a printed DHCP result reads back");
    }
});
