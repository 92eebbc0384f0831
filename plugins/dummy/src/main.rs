//! The `dummy` CNI plugin: a dummy link named `CNI_IFNAME`, created in the container netns and
//! addressed by IPAM (required): an interface that holds addresses without carrying traffic.

mod error;

use attach::conf::{self, IpamRef};
use attach::ipam::{ExecIpam, Ipam};
use attach::rollback::{self, Rollback};
use attach::{check, configure, link};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Plugin};
use netkit::link_kinds::{dummy_message, NewLinkBase};
use netkit::packet_route::link::LinkMessage;
use netkit::{Kernel, LiveKernel, Netlink};
use serde::Deserialize;

use crate::error::DummyError;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "NetConf")]
struct RawConf {
    ipam: Option<IpamRef>,
}

/// The IPAM type, which dummy requires.
fn load(args: &CmdArgs) -> Result<String, DummyError> {
    let raw: RawConf = args.decode_config().map_err(DummyError::Decode)?;
    let ipam_type = conf::ipam_type(&raw.ipam);
    if ipam_type.is_empty() {
        return Err(DummyError::IpamRequired);
    }
    Ok(ipam_type)
}

struct Dummy;

/// ADD with the link request built by `message` (the dummy request; tests on a kernel without
/// the dummy driver pass a stand-in kind to exercise everything else), undone when it fails.
fn add_with<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    ipam_type: &str,
    message: &dyn Fn(NewLinkBase<'_>) -> LinkMessage,
) -> Result<CniResult, DummyError> {
    Ok(rollback::guarded("dummy", |rb| {
        let r = add_steps(kernel, ipam, args, ipam_type, message, rb)?;
        r.to_value(&args.cni_version)?;
        Ok(r)
    })?)
}

fn add_steps<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    ipam_type: &str,
    message: &dyn Fn(NewLinkBase<'_>) -> LinkMessage,
    rb: &mut Rollback,
) -> Result<CniResult, DummyError> {
    let mut host = kernel.socket()?;
    let (netns, mut cont) = link::open_netns_with(kernel, &args.netns)?;
    // Born under its final name (nothing on the host shares the container's names), while
    // IPAM runs.
    let (created, mut result) = ipam.add_alongside(args, ipam_type, 0, rb, |rb| {
        let base = NewLinkBase {
            name: &args.ifname,
            ..Default::default()
        };
        host.add_link(message(base), Some(&netns))
            .map_err(|e| CniError::from(DummyError::Create(e)))?;
        link::undo_delete_with(kernel, rb, &args.netns, &args.ifname);
        cont.link_by_name(&args.ifname).map_err(|source| {
            DummyError::Fetch {
                ifname: args.ifname.clone(),
                source,
            }
            .into()
        })
    })?;
    result.cni_version = libcni::version::CURRENT.to_string();
    result.interfaces = vec![link::container_interface(&created, &args.netns)];
    configure::configure_iface_with(kernel, &netns, &mut cont, &args.ifname, &result)?;
    Ok(result)
}

/// DEL: the container link and the lease, whatever is already gone.
fn del<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    ipam_type: &str,
) -> Result<(), DummyError> {
    Ok(link::del_with_ipam_with(
        kernel, ipam, args, ipam_type, "dummy",
    )?)
}

/// CHECK: the attachment, with the container link a dummy that is up.
fn check<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    ipam_type: &str,
) -> Result<(), DummyError> {
    Ok(check::attachment_with(
        kernel,
        ipam,
        args,
        ipam_type,
        "dummy: Required prevResult missing",
        |_, l, _| {
            if !l.is_kind("dummy") {
                return Err(DummyError::NotDummy(l.name.clone()).into());
            }
            if !l.is_up() {
                return Err(DummyError::Down(l.name.clone()).into());
            }
            Ok(())
        },
    )?)
}

impl Plugin for Dummy {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let ipam_type = load(args)?;
        Ok(add_with(
            &LiveKernel,
            &ExecIpam,
            args,
            &ipam_type,
            &|base| dummy_message(&base),
        )?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(del(&LiveKernel, &ExecIpam, args, &load(args)?)?)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(check(&LiveKernel, &ExecIpam, args, &load(args)?)?)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        ExecIpam.call(args, &load(args)?, "GC")
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        ExecIpam.call(args, &load(args)?, "STATUS")
    }
}

fn main() {
    libcni::skel::run(&Dummy, "CNI dummy plugin (ferrocni)");
}

