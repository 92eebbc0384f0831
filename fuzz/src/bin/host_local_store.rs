//! host-local's store files as it reads them: the index journal (`.ferrocni-index`: snapshot,
//! `+`/`-` records, `=` markers with fingerprint and checksum), lease files (`<ip>` holding
//! `<containerID>\r\n<ifname>`, or a legacy ID), `last_reserved_ip.<n>`, and the resolv.conf a
//! config names. Every parser runs on the same input. Invariants: a journal replayed, written
//! as a snapshot and replayed again gives the same index; a snapshot with its marker is valid
//! for its fingerprint; the search for an attachment's records finds every one of them; a
//! lease written for an attachment reads back as that attachment.
#![no_main]

use std::net::IpAddr;

use host_local::dns::parse_resolv_conf;
use host_local::store::index::{
    find_names, is_valid, marker, replay, snapshot, snapshot_len, Fingerprint, Index,
};
use host_local::store::lease::Owner;
use libfuzzer_sys::fuzz_target;

fn journal(data: &[u8]) {
    let mut index = Index::default();
    replay(data, &mut index);
    let snap = snapshot(&index);
    let mut again = Index::default();
    replay(&snap, &mut again);
    assert_eq!(
        again, index,
        "journal changed on replay -> snapshot -> replay"
    );
    let header_end = snap.iter().position(|&b| b == b'\n').map_or(0, |p| p + 1);
    assert_eq!(snapshot_len(&snap), snap.len() - header_end);
    let fp = Fingerprint {
        hints: 7,
        dev: 1,
        ino: 2,
        mtime: (3, 4),
        ctime: (5, 6),
        size: 4096,
        nlink: 2,
    };
    let mut sealed = snap.clone();
    sealed.extend(marker(&snap, Some(&fp)));
    assert!(is_valid(&sealed, &fp), "a sealed snapshot is not valid");
    let _ = is_valid(data, &fp);
    for (name, owner) in index.leases.iter().take(16) {
        let suffix = match owner {
            Owner::Attachment { cid, ifname } => format!("\tA\t{cid}\t{ifname}\n"),
            Owner::Legacy { cid } => format!("\tL\t{cid}\n"),
            _ => continue,
        };
        let mut found = Vec::new();
        find_names(&sealed, suffix.as_bytes(), &mut found);
        assert!(found.contains(name), "{name:?} of {owner:?} not found");
    }
}

fn lease(data: &[u8]) {
    match Owner::parse(data) {
        Owner::Attachment { cid, ifname } => {
            let written = Owner::content(&cid, &ifname);
            let back = Owner::parse(written.as_bytes());
            assert!(
                back.is_exactly(&cid, &ifname),
                "{written:?} read as {back:?}"
            );
        }
        Owner::Legacy { cid } => assert!(Owner::parse(cid.as_bytes()).is_legacy_of(&cid)),
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    journal(data);
    lease(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = text.trim().parse::<IpAddr>();
        let dns = parse_resolv_conf(text);
        assert!(dns.nameservers.iter().all(|n| !n.is_empty()));
    }
});
