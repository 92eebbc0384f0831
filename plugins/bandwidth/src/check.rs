//! CHECK: read every object back and list each one that differs from the configuration.

use netkit::packet_route::tc::{TcActionType, TcHandle, TcMirrorActionType};
use netkit::tc::{FilterAction, Qdisc, Tbf, ETH_P_ALL, INGRESS_HANDLE};
use netkit::{Link, Socket};

use crate::error::BandwidthError;
use crate::setup::{Plan, FILTER_CLASSID, FILTER_PRIORITY, TBF_HANDLE};

pub fn check(sock: &mut Socket, veth: &Link, plan: &Plan) -> Result<(), BandwidthError> {
    let mut problems = Vec::new();
    let host_qdiscs = sock.qdiscs(veth.index)?;
    let root = host_qdiscs.iter().find(|q| q.is_root());

    match &plan.ingress {
        Some(want) => check_tbf(
            &format!("ingress shaping on {}", veth.name),
            root,
            want,
            &mut problems,
        ),
        None => {
            if let Some(q) = root.filter(|q| q.kind == "tbf") {
                problems.push(format!(
                    "{} has a tbf root qdisc {} but no ingress limit is configured",
                    veth.name,
                    show(q.handle)
                ));
            }
        }
    }

    let ifb = sock.find_link(&plan.ifb_name)?;
    let ingress_qdisc = host_qdiscs.iter().find(|q| q.is_ingress());
    let Some(want) = &plan.egress else {
        if ifb.is_some() {
            problems.push(format!(
                "ifb {} exists but no egress limit is configured",
                plan.ifb_name
            ));
        }
        return finish(problems);
    };

    match &ifb {
        None => problems.push(format!(
            "ifb {} for egress shaping is missing",
            plan.ifb_name
        )),
        Some(ifb) => {
            if !ifb.is_kind("ifb") {
                problems.push(format!(
                    "{} is a {} link, not an ifb",
                    ifb.name,
                    ifb.kind.as_deref().unwrap_or("plain")
                ));
            }
            if !ifb.is_up() {
                problems.push(format!("ifb {} is down", ifb.name));
            }
            let qdiscs = sock.qdiscs(ifb.index)?;
            check_tbf(
                &format!("egress shaping on {}", ifb.name),
                qdiscs.iter().find(|q| q.is_root()),
                want,
                &mut problems,
            );
        }
    }

    match ingress_qdisc {
        None => problems.push(format!(
            "{} has no ingress qdisc (ffff:) to redirect egress traffic",
            veth.name
        )),
        Some(q) if q.handle != INGRESS_HANDLE => problems.push(format!(
            "ingress qdisc on {} has handle {}, expected ffff:0",
            veth.name,
            show(q.handle)
        )),
        Some(_) => check_filter(sock, veth, ifb.as_ref().map(|l| l.index), &mut problems)?,
    }
    finish(problems)
}

fn finish(problems: Vec<String>) -> Result<(), BandwidthError> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(BandwidthError::Mismatch(problems))
    }
}

fn show(h: TcHandle) -> String {
    format!("{:x}:{:x}", h.major, h.minor)
}

/// Compares a root qdisc with the TBF the configuration asks for (the kernel reports rate,
/// limit and buffer back exactly as they were sent).
fn check_tbf(what: &str, root: Option<&Qdisc>, want: &Tbf, problems: &mut Vec<String>) {
    let Some(q) = root else {
        problems.push(format!("{what}: no root qdisc"));
        return;
    };
    if q.kind != "tbf" {
        problems.push(format!("{what}: root qdisc is {}, expected tbf", q.kind));
        return;
    }
    if q.handle != TBF_HANDLE {
        problems.push(format!(
            "{what}: tbf handle is {}, expected 1:0",
            show(q.handle)
        ));
    }
    let Some(got) = q.tbf else {
        problems.push(format!("{what}: tbf parameters could not be read"));
        return;
    };
    if got.rate != want.rate {
        problems.push(format!(
            "{what}: tbf rate is {} bytes/s, expected {}",
            got.rate, want.rate
        ));
    }
    if got.buffer != want.buffer {
        problems.push(format!(
            "{what}: tbf buffer is {} ticks, expected {}",
            got.buffer, want.buffer
        ));
    }
    if got.limit != want.limit {
        problems.push(format!(
            "{what}: tbf limit is {} bytes, expected {}",
            got.limit, want.limit
        ));
    }
}

/// One u32 match-all filter at priority 1 redirecting everything to the IFB. A second
/// redirect action (the reference installs two) is unreachable after a "stolen" verdict
/// and is accepted so CHECK passes on state the reference created.
fn check_filter(
    sock: &mut Socket,
    veth: &Link,
    ifb_index: Option<u32>,
    problems: &mut Vec<String>,
) -> Result<(), BandwidthError> {
    let filters = sock.u32_filters(veth.index, INGRESS_HANDLE)?;
    let ours: Vec<_> = filters
        .iter()
        .filter(|f| f.priority == FILTER_PRIORITY)
        .collect();
    let what = format!("redirect filter on {}", veth.name);
    let f = match ours.as_slice() {
        [] => {
            problems.push(format!(
                "{what}: no u32 filter at priority {FILTER_PRIORITY} under ffff:"
            ));
            return Ok(());
        }
        [f] => f,
        many => {
            problems.push(format!(
                "{what}: {} u32 filters at priority {FILTER_PRIORITY}, expected 1",
                many.len()
            ));
            return Ok(());
        }
    };
    if f.protocol != ETH_P_ALL {
        problems.push(format!(
            "{what}: protocol is 0x{:04x}, expected all (0x0003)",
            f.protocol
        ));
    }
    if !f.matches_all() {
        problems.push(format!("{what}: selector does not match every packet"));
    }
    if f.classid != Some(FILTER_CLASSID) {
        problems.push(format!(
            "{what}: flowid is {}, expected 1:1",
            f.classid.map(show).unwrap_or_else(|| "unset".into())
        ));
    }
    let Some(target) = ifb_index else {
        return Ok(());
    };
    let is_redirect_to_ifb = |a: &FilterAction| matches!(a, FilterAction::Mirred { mode: TcMirrorActionType::EgressRedir, ifindex, .. } if *ifindex == target);
    match f.actions.first() {
        None => problems.push(format!("{what}: no action")),
        Some(first) => {
            if !is_redirect_to_ifb(first) {
                problems.push(format!("{what}: first action is {first:?}, expected mirred egress redirect to ifindex {target}"));
            } else if !matches!(
                first,
                FilterAction::Mirred {
                    verdict: TcActionType::Stolen,
                    ..
                }
            ) {
                problems.push(format!("{what}: redirect verdict is not \"stolen\""));
            }
            if f.actions.iter().skip(1).any(|a| !is_redirect_to_ifb(a)) {
                problems.push(format!(
                    "{what}: unexpected extra actions {:?}",
                    &f.actions[1..]
                ));
            }
        }
    }
    Ok(())
}
