//! The `tap` CNI plugin: a persistent tap device named `CNI_IFNAME` in the container netns
//! (for a VM in the pod to attach to), with its MAC, MTU, queues, owner and group, optionally a
//! port of a bridge inside the container, addressed by IPAM or left layer 2.

use tap::{config, error};

use attach::ipam::{ExecIpam, Ipam};
use attach::rollback::{self, Rollback};
use attach::{check, configure, link};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Plugin};
use netkit::tap::TapSpec;
use netkit::{Kernel, Link, LiveKernel, Netlink};

use config::NetConf;
use error::TapError;

struct Tap;

/// ADD, undone when it fails.
fn add<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<CniResult, TapError> {
    Ok(rollback::guarded("tap", |rb| {
        let r = add_steps(kernel, ipam, args, conf, rb)?;
        r.to_value(&args.cni_version)?;
        Ok(r)
    })?)
}

fn add_steps<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
    rb: &mut Rollback,
) -> Result<CniResult, TapError> {
    let (netns, mut cont) = link::open_netns_with(kernel, &args.netns)?;
    if !conf.selinux_context.is_empty() {
        eprintln!(
            "tap: selinuxContext {:?} is left to the host's policy (not applied)",
            conf.selinux_context
        );
    }
    // IPAM (when set) runs while the tap is made and set up.
    let (tap, ipam_result) = ipam.add_alongside_if_set(args, &conf.ipam_type, 0, rb, |rb| {
        let created = link::create_renamed(&mut cont, &args.ifname, "tap", |_, tmp| {
            let vnet_hdr = conf.vnet_hdr();
            kernel.create_tap(
                &netns,
                &TapSpec {
                    name: tmp,
                    multi_queue: conf.multi_queue,
                    vnet_hdr,
                    packet_info: vnet_hdr && !conf.multi_queue,
                    owner: conf.owner,
                    group: conf.group,
                },
            )
        })?;
        link::undo_delete_with(kernel, rb, &args.netns, &args.ifname);
        let index = created.index;
        if let Some(mtu) = conf.mtu {
            cont.set_link_mtu(index, mtu)?;
        }
        if let Some(mac) = conf.mac {
            cont.set_link_mac(index, &mac)?;
        }
        if !conf.bridge.is_empty() {
            let br = cont
                .link_by_name(&conf.bridge)
                .map_err(|source| TapError::FindBridge {
                    bridge: conf.bridge.clone(),
                    source,
                })?;
            cont.set_link_master(index, br.index)
                .map_err(|source| TapError::JoinBridge {
                    ifname: args.ifname.clone(),
                    bridge: conf.bridge.clone(),
                    source,
                })?;
        }
        cont.set_link_up(index).map_err(TapError::SetUp)?;
        Ok(cont.link_by_index(index)?)
    })?;

    let mut result = CniResult {
        cni_version: libcni::version::CURRENT.to_string(),
        interfaces: vec![link::container_interface(&tap, &args.netns)],
        ..Default::default()
    };
    if let Some(ipam_result) = ipam_result {
        result.ips = ipam_result.ips;
        result.routes = ipam_result.routes;
        configure::announce_addresses_with(kernel, &netns, &args.ifname, false);
        configure::configure_iface_with(kernel, &netns, &mut cont, &args.ifname, &result)?;
    }
    result.dns = conf.dns.clone();
    Ok(result)
}

/// The container interface is a tap device (the reference checks only its addressing).
fn check_tap(l: &Link) -> Result<(), TapError> {
    if l.is_kind("tun") {
        Ok(())
    } else {
        Err(TapError::NotTap(l.name.clone()))
    }
}

/// DEL: the tap and the lease, whatever is already gone.
fn del<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), TapError> {
    Ok(link::del_with_ipam_with(
        kernel,
        ipam,
        args,
        &conf.ipam_type,
        "tap",
    )?)
}

/// CHECK: the attachment, with the container link a tap.
fn check<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), TapError> {
    Ok(check::attachment_with(
        kernel,
        ipam,
        args,
        &conf.ipam_type,
        "Required prevResult missing",
        |_, l, _| Ok(check_tap(l)?),
    )?)
}

impl Plugin for Tap {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        Ok(add(&LiveKernel, &ExecIpam, args, &config::load(args)?)?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(del(&LiveKernel, &ExecIpam, args, &config::load(args)?)?)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(check(&LiveKernel, &ExecIpam, args, &config::load(args)?)?)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        ExecIpam.call_if_set(args, &conf.ipam_type, "GC")
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        ExecIpam.call_if_set(args, &conf.ipam_type, "STATUS")
    }
}

fn main() {
    libcni::skel::run(&Tap, "CNI tap plugin (ferrocni)");
}

#[cfg(test)]
mod tests {
    //! ADD, DEL and CHECK on netkit's fake kernel (which models the tap device), with an
    //! in-process IPAM: the order of operations, the rollback of a failure at every step, an
    //! idempotent DEL.
    use super::*;
    use attach::testing::{
        args_in, config_with, every_failure_rolls_back, ops, with_prev_result, FakeIpam,
    };
    use netkit::fake::{FakeKernel, FakeNs};
    use serde_json::{json, Value};

    const POD: &str = "/run/netns/pod";

    fn config(extra: Value) -> Value {
        config_with(
            json!({"cniVersion": "1.0.0", "name": "n", "type": "tap",
            "ipam": {"type": "fake-ipam"}}),
            extra,
        )
    }

