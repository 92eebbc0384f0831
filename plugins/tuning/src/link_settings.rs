//! The link attributes tuning manages on the container interface: capture (for the backup),
//! apply, restore and CHECK.

use netkit::packet_route::link::LinkFlags;
use netkit::{Link, Socket};

use crate::backup::Backup;
use crate::config::Tuning;
use crate::error::TuningError;

/// The current values of the attributes `tuning` configures.
pub fn capture(link: &Link, tuning: &Tuning) -> Backup {
    Backup {
        mac: tuning.mac.map(|_| link.mac_string()),
        promisc: tuning.promisc.then(|| link.is_promisc()),
        mtu: tuning.mtu.map(|_| link.mtu),
        allmulti: tuning
            .allmulti
            .map(|_| link.flags.contains(LinkFlags::Allmulti)),
        tx_qlen: tuning.tx_qlen.map(|_| link.txqueuelen),
        owner: None,
    }
}

/// Applies the configured attributes in the reference's order (mac, promisc, mtu, allmulti,
/// txqueuelen).
pub fn apply(sock: &mut Socket, link: &Link, tuning: &Tuning) -> Result<(), TuningError> {
    if let Some(mac) = &tuning.mac {
        sock.set_link_mac(link.index, mac)?;
    }
    if tuning.promisc {
        sock.set_link_promisc(link.index, true)?;
    }
    if let Some(mtu) = tuning.mtu {
        sock.set_link_mtu(link.index, mtu)?;
    }
    if let Some(on) = tuning.allmulti {
        set_allmulti(sock, link.index, on)?;
    }
    if let Some(qlen) = tuning.tx_qlen {
        sock.set_link_txqueuelen(link.index, qlen)?;
    }
    Ok(())
}

fn set_allmulti(sock: &mut Socket, index: u32, on: bool) -> Result<(), TuningError> {
    let what = if on {
        "set allmulticast on"
    } else {
        "set allmulticast off"
    };
    sock.set_link(index, what, |b| b.allmulticast(on))
        .map_err(TuningError::from)
}

/// Puts back every value recorded in `backup`; keeps going after a failure and reports the
/// first one.
pub fn restore(sock: &mut Socket, link: &Link, backup: &Backup) -> Result<(), TuningError> {
    let mut first_error = None;
    let mut note = |r: Result<(), TuningError>| {
        if let Err(e) = r {
            eprintln!("tuning: {e}");
            first_error.get_or_insert(e);
        }
    };
    if let Some(mtu) = backup.mtu {
        note(
            sock.set_link_mtu(link.index, mtu)
                .map_err(TuningError::from),
        );
    }
    if let Some(mac) = &backup.mac {
        match netkit::link::parse_mac(mac) {
            Ok(m) => note(sock.set_link_mac(link.index, &m).map_err(TuningError::from)),
            Err(e) => note(Err(TuningError::BackupMac(e))),
        }
    }
    if let Some(on) = backup.promisc {
        note(
            sock.set_link_promisc(link.index, on)
                .map_err(TuningError::from),
        );
    }
    if let Some(on) = backup.allmulti {
        note(set_allmulti(sock, link.index, on));
    }
    if let Some(qlen) = backup.tx_qlen {
        note(
            sock.set_link_txqueuelen(link.index, qlen)
                .map_err(TuningError::from),
        );
    }
    first_error.map_or(Ok(()), Err)
}

/// CHECK: the link carries the configured values. `promisc: false` means "must be off", as in
/// the reference.
pub fn verify(link: &Link, tuning: &Tuning) -> Result<(), TuningError> {
    let fail = |what: &'static str, have: String, want: String| {
        Err(TuningError::LinkMismatch {
            what,
            ifname: link.name.clone(),
            have,
            want,
        })
    };
    if let Some(mac) = &tuning.mac {
        let want = netkit::link::format_mac(mac);
        if link.mac_string() != want {
            return fail("MAC address", link.mac_string(), want);
        }
    }
    if link.is_promisc() != tuning.promisc {
        return fail(
            "promiscuous mode",
            link.is_promisc().to_string(),
            tuning.promisc.to_string(),
        );
    }
    if let Some(mtu) = tuning.mtu {
        if link.mtu != mtu {
            return fail("MTU", link.mtu.to_string(), mtu.to_string());
        }
    }
    if let Some(on) = tuning.allmulti {
        let have = link.flags.contains(LinkFlags::Allmulti);
        if have != on {
            return fail("allmulticast", have.to_string(), on.to_string());
        }
    }
    if let Some(qlen) = tuning.tx_qlen {
        if link.txqueuelen != qlen {
            return fail("txqueuelen", link.txqueuelen.to_string(), qlen.to_string());
        }
    }
    Ok(())
}
