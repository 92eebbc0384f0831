//! Config-validation errors, plugin by plugin: the same invalid configs go through our binaries
//! and the reference's (`/usr/lib/cni`, Debian's 1.1.1), and the error objects must agree on
//! `code`, `msg` and `details`.
//!
//! The reference installed here is older than the latest upstream release. Where the latest
//! release words an error differently from 1.1.1 (or has a check 1.1.1 lacks), ours follows the
//! latest: the case carries the latest's text, ours must print exactly that, and what 1.1.1
//! printed is shown on stderr for the record. Plugins the reference package does not ship
//! (dummy, tap, flannel) are held to the latest's text the same way. The few conditions where ours
//! refuses a config that upstream accepts, or fails it earlier with its own words, are listed as
//! ours, with why; the reference is not run for those (it would go on and do real work).
//!
//! Every call runs with its "host" side in a throw-away netns holding a veth pair (`mst0`,
//! MTU 1500) as master, and a fresh container netns; files go to a temporary directory.

use std::path::{Path, PathBuf};
use std::process::Command;

use netns_tests::{require_root, run_with_stdin, Netns, TempDir};
use serde_json::{json, Value};

/// What ours must print for a case.
enum Expect {
    /// The same error as the reference (1.1.1 and the latest agree).
    Reference,
    /// The latest upstream release's error (code, msg, details), which 1.1.1 words otherwise
    /// or lacks.
    Latest(u64, &'static str, &'static str),
    /// Ours: upstream has no error for this (or one from the kernel, later); `why` says why
    /// ours refuses.
    Ours(u64, &'static str, &'static str),
}

struct Case {
    plugin: &'static str,
    what: &'static str,
    command: &'static str,
    /// The stdin text; `@DIR@` becomes a fresh temporary directory.
    stdin: String,
    cni_args: &'static str,
    /// Give the container netns an `eth0` (chained plugins act on an existing interface).
    with_eth0: bool,
    expect: Expect,
}

fn case(plugin: &'static str, what: &'static str, conf: Value, expect: Expect) -> Case {
    let mut conf = conf;
    let obj = conf.as_object_mut().expect("a case's config is an object");
    obj.entry("cniVersion").or_insert(json!("1.0.0"));
    obj.entry("name").or_insert(json!("errnet"));
    obj.entry("type").or_insert(json!(plugin));
    Case {
        plugin,
        what,
        command: "ADD",
        stdin: conf.to_string(),
        cni_args: "",
        with_eth0: false,
        expect,
    }
}

impl Case {
    fn args(mut self, cni_args: &'static str) -> Case {
        self.cni_args = cni_args;
        self
    }
    fn command(mut self, command: &'static str) -> Case {
        self.command = command;
        self
    }
    fn with_eth0(mut self) -> Case {
        self.with_eth0 = true;
        self
    }
}

/// `Latest` with no details.
fn latest(code: u64, msg: &'static str) -> Expect {
    Expect::Latest(code, msg, "")
}

use Expect::{Ours, Reference};

/// The versions the latest upstream release supports, as its skeleton lists them.
const ALL_VERSIONS: &str = r#"config is "9.9.9", plugin supports ["0.1.0" "0.2.0" "0.3.0" "0.3.1" "0.4.0" "1.0.0" "1.1.0"]"#;