    /// A pod netns holding a bridge br0 (made by an earlier plugin).
    fn setup() -> (FakeKernel, FakeIpam) {
        let kernel = FakeKernel::new();
        kernel.add_netns(POD);
        kernel.setup_link(POD, "br0", Some("bridge"), 1500);
        let ipam = FakeIpam::new(
            &kernel,
            json!({"cniVersion": "1.0.0", "ips": [{"address": "10.4.0.5/24"}]}),
        );
        (kernel, ipam)
    }

    fn args(config: Value) -> CmdArgs {
        args_in(POD, config)
    }

    fn run_add(kernel: &FakeKernel, ipam: &FakeIpam, config: Value) -> Result<CniResult, CniError> {
        let a = args(config);
        Ok(add(kernel, ipam, &a, &config::load(&a)?)?)
    }

    fn everything() -> Value {
        json!({"mtu": 1400, "mac": "02:00:00:00:00:07", "bridge": "br0",
            "owner": 1000, "group": 1000, "multiQueue": true})
    }

    #[test]
    fn add_makes_the_tap_sets_it_up_then_addresses_it() {
        let (kernel, ipam) = setup();
        kernel.reset();
        let r = run_add(&kernel, &ipam, config(everything())).unwrap();
        assert_eq!(
            ops(&kernel),
            [
                "open netns /run/netns/pod",
                "/run/netns/pod: socket",
                "/run/netns/pod: tap add veth* multi_queue vnet_hdr user 1000 group 1000",
                "/run/netns/pod: link get veth*",
                "/run/netns/pod: link set veth* name net1",
                "/run/netns/pod: link get net1",
                "/run/netns/pod: link set net1 mtu 1400",
                "/run/netns/pod: link set net1 address 02:00:00:00:00:07",
                "/run/netns/pod: link get br0",
                "/run/netns/pod: link set net1 master br0",
                "/run/netns/pod: link set net1 up",
                "/run/netns/pod: link get #3",
                "ipam ADD fake-ipam ctr1 net1",
                "/run/netns/pod: sysctl -w net/ipv4/conf/net1/arp_notify=1",
                "/run/netns/pod: link get net1",
                "/run/netns/pod: addr add 10.4.0.5/24 dev net1",
                "/run/netns/pod: link set net1 up",
            ]
        );
        let net1 = kernel.link(POD, "net1").unwrap();
        assert_eq!(
            (net1.kind.as_deref(), net1.mtu, net1.master, net1.up),
            (Some("tun"), 1400, Some(2), true)
        );
        assert_eq!(r.interfaces[0].mac, "02:00:00:00:00:07");
        assert_eq!(ipam.leases(), ["ctr1/net1"]);
    }

    #[test]
    fn a_failure_at_any_step_of_add_leaves_nothing() {
        for extra in [everything(), json!({"ipam": null})] {
            let steps = every_failure_rolls_back(
                setup,
                |k, i| run_add(k, i, config(extra.clone())),
                |op| op.contains("arp_notify="),
            );
            assert!(steps.len() >= 6, "{steps:#?}");
        }
    }

    #[test]
    fn a_missing_bridge_is_named_and_the_tap_removed() {
        let (kernel, ipam) = setup();
        let before = kernel.state();
        let e = run_add(&kernel, &ipam, config(json!({"bridge": "br9"}))).unwrap_err();
        assert!(e.msg.starts_with("failed to get bridge br9: "), "{}", e.msg);
        assert_eq!(kernel.state(), before);
    }

    #[test]
    fn del_is_idempotent() {
        let (kernel, ipam) = setup();
        let before = kernel.state();
        let r = run_add(&kernel, &ipam, config(json!({}))).unwrap();
        let a = with_prev_result(args(config(json!({}))), &r);
        let conf = config::load(&a).unwrap();
        del(&kernel, &ipam, &a, &conf).unwrap();
        assert_eq!(kernel.state(), before);
        assert!(ipam.leases().is_empty());
        del(&kernel, &ipam, &a, &conf).unwrap();
        kernel.remove_netns(POD);
        del(&kernel, &ipam, &a, &conf).unwrap();
    }

    #[test]
    fn check_wants_a_tap_with_its_addresses() {
        let (kernel, ipam) = setup();
        let r = run_add(&kernel, &ipam, config(json!({}))).unwrap();
        let a = with_prev_result(args(config(json!({}))), &r);
        let conf = config::load(&a).unwrap();
        check(&kernel, &ipam, &a, &conf).unwrap();
        let net1 = kernel.link(POD, "net1").unwrap();
        let mut pod = kernel.socket_in(&FakeNs(POD.into())).unwrap();
        pod.delete_address(net1.index, "10.4.0.5/24".parse().unwrap())
            .unwrap();
        let e = CniError::from(check(&kernel, &ipam, &a, &conf).unwrap_err());
        assert_eq!(e.msg, "Failed to match addr 10.4.0.5/24 on interface net1");
        // Another kind of link under the recorded name is not a tap.
        let mut other = r.clone();
        other.interfaces[0].name = "br0".into();
        other.interfaces[0].mac.clear();
        other.ips.clear();
        let mut a = with_prev_result(args(config(json!({"ipam": null}))), &other);
        a.ifname = "br0".into();
        let e = CniError::from(check(&kernel, &ipam, &a, &config::load(&a).unwrap()).unwrap_err());
        assert_eq!(e.msg, "Error: Container interface br0 not of type tap");
    }
}
