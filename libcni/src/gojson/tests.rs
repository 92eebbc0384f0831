use super::*;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;

#[derive(Debug, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
struct Mapping {
    host_port: i64,
    container_port: i64,
    #[serde(default)]
    protocol: Option<String>,
    #[serde(default, rename = "hostIP")]
    host_ip: Option<String>,
}

#[derive(Debug, Deserialize, PartialEq, Default)]
struct Bandwidth {
    #[serde(default, rename = "ingressRate")]
    ingress_rate: u64,
    #[serde(default, rename = "ingressBurst")]
    ingress_burst: u64,
    #[serde(default, rename = "egressRate")]
    egress_rate: u64,
    #[serde(default, rename = "egressBurst")]
    egress_burst: u64,
}

#[derive(Debug, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
struct Runtime {
    #[serde(default)]
    port_mappings: Vec<Mapping>,
    #[serde(default)]
    bandwidth: Option<Bandwidth>,
    #[serde(default)]
    ips: Vec<String>,
    #[serde(default)]
    mac: Option<String>,
}

#[derive(Debug, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
struct Conf {
    #[serde(default)]
    name: String,
    #[serde(default = "yes")]
    snat: bool,
    #[serde(default)]
    runtime_config: Runtime,
    #[serde(default)]
    sysctl: BTreeMap<String, String>,
}

fn yes() -> bool {
    true
}

fn conf(v: Value) -> Conf {
    from_value(&v).unwrap()
}

#[test]
fn containerd_port_mappings_with_go_field_names() {
    // containerd 1.6 (go-cni's PortMapping has no JSON tags).
    let c = conf(json!({"name": "k8s", "runtimeConfig": {"portMappings": [
        {"HostPort": 18080, "ContainerPort": 8080, "Protocol": "tcp", "HostIP": ""}
    ]}}));
    assert_eq!(
        c.runtime_config.port_mappings,
        vec![Mapping {
            host_port: 18080,
            container_port: 8080,
            protocol: Some("tcp".into()),
            host_ip: Some(String::new()),
        }]
    );
}

#[test]
fn crio_and_podman_port_mappings_with_json_tags() {
    // CRI-O (ocicni) and podman use the CONVENTIONS.md names.
    let c = conf(json!({"runtimeConfig": {"portMappings": [
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp", "hostIP": "127.0.0.1"}
    ]}}));
    assert_eq!(c.runtime_config.port_mappings[0].host_port, 8080);
    assert_eq!(
        c.runtime_config.port_mappings[0].host_ip.as_deref(),
        Some("127.0.0.1")
    );
}

#[test]
fn containerd_bandwidth_with_max_uint32_bursts() {
    let c = conf(json!({"runtimeConfig": {"bandwidth": {
        "IngressRate": 10000000u64, "IngressBurst": 4294967295u64,
        "EgressRate": 20000000u64, "EgressBurst": 4294967295u64
    }}}));
    assert_eq!(
        c.runtime_config.bandwidth,
        Some(Bandwidth {
            ingress_rate: 10_000_000,
            ingress_burst: 4_294_967_295,
            egress_rate: 20_000_000,
            egress_burst: 4_294_967_295,
        })
    );
}