fn host_local(extra: Value) -> Value {
    let mut ipam = json!({"type": "host-local", "dataDir": "@DIR@/ipam"});
    if let (Some(m), Some(e)) = (ipam.as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    ipam
}

fn prev() -> Value {
    json!({"cniVersion": "1.0.0",
           "interfaces": [{"name": "eth0", "sandbox": "@NETNS@"}],
           "ips": [{"address": "10.99.0.2/24", "interface": 0}]})
}

/// Every case, in the order they run.
fn cases() -> Vec<Case> {
    let mut v = static_cases();
    v.extend(link_cases());
    v.extend(ipam_cases());
    v.extend(chained_cases());
    v.extend(newer_plugin_cases());
    v.extend(odd_input_cases());
    v
}

/// The static IPAM plugin.
#[rustfmt::skip]
fn static_cases() -> Vec<Case> {
    vec![
        // --- static ---
        case("static", "address without prefix",
            json!({"ipam": {"type": "static", "addresses": [{"address": "10.10.0.1"}]}}), Reference),
        case("static", "address with prefix /33",
            json!({"ipam": {"type": "static", "addresses": [{"address": "10.10.0.1/33"}]}}), Reference),
        case("static", "CNI_ARGS IP without prefix", json!({"ipam": {"type": "static"}}), Reference)
            .args("IP=10.10.0.1"),
        case("static", "args.cni.ips entry without prefix",
            json!({"ipam": {"type": "static"}, "args": {"cni": {"ips": ["10.10.0.1"]}}}), Reference),
        case("static", "runtimeConfig.ips entry without prefix",
            json!({"ipam": {"type": "static"}, "runtimeConfig": {"ips": ["10.10.0.1"]}}), Reference),
        case("static", "bad gateway",
            json!({"ipam": {"type": "static", "addresses": [{"address": "10.10.0.1/24", "gateway": "x"}]}}),
            Reference),
        case("static", "bad CNI_ARGS GATEWAY", json!({"ipam": {"type": "static"}}), Reference)
            .args("IP=10.10.0.1/24;GATEWAY=foo"),
        case("static", "unknown CNI_ARGS",
            json!({"ipam": {"type": "static", "addresses": [{"address": "10.10.0.1/24"}]}}), Reference)
            .args("FOO=bar"),
        case("static", "no ipam", json!({}), Reference),
        case("static", "two IPv4 addresses at 0.2.0",
            json!({"cniVersion": "0.2.0", "ipam": {"type": "static",
                   "addresses": [{"address": "10.10.0.1/24"}, {"address": "10.10.1.1/24"}]}}), Reference),
        case("static", "bad route dst",
            json!({"ipam": {"type": "static", "addresses": [{"address": "10.10.0.1/24"}],
                   "routes": [{"dst": "foo"}]}}), Reference),
        case("static", "route without dst",
            json!({"ipam": {"type": "static", "addresses": [{"address": "10.10.0.1/24"}],
                   "routes": [{"gw": "10.10.0.254"}]}}),
            Ours(999, "route: missing dst", "upstream prints a route to <nil>, which no runtime can use")),
        case("static", "unknown cniVersion",
            json!({"cniVersion": "9.9.9", "ipam": {"type": "static"}}),
            Expect::Latest(1, "incompatible CNI versions", ALL_VERSIONS)),
    ]
}

/// The plugins that make the container's link: vlan, macvlan, ipvlan, bridge, ptp, host-device.
#[rustfmt::skip]
fn link_cases() -> Vec<Case> {
    let subnet = || host_local(json!({"subnet": "10.99.0.0/24"}));
    vec![
        // --- vlan ---
        case("vlan", "no master", json!({"vlanId": 5, "ipam": subnet()}),
            // 1.1.1 ends the sentence with a period; the latest does not.
            latest(999, "\"master\" field is required. It specifies the host interface name to create the VLAN for")),
        case("vlan", "VLAN ID 4095", json!({"master": "mst0", "vlanId": 4095, "ipam": subnet()}), Reference),
        case("vlan", "negative VLAN ID", json!({"master": "mst0", "vlanId": -1, "ipam": subnet()}), Reference),
        case("vlan", "MTU above the master's",
            json!({"master": "mst0", "vlanId": 5, "mtu": 9000, "ipam": subnet()}), Reference),
        case("vlan", "negative MTU", json!({"master": "mst0", "vlanId": 5, "mtu": -1, "ipam": subnet()}), Reference),
        case("vlan", "missing master",
            json!({"master": "nosuch0", "vlanId": 5, "ipam": subnet()}),
            Ours(999, "failed to lookup master \"nosuch0\": Link not found",
                "upstream prints netlink's bare \"Link not found\"; ours names the master")),
        // --- macvlan ---
        case("macvlan", "unknown mode", json!({"master": "mst0", "mode": "bogus", "ipam": subnet()}), Reference),
        case("macvlan", "MTU above the master's", json!({"master": "mst0", "mtu": 9000, "ipam": subnet()}), Reference),
        case("macvlan", "negative MTU", json!({"master": "mst0", "mtu": -5, "ipam": subnet()}), Reference),
        case("macvlan", "bad CNI_ARGS MAC", json!({"master": "mst0", "ipam": subnet()}), Reference)
            .args("IgnoreUnknown=1;MAC=zz"),
        case("macvlan", "bad runtimeConfig.mac",
            json!({"master": "mst0", "runtimeConfig": {"mac": "02:00"}, "ipam": subnet()}), Reference),
        case("macvlan", "unknown CNI_ARGS", json!({"master": "mst0", "ipam": subnet()}), Reference)
            .args("FOO=bar"),
        case("macvlan", "missing master", json!({"master": "nosuch0", "ipam": subnet()}),
            Ours(999, "failed to lookup master \"nosuch0\": Link not found",
                "upstream prints netlink's bare \"Link not found\"; ours names the master")),
        // --- ipvlan ---
        case("ipvlan", "unknown mode", json!({"master": "mst0", "mode": "bogus", "ipam": subnet()}), Reference),
        case("ipvlan", "missing master", json!({"master": "nosuch0", "ipam": subnet()}), Reference),
        case("ipvlan", "MTU above the master's", json!({"master": "mst0", "mtu": 9000, "ipam": subnet()}),
            Ours(999, "invalid MTU 9000, must be [0, master MTU(1500)]",
                "upstream leaves it to the kernel; ours checks it as macvlan and vlan do")),
        // --- bridge ---
        case("bridge", "VLAN ID 4095", json!({"bridge": "errbr0", "vlan": 4095, "ipam": subnet()}), Reference),
        case("bridge", "negative VLAN ID", json!({"bridge": "errbr0", "vlan": -1, "ipam": subnet()}), Reference),
        case("bridge", "bad CNI_ARGS MAC", json!({"bridge": "errbr0", "ipam": subnet()}), Reference)
            .args("IgnoreUnknown=1;MAC=zz"),
        case("bridge", "bad runtimeConfig.mac",
            json!({"bridge": "errbr0", "runtimeConfig": {"mac": "zz"}, "ipam": subnet()}), Reference),
        // 1.1.1 has no vlanTrunk.
        case("bridge", "trunk minID above maxID",
            json!({"bridge": "errbr0", "vlanTrunk": [{"minID": 10, "maxID": 5}], "ipam": subnet()}),
            latest(999, "minID is greater than maxID in trunk parameter")),
        case("bridge", "trunk ID 5000",
            json!({"bridge": "errbr0", "vlanTrunk": [{"id": 5000}], "ipam": subnet()}),
            latest(999, "incorrect trunk id parameter")),
        case("bridge", "trunk minID without maxID",
            json!({"bridge": "errbr0", "vlanTrunk": [{"minID": 10}], "ipam": subnet()}),
            latest(999, "minID and maxID should be configured simultaneously, maxID is missing")),
        case("bridge", "bridge name too long", json!({"bridge": "abcdefghijklmnopq", "ipam": subnet()}),
            Ours(999, "invalid bridge name: invalid interface name \"abcdefghijklmnopq\": interface name should be less than 16 characters",
                "upstream asks the kernel, which refuses with ERANGE after the veth work started")),
        case("bridge", "unknown cniVersion", json!({"cniVersion": "9.9.9", "bridge": "errbr0"}),
            Expect::Latest(1, "incompatible CNI versions", ALL_VERSIONS)),
        // --- ptp ---
        case("ptp", "no ipam", json!({}), Reference),
        case("ptp", "ipam without type", json!({"ipam": {}}), Reference),
        // --- host-device ---
        case("host-device", "no device selector", json!({}), Reference),
        case("host-device", "bad hwaddr", json!({"hwaddr": "zz"}), Reference),
        case("host-device", "missing device", json!({"device": "nosuch0"}), Reference),
        case("host-device", "no device with the hwaddr", json!({"hwaddr": "02:00:00:00:00:99"}), Reference),
    ]
}

/// host-local and dhcp.
#[rustfmt::skip]
fn ipam_cases() -> Vec<Case> {
    vec![
        // --- host-local ---
        case("host-local", "no ranges", json!({"ipam": host_local(json!({}))}), Reference),
        case("host-local", "bad subnet", json!({"ipam": host_local(json!({"subnet": "foo"}))}), Reference),
        case("host-local", "subnet with host bits",
            json!({"ipam": host_local(json!({"ranges": [[{"subnet": "10.1.0.5/24"}]]}))}), Reference),
        case("host-local", "rangeStart outside the subnet",
            json!({"ipam": host_local(json!({"subnet": "10.1.0.0/24", "rangeStart": "10.2.0.1"}))}), Reference),
        case("host-local", "rangeEnd outside the subnet",
            json!({"ipam": host_local(json!({"subnet": "10.1.0.0/24", "rangeEnd": "10.1.1.1"}))}), Reference),
        case("host-local", "overlapping range sets",
            json!({"ipam": host_local(json!({"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.1.0.0/16"}]]}))}),
            Reference),
        case("host-local", "mixed families in a range set",
            json!({"ipam": host_local(json!({"ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "fd00::/64"}]]}))}),
            Reference),
        case("host-local", "subnet too small",
            json!({"ipam": host_local(json!({"subnet": "10.1.0.0/31"}))}), Reference),
        case("host-local", "bad route", json!({"ipam": host_local(json!({"subnet": "10.1.0.0/24", "routes": [{"dst": "x"}]}))}),
            Reference),
        case("host-local", "bad CNI_ARGS IP", json!({"ipam": host_local(json!({"subnet": "10.1.0.0/24"}))}), Reference)
            .args("IP=foo"),
        case("host-local", "no ipam", json!({}), Reference),
        // --- dhcp ---
        case("dhcp", "no daemon", json!({"ipam": {"type": "dhcp", "daemonSocketPath": "@DIR@/dhcp.sock"}}), Reference),
    ]
}

/// The chained plugins: sbr, vrf, firewall, portmap, tuning, bandwidth.
#[rustfmt::skip]
fn chained_cases() -> Vec<Case> {
    vec![
        // --- sbr, vrf, firewall ---
        case("sbr", "no prevResult", json!({}), Reference).with_eth0(),
        case("vrf", "no vrfname", json!({"prevResult": prev()}), Reference).with_eth0(),
        case("vrf", "no prevResult", json!({"vrfname": "errvrf"}), Reference).with_eth0(),
        case("firewall", "no prevResult", json!({"backend": "iptables"}), Reference).with_eth0(),
        case("firewall", "unknown ingressPolicy",
            json!({"backend": "iptables", "ingressPolicy": "foo", "prevResult": prev()}), Reference).with_eth0(),
        case("firewall", "unknown backend", json!({"backend": "foo", "prevResult": prev()}),
            Ours(999, "unknown firewall backend \"foo\": expected \"iptables\" or \"firewalld\"",
                "upstream silently falls back to its default backend")).with_eth0(),
        // --- portmap ---
        case("portmap", "no prevResult",
            json!({"runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}}),
            Reference),
        case("portmap", "host port 0",
            json!({"runtimeConfig": {"portMappings": [{"hostPort": 0, "containerPort": 80, "protocol": "tcp"}]},
                   "prevResult": prev()}), Reference),
        case("portmap", "container port 0",
            json!({"runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 0, "protocol": "tcp"}]},
                   "prevResult": prev()}), Reference),
        case("portmap", "markMasqBit 40", json!({"markMasqBit": 40, "prevResult": prev()}), Reference),
        case("portmap", "markMasqBit with externalSetMarkChain",
            json!({"markMasqBit": 10, "externalSetMarkChain": "KUBE-MARK-MASQ", "prevResult": prev()}), Reference),
        // 1.1.1 has no backend field.
        case("portmap", "unknown backend", json!({"backend": "foo", "prevResult": prev()}),
            latest(999, "failed to parse config: unrecognized backend \"foo\"")),
        case("portmap", "iptables conditions with the nftables backend",
            json!({"backend": "nftables", "conditionsV4": ["-d", "10.0.0.1"], "prevResult": prev()}),
            latest(999, "failed to parse config: nftables backend was requested but configuration contains iptables-specific options [conditionsV4]")),
        case("portmap", "externalSetMarkChain with the nftables backend",
            json!({"backend": "nftables", "externalSetMarkChain": "KUBE-MARK-MASQ", "prevResult": prev()}),
            latest(999, "failed to parse config: nftables backend was requested but configuration contains iptables-specific options [externalSetMarkChain]")),
        case("portmap", "container port 70000",
            json!({"runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 70000, "protocol": "tcp"}]},
                   "prevResult": prev()}),
            Ours(999, "failed to parse config: Invalid container port number: 70000",
                "upstream hands the number to iptables, which refuses it after the chains were made")),
        // --- tuning ---
        case("tuning", "sysctl outside net",
            json!({"sysctl": {"kernel.foo": "1"}, "dataDir": "@DIR@/tuning", "prevResult": prev()}),
            // 1.1.1 names the key as given; the latest after turning dots into slashes.
            latest(999, "invalid net sysctl key: \"kernel/foo\"")).with_eth0(),
        case("tuning", "bad mac", json!({"mac": "zz", "dataDir": "@DIR@/tuning", "prevResult": prev()}), Reference)
            .with_eth0(),
        case("tuning", "no prevResult", json!({"mtu": 1400, "dataDir": "@DIR@/tuning"}), Reference).with_eth0(),
        case("tuning", "unknown cniVersion", json!({"cniVersion": "9.9.9"}),
            Expect::Latest(1, "incompatible CNI versions", ALL_VERSIONS)),
        // --- bandwidth ---
        case("bandwidth", "ingress burst without rate", json!({"ingressBurst": 100, "prevResult": prev()}), Reference)
            .with_eth0(),
        case("bandwidth", "egress burst without rate", json!({"egressBurst": 100, "prevResult": prev()}), Reference)
            .with_eth0(),
        case("bandwidth", "ingress rate without burst", json!({"ingressRate": 100, "prevResult": prev()}), Reference)
            .with_eth0(),
        case("bandwidth", "egress rate without burst", json!({"egressRate": 100, "prevResult": prev()}), Reference)
            .with_eth0(),
        case("bandwidth", "runtimeConfig burst without rate",
            json!({"runtimeConfig": {"bandwidth": {"ingressBurst": 100}}, "prevResult": prev()}), Reference)
            .with_eth0(),
        case("bandwidth", "burst above 4GB",
            json!({"ingressRate": 1000, "ingressBurst": 40_000_000_000_u64, "prevResult": prev()}), Reference)
            .with_eth0(),
        case("bandwidth", "negative rate", json!({"ingressRate": -1, "ingressBurst": 1000}), Reference),
        case("bandwidth", "runtimeConfig rate as a string",
            json!({"runtimeConfig": {"bandwidth": {"egressRate": "x", "egressBurst": 1}}}), Reference),
        case("bandwidth", "limits without prevResult", json!({"ingressRate": 1000, "ingressBurst": 1000}), Reference),
    ]
}

/// Plugins newer than 1.1.1 (dummy, tap) and flannel, which the reference package lacks.
#[rustfmt::skip]
fn newer_plugin_cases() -> Vec<Case> {
    vec![
        // --- dummy (not in 1.1.1) ---
        case("dummy", "no ipam", json!({}), latest(999, "dummy interface requires an IPAM configuration")),
        case("dummy", "ipam without type", json!({"ipam": {}}),
            latest(999, "dummy interface requires an IPAM configuration")),
        // --- tap (not in 1.1.1) ---
        case("tap", "bad mac", json!({"mac": "zz"}),
            latest(999, "invalid args zz for MAC addr: address zz: invalid MAC address")),
        case("tap", "unknown CNI_ARGS", json!({}), latest(999, "ARGS: unknown args [\"FOO=bar\"]"))
            .args("FOO=bar"),
        // --- flannel (flannel-io/cni-plugin, not in the reference package) ---
        case("flannel", "delegate with a name",
            json!({"subnetFile": "@DIR@/subnet.env", "dataDir": "@DIR@/flannel", "delegate": {"name": "x"}}),
            latest(999, "'delegate' dictionary must not have 'name' field, it'll be set by flannel")),
        case("flannel", "delegate with ipam",
            json!({"subnetFile": "@DIR@/subnet.env", "dataDir": "@DIR@/flannel", "delegate": {"ipam": {}}}),
            latest(999, "'delegate' dictionary must not have 'ipam' field, it'll be set by flannel")),
        case("flannel", "delegate type not a string",
            json!({"subnetFile": "@DIR@/subnet.env", "dataDir": "@DIR@/flannel", "delegate": {"type": 5}}),
            latest(999, "'delegate' dictionary, if present, must have (string) 'type' field")),
    ]
}

/// A field of the wrong JSON type in each plugin, and input only some releases check.
fn odd_input_cases() -> Vec<Case> {
    let subnet = || host_local(json!({"subnet": "10.99.0.0/24"}));
    let mut v = Vec::new();
    // A field of the wrong JSON type: Go's decoder words it, the plugin wraps it.
    for (plugin, conf) in [
        (
            "vlan",
            json!({"master": "mst0", "mtu": "1500", "ipam": subnet()}),
        ),
        (
            "bridge",
            json!({"bridge": "errbr0", "mtu": "x", "ipam": subnet()}),
        ),
        (
            "bridge",
            json!({"bridge": "errbr0", "isGateway": "yes", "ipam": subnet()}),
        ),
        ("ptp", json!({"mtu": "x", "ipam": subnet()})),
        (
            "macvlan",
            json!({"master": "mst0", "mtu": "x", "ipam": subnet()}),
        ),
        (
            "ipvlan",
            json!({"master": "mst0", "mtu": "x", "ipam": subnet()}),
        ),
        (
            "vrf",
            json!({"vrfname": "errvrf", "table": "x", "prevResult": prev()}),
        ),
        ("tuning", json!({"mtu": "x", "prevResult": prev()})),
        ("portmap", json!({"markMasqBit": "x", "prevResult": prev()})),
        ("host-device", json!({"device": 5})),
        ("ptp", json!({"ipam": "host-local"})),
        ("vlan", json!({"master": "mst0", "ipam": 5})),
        (
            "bridge",
            json!({"bridge": "errbr0", "dns": "x", "ipam": subnet()}),
        ),
        (
            "static",
            json!({"ipam": {"type": "static", "addresses": [{"address": 5}]}}),
        ),
        (
            "dhcp",
            json!({"ipam": {"type": "dhcp", "daemonSocketPath": 5}}),
        ),
        (
            "firewall",
            json!({"ingressPolicy": 5, "prevResult": prev()}),
        ),
    ] {
        v.push(case(plugin, "a field of the wrong type", conf, Reference).with_eth0());
    }
    // 1.1.1 has no linkInContainer.
    v.push(case("macvlan", "linkInContainer of the wrong type",
        json!({"master": "mst0", "linkInContainer": "yes", "ipam": subnet()}),
        latest(999, "failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.linkInContainer of type bool")));
    // A sysctl key written twice (raw text: JSON with a repeated key). 1.1.1 does not check.
    v.push(Case {
        plugin: "tuning",
        what: "duplicated sysctl key",
        command: "ADD",
        stdin: r#"{"cniVersion":"1.0.0","name":"errnet","type":"tuning","dataDir":"@DIR@/tuning",
                   "sysctl":{"net.ipv4.conf.all.log_martians":"1","net.ipv4.conf.all.log_martians":"0"},
                   "prevResult":@PREV@}"#
            .replace("@PREV@", &prev().to_string()),
        cni_args: "",
        with_eth0: true,
        expect: latest(999, "duplicated sysctl keys are not allowed"),
    });
    v.push(
        case(
            "tuning",
            "no prevResult on CHECK",
            json!({"dataDir": "@DIR@/tuning"}),
            Reference,
        )
        .command("CHECK"),
    );
    v
}

/// The error object a plugin printed: (code, msg, details), or the whole output when it did
/// not fail with one.
fn outcome(stdout: &[u8], stderr: &[u8], success: bool) -> Result<(u64, String, String), String> {
    let text = String::from_utf8_lossy(stdout);
    let v: Value = serde_json::from_str(&text).map_err(|_| {
        format!(
            "not an error object (exit ok: {success}): {text}{}",
            String::from_utf8_lossy(stderr)
        )
    })?;
    match (v["code"].as_u64(), v["msg"].as_str()) {
        (Some(code), Some(msg)) if !success => Ok((
            code,
            msg.to_string(),
            v["details"].as_str().unwrap_or_default().to_string(),
        )),
        _ => Err(format!("no error (exit ok: {success}): {text}")),
    }
}

/// One run of `case` through the plugin in `dir`, in fresh namespaces.
fn run(case: &Case, dir: &Path) -> Result<(u64, String, String), String> {
    let host = Netns::new("errh");
    host.exec_ok(&[
        "ip", "link", "add", "mst0", "mtu", "1500", "type", "veth", "peer", "name", "mst1",
    ]);
    host.exec_ok(&["ip", "link", "set", "lo", "up"]);
    let pod = Netns::new("errp");
    if case.with_eth0 {
        pod.exec_ok(&[
            "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
        ]);
    }
    let tmp = TempDir::new("err-ref");
    std::fs::write(
        tmp.join("subnet.env"),
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
    )
    .expect("write subnet.env");
    let stdin = case
        .stdin
        .replace("@DIR@", &tmp.path().display().to_string())
        .replace("@NETNS@", pod.path_str());
    let mut cmd: Command = host.command(&[dir.join(case.plugin).to_str().unwrap_or_default()]);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("CNI_COMMAND", case.command)
        .env("CNI_CONTAINERID", "errctr1")
        .env("CNI_NETNS", pod.path_str())
        .env("CNI_IFNAME", "eth0")
        .env("CNI_ARGS", case.cni_args)
        .env("CNI_PATH", dir);
    let out = run_with_stdin(&mut cmd, stdin.as_bytes());
    // Names of the namespaces and directories differ between runs.
    outcome(&out.stdout, &out.stderr, out.status.success()).map(|(code, msg, details)| {
        let clean = |s: String| {
            s.replace(&tmp.path().display().to_string(), "@DIR@")
                .replace(pod.path_str(), "@NETNS@")
        };
        (code, clean(msg), clean(details))
    })
}

fn our_dir() -> PathBuf {
    netns_tests::our_binary("bridge")
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

#[test]
fn config_errors_match_the_reference() {
    require_root!();
    let ours_dir = our_dir();
    let mut failures: Vec<String> = Vec::new();
    let mut compared = 0;
    for case in cases() {
        let label = format!("{} {} ({})", case.plugin, case.command, case.what);
        let ours = run(&case, &ours_dir);
        let reference_dir = netns_tests::reference_plugin_dir(&[case.plugin, "host-local"]);
        let wanted = match &case.expect {
            Expect::Reference => {
                let Some(dir) = reference_dir else {
                    eprintln!("{label}: no reference binary, not compared");
                    continue;
                };
                match run(&case, &dir) {
                    Ok(r) => r,
                    Err(e) => {
                        failures.push(format!(
                            "{label}: the reference did not fail as expected: {e}"
                        ));
                        continue;
                    }
                }
            }
            Expect::Latest(code, msg, details) => {
                if let Some(dir) = reference_dir {
                    match run(&case, &dir) {
                        Ok(r) => eprintln!("{label}: 1.1.1 prints {r:?}"),
                        Err(_) => eprintln!("{label}: 1.1.1 accepts the config"),
                    }
                }
                (*code, msg.to_string(), details.to_string())
            }
            Expect::Ours(code, msg, why) => {
                eprintln!("{label}: ours by design: {why}");
                (*code, msg.to_string(), String::new())
            }
        };
        compared += 1;
        match ours {
            Ok(o) if o == wanted => {}
            Ok(o) => failures.push(format!("{label}:\n    ours   {o:?}\n    wanted {wanted:?}")),
            Err(e) => failures.push(format!("{label}: ours {e}; wanted {wanted:?}")),
        }
    }
    assert!(compared > 0, "nothing compared");
    assert!(
        failures.is_empty(),
        "{} of {compared} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