#[cfg(test)]
mod tests {
    //! The ADD flow above the kernel on a kernel without the dummy driver: the same code with
    //! an ifb (which needs no parent either) standing in for the dummy request (whose bytes
    //! `netkit::link_kinds` checks against iproute2's), with a scripted IPAM.
    use super::*;
    use attach::testing::{cmd_args, cmd_args_in, fake_ipam, ipam_calls};
    use netkit::packet_core::DefaultNla;
    use netkit::packet_route::link::{LinkAttribute, LinkInfo};
    use netns_tests::{require_root, Netns, TempDir};
    use serde_json::json;

    fn ifb_stand_in(base: NewLinkBase<'_>) -> LinkMessage {
        let mut m = dummy_message(&base);
        for a in &mut m.attributes {
            if let LinkAttribute::LinkInfo(i) = a {
                i[0] = LinkInfo::Other(DefaultNla::new(1, b"ifb".to_vec()));
            }
        }
        m
    }

    #[test]
    fn ipam_is_required() {
        let e = CniError::from(load(&cmd_args(json!({"type": "dummy"}), "")).unwrap_err());
        assert_eq!(
            (e.code, e.msg.as_str()),
            (999, "dummy interface requires an IPAM configuration")
        );
        assert_eq!(
            CniError::from(load(&cmd_args(json!({"ipam": "x"}), "")).unwrap_err()).code,
            999
        );
        assert_eq!(
            load(&cmd_args(json!({"IPAM": {"Type": "static"}}), "")).unwrap(),
            "static"
        );
    }

    #[test]
    fn add_addresses_the_link_keeps_ipam_dns_and_rolls_back() {
        require_root!();
        let host = Netns::new("dm-ut-h");
        let pod = Netns::new("dm-ut-p");
        let dir = TempDir::new("dm-ut-ipam");
        let result = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.7.2.5/32"}],
            "dns": {"nameservers": ["10.7.2.53"]}});
        let path = fake_ipam(dir.path(), &result);
        let args = cmd_args_in(
            pod.path(),
            &path,
            json!({"cniVersion": "1.0.0", "name": "n",
            "type": "dummy", "ipam": {"type": "fake-ipam"}}),
        );
        let guard = netkit::Netns::open(host.path()).unwrap().enter().unwrap();
        let r = add_with(&LiveKernel, &ExecIpam, &args, "fake-ipam", &ifb_stand_in).unwrap();
        // A second ADD into the same netns and ifname fails at creation.
        let e = CniError::from(
            add_with(&LiveKernel, &ExecIpam, &args, "fake-ipam", &ifb_stand_in).unwrap_err(),
        );
        drop(guard);
        assert_eq!(r.dns.nameservers, ["10.7.2.53"]);
        assert_eq!(
            (r.interfaces[0].name.as_str(), r.ips[0].interface),
            ("net1", Some(0))
        );
        assert!(pod.addresses("net1").contains(&"10.7.2.5/32".to_string()));
        assert!(pod.link_is_up("net1"));
        assert!(e.msg.starts_with("failed to create dummy"), "{}", e.msg);
        // An IPAM plugin that may need the link (any but host-local and static) runs after
        // the link is made: the failed creation never reached it.
        assert_eq!(ipam_calls(dir.path()), ["ADD ctr1 net1"]);

        // IPAM returns no IP: the new link goes and the lease is released.
        let empty = TempDir::new("dm-ut-empty");
        let path = fake_ipam(empty.path(), &json!({"cniVersion": "1.0.0"}));
        let mut args = cmd_args_in(
            pod.path(),
            &path,
            json!({"cniVersion": "1.0.0", "name": "n"}),
        );
        args.ifname = "net2".into();
        let guard = netkit::Netns::open(host.path()).unwrap().enter().unwrap();
        let e = CniError::from(
            add_with(&LiveKernel, &ExecIpam, &args, "fake-ipam", &ifb_stand_in).unwrap_err(),
        );
        drop(guard);
        assert_eq!(e.msg, "IPAM plugin returned missing IP config");
        assert_eq!(ipam_calls(empty.path()), ["ADD ctr1 net2", "DEL ctr1 net2"]);
        assert!(pod.link("net2").is_none());
    }
}

#[cfg(test)]
mod fake_kernel_tests {
    //! ADD, DEL and CHECK on netkit's fake kernel (which models the dummy link itself), with
    //! an in-process IPAM: the order of operations, the rollback of a failure at every step,
    //! an idempotent DEL.
    use super::*;
    use attach::testing::{args_in, every_failure_rolls_back, ops, with_prev_result, FakeIpam};
    use netkit::fake::{FakeKernel, FakeNs};
    use serde_json::json;

    const POD: &str = "/run/netns/pod";