#[test]
fn duplicate_keys_last_wins_also_across_case() {
    let v = parse(br#"{"name":"a","snat":false,"name":"b"}"#).unwrap();
    assert_eq!(conf(v.clone()).name, "b");
    assert!(!conf(v).snat);
    // Folded duplicates resolve in document order.
    let v = parse(br#"{"runtimeConfig":{"Mac":"aa:aa:aa:aa:aa:aa","MAC":"bb:bb:bb:bb:bb:bb"}}"#)
        .unwrap();
    assert_eq!(
        conf(v).runtime_config.mac.as_deref(),
        Some("bb:bb:bb:bb:bb:bb")
    );
    // The exact key holds its field whatever folded keys come after it.
    let v = parse(br#"{"runtimeConfig":{"mac":"aa:aa:aa:aa:aa:aa","MAC":"bb:bb:bb:bb:bb:bb"}}"#)
        .unwrap();
    assert_eq!(
        conf(v).runtime_config.mac.as_deref(),
        Some("aa:aa:aa:aa:aa:aa")
    );
    let v = parse(br#"{"Name":"x","name":"y","Name":"z"}"#).unwrap();
    assert_eq!(conf(v).name, "y");
    let v = parse(br#"{"NAME":"x","Name":"z"}"#).unwrap();
    assert_eq!(conf(v).name, "z");
}

#[test]
fn null_leaves_defaults_and_decodes_as_zero_elsewhere() {
    let c = conf(json!({"name": null, "snat": null, "runtimeConfig": null}));
    assert_eq!(
        c,
        Conf {
            snat: true,
            ..Default::default()
        }
    );
    let c = conf(json!({"runtimeConfig": {"ips": null, "portMappings": [
        {"hostPort": 1, "containerPort": 2, "protocol": null}
    ]}}));
    assert!(c.runtime_config.ips.is_empty());
    assert_eq!(c.runtime_config.port_mappings[0].protocol, None);
    // A null list element is the element type's zero value, as in Go.
    let ips: Vec<String> = from_value(&json!(["10.0.0.1", null])).unwrap();
    assert_eq!(ips, vec!["10.0.0.1".to_string(), String::new()]);
    // A null map value too.
    let c = conf(json!({"sysctl": {"net.ipv4.ip_forward": null}}));
    assert_eq!(
        c.sysctl.get("net.ipv4.ip_forward").map(String::as_str),
        Some("")
    );
}

#[test]
fn unknown_keys_are_ignored_and_map_keys_stay_exact() {
    let c = conf(json!({"name": "n", "whatever": {"deep": [1, 2]}, "sysctl": {"Net.Key": "1"}}));
    assert_eq!(c.name, "n");
    assert!(c.sysctl.contains_key("Net.Key"));
}

#[test]
fn exact_field_name_beats_folded_match() {
    #[derive(Deserialize)]
    struct Two {
        #[serde(default)]
        abc: u32,
        #[serde(default, rename = "ABC")]
        upper: u32,
    }
    let t: Two = from_value(&json!({"ABC": 2, "abc": 1})).unwrap();
    assert_eq!((t.abc, t.upper), (1, 2));
    // A key matching neither exactly goes to the first field that folds to it.
    let t: Two = from_value(&json!({"Abc": 7})).unwrap();
    assert_eq!((t.abc, t.upper), (7, 0));
}

/// Go's struct has fields whose names differ only in case; ours models only one of them.
/// Each key lands on its own field: the exact key, in whatever order, never the twin's.
#[test]
fn case_twin_of_an_unmodelled_go_field_does_not_displace_the_exact_key() {
    #[derive(Debug, Deserialize)]
    struct Address {
        #[serde(default)]
        address: String,
        #[serde(default)]
        gateway: Option<String>,
    }
    // What Go's json.Marshal writes for static IPAM's Address{AddressStr, Gateway, Address
    // net.IPNet, Version}: the tagged string and the untagged IPNet object.
    let marshalled = json!({
        "address": "10.10.0.1/24",
        "gateway": "10.10.0.254",
        "Address": {"IP": "10.10.0.1", "Mask": "////AA=="},
        "Version": "4"
    });
    let a: Address = from_value(&marshalled).unwrap();
    assert_eq!(a.address, "10.10.0.1/24");
    assert_eq!(a.gateway.as_deref(), Some("10.10.0.254"));
    let reversed = json!({"Address": {"IP": "10.10.0.1"}, "address": "10.10.0.1/24"});
    let a: Address = from_value(&reversed).unwrap();
    assert_eq!(a.address, "10.10.0.1/24");
    // Only a folded key: it is the field's.
    let a: Address = from_value(&json!({"ADDRESS": "10.1.0.1/16"})).unwrap();
    assert_eq!(a.address, "10.1.0.1/16");
    // get() chooses the same way.
    let obj = marshalled.as_object().unwrap();
    assert_eq!(get(obj, "address"), Some(&json!("10.10.0.1/24")));
    assert_eq!(get(obj, "version"), Some(&json!("4")));
}

#[test]
fn unicode_simple_folding_like_go() {
    assert!(fold_eq("HostPort", "hostport"));
    assert!(fold_eq("hoſtPort", "hostPort")); // long s folds to s
    assert!(fold_eq("\u{212A}ey", "key")); // Kelvin sign folds to k
    assert!(!fold_eq("hostPorts", "hostPort"));
    assert!(!fold_eq("", "a"));
}

#[test]
fn wrong_types_are_still_errors() {
    // Worded as Go's decoder words them (type_errors_are_worded_as_go_does).
    let e = from_value::<Conf>(&json!({"snat": "yes"})).unwrap_err();
    assert!(e.to_string().contains("cannot unmarshal string"), "{e}");
    let e = from_value::<Mapping>(&json!({"hostPort": 1.5, "containerPort": 1})).unwrap_err();
    assert!(e.to_string().contains("cannot unmarshal number 1.5"), "{e}");
    let e = from_value::<Bandwidth>(&json!({"ingressRate": -1})).unwrap_err();
    assert!(e.to_string().contains("cannot unmarshal number -1"), "{e}");
    // A missing required field is still reported.
    let e = from_value::<Mapping>(&json!({"containerPort": 1})).unwrap_err();
    assert!(e.to_string().contains("hostPort"), "{e}");
}

#[test]
fn get_follows_the_same_rules() {
    let v =
        parse(br#"{"RuntimeConfig":{"Bandwidth":{"x":1}},"ipMasq":null,"IPMASQ":true}"#).unwrap();
    let o = v.as_object().unwrap();
    let rt = get(o, "runtimeConfig").unwrap();
    assert!(get_in(rt, "bandwidth").is_some());
    assert_eq!(get(o, "ipMasq"), Some(&json!(true)));
    assert_eq!(get(o, "missing"), None);
}

#[test]
fn parse_keeps_the_last_duplicate_at_its_last_position() {
    let v = parse(br#"{"a":1,"b":2,"a":3}"#).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["b", "a"]);
    assert_eq!(v["a"], json!(3));
    assert!(parse(b"{\"a\":1} x").is_err());
    assert!(parse(b"[1,").is_err());
}

#[test]
fn enums_and_from_map() {
    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Backend {
        Iptables,
        Nftables,
    }
    #[derive(Debug, Deserialize)]
    struct C {
        backend: Backend,
    }
    let m = json!({"Backend": "nftables"});
    let c: C = from_map(m.as_object().unwrap()).unwrap();
    assert_eq!(c.backend, Backend::Nftables);
    assert!(from_map::<C>(json!({"backend": "pf"}).as_object().unwrap()).is_err());
    let _ = Backend::Iptables;
}

#[test]
fn huge_objects_with_many_duplicates_stay_linear() {
    let mut text = String::from("{");
    for i in 0..200_000 {
        text.push_str(&format!("\"Name\":\"{i}\",\"name\":\"{i}\","));
    }
    text.push_str("\"snat\":false}");
    let v = parse(text.as_bytes()).unwrap();
    let c = conf(v);
    assert_eq!(c.name, "199999");
}

#[test]
fn type_errors_are_worded_as_go_does() {
    #[derive(Debug, Deserialize)]
    #[serde(rename = "Address")]
    struct Address {
        #[allow(dead_code)]
        address: String,
    }
    #[derive(Debug, Deserialize)]
    #[serde(rename = "IPAMConfig")]
    struct Ipam {
        #[allow(dead_code)]
        addresses: Vec<Address>,
    }
    #[derive(Debug, Deserialize)]
    #[serde(rename = "NetConf", rename_all = "camelCase")]
    struct Conf {
        #[serde(default)]
        #[allow(dead_code)]
        mtu: i64,
        #[serde(default)]
        #[allow(dead_code)]
        table: Option<u32>,
        #[serde(default)]
        #[allow(dead_code)]
        is_gateway: bool,
        #[serde(default)]
        #[allow(dead_code)]
        ipam: Option<Ipam>,
    }
    let err = |v: Value| from_value::<Conf>(&v).map(|_| ()).unwrap_err().to_string();
    assert_eq!(
        err(json!({"mtu": "1500"})),
        "json: cannot unmarshal string into Go struct field NetConf.mtu of type int"
    );
    assert_eq!(
        err(json!({"MTU": 1.5})),
        "json: cannot unmarshal number 1.5 into Go struct field NetConf.mtu of type int"
    );
    assert_eq!(
        err(json!({"table": -1})),
        "json: cannot unmarshal number -1 into Go struct field NetConf.table of type uint32"
    );
    assert_eq!(
        err(json!({"isGateway": "yes"})),
        "json: cannot unmarshal string into Go struct field NetConf.isGateway of type bool"
    );
    #[derive(Debug, Deserialize)]
    struct Dns {}
    #[derive(Debug, Deserialize)]
    #[serde(rename = "NetConf")]
    struct WithDns {
        #[serde(default)]
        #[allow(dead_code)]
        dns: Option<Dns>,
    }
    assert_eq!(
        from_value::<WithDns>(&json!({"dns": "x"}))
            .unwrap_err()
            .to_string(),
        "json: cannot unmarshal string into Go struct field NetConf.dns of type types.DNS"
    );
    // The innermost struct is named, with the whole path from the top.
    assert_eq!(
        err(json!({"ipam": {"addresses": [{"address": 5}]}})),
        "json: cannot unmarshal number into Go struct field Address.ipam.addresses.address of type string"
    );
}
