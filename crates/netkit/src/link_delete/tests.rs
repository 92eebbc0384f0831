use super::*;

/// An RTM_DELLINK notification: header, ifinfomsg of `family` and `index`, IFLA_IFNAME.
fn notification(kind: u16, family: u8, index: u32, name: &str) -> Vec<u8> {
    let mut payload = vec![0u8; 16];
    payload[0] = family;
    payload[4..8].copy_from_slice(&(index as i32).to_ne_bytes());
    let attr_len = 4 + name.len() + 1;
    payload.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    payload.extend_from_slice(&IFLA_IFNAME.to_ne_bytes());
    payload.extend_from_slice(name.as_bytes());
    payload.push(0);
    payload.resize(payload.len().next_multiple_of(4), 0);
    let mut msg = Vec::new();
    msg.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&[0u8; 10]);
    msg.extend_from_slice(&payload);
    msg
}

#[test]
fn the_links_own_deletion_is_recognised_by_index_and_by_name() {
    let d = notification(RTM_DELLINK, 0, 7, "eth0");
    assert!(announces_deletion(&d, Target::Index(7)));
    assert!(announces_deletion(&d, Target::Name("eth0")));
    assert!(!announces_deletion(&d, Target::Index(8)));
    assert!(!announces_deletion(&d, Target::Name("eth1")));
    assert!(!announces_deletion(&d, Target::Name("eth")));
}

#[test]
fn other_messages_are_not_taken_for_the_deletion() {
    // A change of the link, and a bridge saying the port left (AF_BRIDGE).
    let new = notification(16, 0, 7, "eth0");
    let port_left = notification(RTM_DELLINK, libc::AF_BRIDGE as u8, 7, "eth0");
    assert!(!announces_deletion(&new, Target::Index(7)));
    assert!(!announces_deletion(&port_left, Target::Index(7)));
    // Several messages in one datagram: the deletion after others is found.
    let mut batch = new.clone();
    batch.extend_from_slice(&port_left);
    batch.extend_from_slice(&notification(RTM_DELLINK, 0, 9, "veth1"));
    assert!(announces_deletion(&batch, Target::Name("veth1")));
    assert!(!announces_deletion(&batch, Target::Index(7)));
}

#[test]
fn truncated_or_malformed_datagrams_announce_nothing() {
    let d = notification(RTM_DELLINK, 0, 7, "eth0");
    for cut in 0..d.len() {
        // Never panics; a cut inside the name cannot match it whole.
        let _ = announces_deletion(&d[..cut], Target::Index(7));
        if cut < d.len() - 4 {
            assert!(
                !announces_deletion(&d[..cut], Target::Name("eth0")),
                "cut {cut}"
            );
        }
    }
    let mut bad = d.clone();
    bad[0..4].copy_from_slice(&2u32.to_ne_bytes());
    assert!(!announces_deletion(&bad, Target::Index(7)));
}

mod kernel {
    use super::*;
    use crate::link::VethSpec;
    use crate::skip_unless_root;
    use crate::testutil::TestNetns;
    use rtnetlink::LinkUnspec;

    fn by_name(name: &str) -> LinkMessage {
        LinkUnspec::new_with_name(name).build()
    }

    #[test]
    fn a_detached_deletion_returns_with_both_veth_ends_unlisted() {
        skip_unless_root!();
        let host = TestNetns::new("nk-dh");
        let pod = TestNetns::new("nk-dp");
        let pod_ns = pod.open().unwrap();
        let mut h = host.socket().unwrap();
        let spec = VethSpec {
            name: "dv0",
            peer_name: "eth0",
            peer_netns: Some(&pod_ns),
            ..Default::default()
        };
        h.create_veth(&spec).unwrap();
        let mut p = pod.socket().unwrap();
        delete_with(&mut p, by_name("eth0"), Target::Name("eth0"), true).unwrap();
        // Both ends are gone the moment the call returns, whatever the child still waits for.
        assert!(p.find_link("eth0").unwrap().is_none());
        assert!(h.find_link("dv0").unwrap().is_none());
        // The name is free again at once.
        h.create_veth(&VethSpec {
            name: "dv0",
            peer_name: "dv1",
            ..Default::default()
        })
        .unwrap();
        let index = h.link_by_name("dv0").unwrap().index;
        let msg = LinkUnspec::new_with_index(index).build();
        delete_with(&mut h, msg, Target::Index(index), true).unwrap();
        assert!(h.find_link("dv1").unwrap().is_none());
    }

    #[test]
    fn a_detached_deletion_reports_the_kernels_refusal() {
        skip_unless_root!();
        let ns = TestNetns::new("nk-de");
        let mut s = ns.socket().unwrap();
        let missing =
            delete_with(&mut s, by_name("nope0"), Target::Name("nope0"), true).unwrap_err();
        assert!(missing.is_not_found(), "{missing}");
        // lo cannot be deleted: the error ACK comes back through the child.
        let lo = delete_with(&mut s, by_name("lo"), Target::Name("lo"), true).unwrap_err();
        assert!(!lo.is_not_found(), "{lo}");
        assert!(lo.errno().is_some(), "{lo}");
        assert!(s.find_link("lo").unwrap().is_some());
    }
}