    fn setup() -> (FakeKernel, FakeIpam) {
        let kernel = FakeKernel::new();
        kernel.add_netns(POD);
        let ipam = FakeIpam::new(
            &kernel,
            json!({"cniVersion": "1.0.0", "ips": [{"address": "10.3.0.5/32"}],
                "routes": [{"dst": "10.3.1.0/24"}]}),
        );
        (kernel, ipam)
    }

    fn args() -> CmdArgs {
        args_in(
            POD,
            json!({"cniVersion": "1.0.0", "name": "n", "type": "dummy",
                "ipam": {"type": "fake-ipam"}}),
        )
    }

    fn run_add(kernel: &FakeKernel, ipam: &FakeIpam) -> Result<CniResult, CniError> {
        Ok(add_with(kernel, ipam, &args(), "fake-ipam", &|base| {
            dummy_message(&base)
        })?)
    }

    #[test]
    fn add_creates_the_dummy_in_the_container_then_addresses_and_routes_it() {
        let (kernel, ipam) = setup();
        kernel.reset();
        let r = run_add(&kernel, &ipam).unwrap();
        assert_eq!(
            ops(&kernel),
            [
                "host: socket",
                "open netns /run/netns/pod",
                "/run/netns/pod: socket",
                "host: link add net1 netns /run/netns/pod type dummy",
                "/run/netns/pod: link get net1",
                "ipam ADD fake-ipam ctr1 net1",
                "/run/netns/pod: link get net1",
                "/run/netns/pod: addr add 10.3.0.5/32 dev net1",
                "/run/netns/pod: link set net1 up",
                "/run/netns/pod: route prepend 10.3.1.0/24 dev net1 table 254",
            ]
        );
        let net1 = kernel.link(POD, "net1").unwrap();
        assert_eq!((net1.kind.as_deref(), net1.up), (Some("dummy"), true));
        assert_eq!(r.interfaces[0].sandbox, POD);
        assert_eq!(ipam.leases(), ["ctr1/net1"]);
    }

    #[test]
    fn a_failure_at_any_step_of_add_leaves_nothing() {
        let steps = every_failure_rolls_back(setup, run_add, |_| false);
        assert_eq!(steps.len(), 10);
        assert!(steps[3]
            .error
            .as_ref()
            .unwrap()
            .msg
            .starts_with("failed to create dummy: host: link add net1"));
    }

    #[test]
    fn a_name_taken_in_the_container_fails_without_touching_it() {
        let (kernel, ipam) = setup();
        kernel.setup_link(POD, "net1", Some("veth"), 1500);
        let before = kernel.state();
        let e = run_add(&kernel, &ipam).unwrap_err();
        assert!(e.msg.starts_with("failed to create dummy"), "{}", e.msg);
        assert_eq!(kernel.state(), before);
        assert!(ipam.leases().is_empty());
    }

    #[test]
    fn del_is_idempotent() {
        let (kernel, ipam) = setup();
        let before = kernel.state();
        let r = run_add(&kernel, &ipam).unwrap();
        let a = with_prev_result(args(), &r);
        del(&kernel, &ipam, &a, "fake-ipam").unwrap();
        assert_eq!(kernel.state(), before);
        assert!(ipam.leases().is_empty());
        del(&kernel, &ipam, &a, "fake-ipam").unwrap();
        kernel.remove_netns(POD);
        del(&kernel, &ipam, &a, "fake-ipam").unwrap();
    }

    #[test]
    fn check_wants_an_up_dummy_with_its_addresses() {
        let (kernel, ipam) = setup();
        let r = run_add(&kernel, &ipam).unwrap();
        let a = with_prev_result(args(), &r);
        check(&kernel, &ipam, &a, "fake-ipam").unwrap();
        let net1 = kernel.link(POD, "net1").unwrap();
        let mut pod = kernel.socket_in(&FakeNs(POD.into())).unwrap();
        pod.set_link_down(net1.index).unwrap();
        let e = CniError::from(check(&kernel, &ipam, &a, "fake-ipam").unwrap_err());
        assert_eq!(e.msg, "Interface net1 is down");
        pod.delete_link(net1.index).unwrap();
        kernel.setup_link(POD, "net1", Some("veth"), 1500);
        let e = CniError::from(check(&kernel, &ipam, &a, "fake-ipam").unwrap_err());
        assert!(e.msg.starts_with("Interface net1 Mac"), "{}", e.msg);
        let mut without_mac = r.clone();
        without_mac.interfaces[0].mac.clear();
        let a = with_prev_result(args(), &without_mac);
        let e = CniError::from(check(&kernel, &ipam, &a, "fake-ipam").unwrap_err());
        assert_eq!(e.msg, "Error: Container interface net1 not of type dummy");
    }
}
