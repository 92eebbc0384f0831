//! The `dummy` CNI plugin: a dummy link named `CNI_IFNAME`, created in the container netns and
//! addressed by IPAM (required): an interface that holds addresses without carrying traffic.

use attach::conf::{self, IpamRef};
use attach::errors::{kernel, kernel_ctx};
use attach::rollback::{self, Rollback};
use attach::{check, configure, ipam, link};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Plugin};
use netkit::link_kinds::{dummy_message, NewLinkBase};
use netkit::packet_route::link::LinkMessage;
use netkit::Socket;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "NetConf")]
struct RawConf {
    ipam: Option<IpamRef>,
}

/// The IPAM type, which dummy requires.
fn load(args: &CmdArgs) -> Result<String, CniError> {
    let raw: RawConf = args
        .decode_config()
        .map_err(|e| CniError::internal(format!("failed to parse network config: {e}")))?;
    let ipam_type = conf::ipam_type(&raw.ipam);
    if ipam_type.is_empty() {
        // A plain error upstream, so code 999.
        return Err(CniError::internal(
            "dummy interface requires an IPAM configuration",
        ));
    }
    Ok(ipam_type)
}

struct Dummy;

/// ADD with the link request built by `message` (the dummy request; tests on a kernel without
/// the dummy driver pass a stand-in kind to exercise everything else).
fn add_with(
    args: &CmdArgs,
    ipam_type: &str,
    message: &dyn Fn(NewLinkBase<'_>) -> LinkMessage,
) -> Result<CniResult, CniError> {
    rollback::guarded("dummy", |rb| {
        let r = add_steps(args, ipam_type, message, rb)?;
        r.to_value(&args.cni_version)?;
        Ok(r)
    })
}

fn add_steps(
    args: &CmdArgs,
    ipam_type: &str,
    message: &dyn Fn(NewLinkBase<'_>) -> LinkMessage,
    rb: &mut Rollback,
) -> Result<CniResult, CniError> {
    let mut host = Socket::new().map_err(kernel)?;
    let (netns, mut cont) = link::open_netns(&args.netns)?;
    // Born under its final name (nothing on the host shares the container's names), while
    // IPAM runs.
    let (created, mut result) = ipam::add_alongside(args, ipam_type, 0, rb, |rb| {
        let base = NewLinkBase {
            name: &args.ifname,
            netns: Some(&netns),
            ..Default::default()
        };
        host.create_link(message(base))
            .map_err(|e| kernel_ctx(e, "failed to create dummy"))?;
        link::undo_delete(rb, &netns, &args.ifname);
        cont.link_by_name(&args.ifname)
            .map_err(|e| kernel_ctx(e, format!("failed to fetch dummy {:?}", args.ifname)))
    })?;
    result.cni_version = libcni::version::CURRENT.to_string();
    result.interfaces = vec![link::container_interface(&created, &args.netns)];
    configure::configure_iface(&netns, &mut cont, &args.ifname, &result)?;
    Ok(result)
}

impl Plugin for Dummy {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let ipam_type = load(args)?;
        add_with(args, &ipam_type, &|base| dummy_message(&base))
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        link::del_with_ipam(args, &load(args)?, "dummy")
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let ipam_type = load(args)?;
        check::attachment(
            args,
            &ipam_type,
            "dummy: Required prevResult missing",
            |_, l, _| {
                if !l.is_kind("dummy") {
                    return Err(CniError::internal(format!(
                        "Error: Container interface {} not of type dummy",
                        l.name
                    )));
                }
                if !l.is_up() {
                    return Err(CniError::internal(format!("Interface {} is down", l.name)));
                }
                Ok(())
            },
        )
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        ipam::call(args, &load(args)?, "GC")
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        ipam::call(args, &load(args)?, "STATUS")
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
        let e = load(&cmd_args(json!({"type": "dummy"}), "")).unwrap_err();
        assert_eq!(
            (e.code, e.msg.as_str()),
            (999, "dummy interface requires an IPAM configuration")
        );
        assert_eq!(
            load(&cmd_args(json!({"ipam": "x"}), "")).unwrap_err().code,
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
        let r = add_with(&args, "fake-ipam", &ifb_stand_in).unwrap();
        // A second ADD into the same netns and ifname fails at creation.
        let e = add_with(&args, "fake-ipam", &ifb_stand_in).unwrap_err();
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
        let e = add_with(&args, "fake-ipam", &ifb_stand_in).unwrap_err();
        drop(guard);
        assert_eq!(e.msg, "IPAM plugin returned missing IP config");
        assert_eq!(ipam_calls(empty.path()), ["ADD ctr1 net2", "DEL ctr1 net2"]);
        assert!(pod.link("net2").is_none());
    }
}
