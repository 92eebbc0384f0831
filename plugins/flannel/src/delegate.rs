//! The delegate config, built exactly as flannel's CNI plugin builds it: the `delegate` object
//! of the config, completed with defaults from subnet.env (type `bridge`, `ipMasq` = not
//! `FLANNEL_IPMASQ`, `mtu` = `FLANNEL_MTU`, `isGateway` for a bridge), then `name`,
//! `cniVersion`, `runtimeConfig` and a host-local `ipam` set by flannel. Keys the operator put
//! in `delegate` win over the defaults; `name` and `ipam` may not be given there.

use libcni::result::Route;
use serde_json::{json, Map, Value};

use crate::config::NetConf;
use crate::error::FlannelError;
use crate::subnet_env::SubnetEnv;

/// The delegate's network config.
pub fn build(conf: &NetConf, env: &SubnetEnv) -> Result<Map<String, Value>, FlannelError> {
    let mut d = conf.delegate.clone().unwrap_or_default();
    if d.get("type").is_some_and(|t| !t.is_string()) {
        return Err(FlannelError::DelegateType);
    }
    if d.contains_key("name") {
        return Err(FlannelError::DelegateName);
    }
    if d.contains_key("ipam") {
        return Err(FlannelError::DelegateIpam);
    }
    if let Some(rc) = &conf.runtime_config {
        d.insert("runtimeConfig".into(), Value::Object(rc.clone()));
    }
    d.insert("name".into(), json!(conf.name));
    d.entry("type").or_insert_with(|| json!("bridge"));
    // When flanneld does not masquerade, the bridge must.
    d.entry("ipMasq").or_insert_with(|| json!(!env.ipmasq));
    d.entry("mtu").or_insert_with(|| json!(env.mtu));
    if d.get("type").and_then(Value::as_str) == Some("bridge") {
        d.entry("isGateway").or_insert_with(|| json!(true));
    }
    if !conf.cni_version.is_empty() {
        d.insert("cniVersion".into(), json!(conf.cni_version));
    }
    d.insert("ipam".into(), Value::Object(ipam(conf, env)?));
    Ok(d)
}

/// The config's `ipam` (host-local unless it names a type) with `ranges` replaced by the
/// node's subnets and the cluster networks appended to its `routes`.
fn ipam(conf: &NetConf, env: &SubnetEnv) -> Result<Map<String, Value>, FlannelError> {
    let mut ipam = conf.ipam.clone().unwrap_or_default();
    ipam.entry("type").or_insert_with(|| json!("host-local"));
    let ranges: Vec<Value> = [env.subnet, env.ipv6_subnet]
        .into_iter()
        .flatten()
        .map(|sn| json!([{ "subnet": sn.to_string() }]))
        .collect();
    ipam.insert("ranges".into(), Value::Array(ranges));
    let mut routes: Vec<Route> = match ipam.get("routes") {
        Some(v) => libcni::gojson::from_value(v).map_err(FlannelError::IpamRoutes)?,
        None => Vec::new(),
    };
    for net in env.networks.iter().chain(&env.ipv6_networks) {
        routes.push(Route::new(*net, None));
    }
    let routes = serde_json::to_value(routes).map_err(FlannelError::EncodeRoutes)?;
    ipam.insert("routes".into(), routes);
    Ok(ipam)
}

/// `v` with every object's keys in sorted order, as Go's `json.Marshal` of a map writes them
/// (so the saved delegate config reads byte-for-byte like flannel's).
pub fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&m[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// The bytes handed to the delegate and saved for DEL.
pub fn to_bytes(delegate: &Map<String, Value>) -> Vec<u8> {
    sorted(&Value::Object(delegate.clone()))
        .to_string()
        .into_bytes()
}

/// The delegate's plugin type (a string, checked in [`build`]).
pub fn plugin_type(delegate: &Map<String, Value>) -> &str {
    delegate.get("type").and_then(Value::as_str).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plugin entry of kube-flannel's conflist, as libcni hands it to the plugin.
    fn kube_flannel() -> NetConf {
        let v = json!({"cniVersion": "0.3.1", "name": "cbr0", "type": "flannel",
            "delegate": {"hairpinMode": true, "isDefaultGateway": true}});
        NetConf::from_map(v.as_object().unwrap()).unwrap()
    }

    fn dual_stack_env(ipmasq: bool) -> SubnetEnv {
        let text = format!(
            "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:3::1/64\nFLANNEL_MTU=1430\nFLANNEL_IPMASQ={ipmasq}\n"
        );
        SubnetEnv::parse(&text).unwrap()
    }

    #[test]
    fn kube_flannel_conflist_gets_flannels_bridge_delegate() {
        let d = build(&kube_flannel(), &dual_stack_env(true)).unwrap();
        let want = json!({
            "cniVersion": "0.3.1",
            "hairpinMode": true,
            "ipMasq": false,
            "ipam": {
                "ranges": [[{"subnet": "10.244.3.0/24"}], [{"subnet": "fd00:10:244:3::/64"}]],
                "routes": [{"dst": "10.244.0.0/16"}, {"dst": "fd00:10:244::/56"}],
                "type": "host-local"
            },
            "isDefaultGateway": true,
            "isGateway": true,
            "mtu": 1430,
            "name": "cbr0",
            "type": "bridge"
        });
        assert_eq!(Value::Object(d.clone()), want);
        // Saved and sent with Go's sorted keys.
        let text = String::from_utf8(to_bytes(&d)).unwrap();
        assert!(
            text.starts_with(
                r#"{"cniVersion":"0.3.1","hairpinMode":true,"ipMasq":false,"ipam":{"ranges""#
            ),
            "{text}"
        );
        // flanneld not masquerading: the bridge does.
        let d = build(&kube_flannel(), &dual_stack_env(false)).unwrap();
        assert_eq!(d["ipMasq"], json!(true));
    }

    #[test]
    fn delegate_keys_win_and_ipam_is_completed() {
        let v = json!({"name": "n", "type": "flannel",
            "runtimeConfig": {"portMappings": [{"hostPort": 80, "containerPort": 8080, "protocol": "tcp"}]},
            "ipam": {"dataDir": "/x", "routes": [{"dst": "192.168.0.0/16", "gw": "10.244.3.254"}],
                     "ranges": [[{"subnet": "1.2.3.0/24"}]]},
            "delegate": {"type": "ptp", "ipMasq": true, "mtu": 9000, "cniVersion": "9.9.9"}});
        let conf = NetConf::from_map(v.as_object().unwrap()).unwrap();
        let env =
            SubnetEnv::parse("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n")
                .unwrap();
        let d = build(&conf, &env).unwrap();
        assert_eq!(d["type"], "ptp");
        assert_eq!(d["ipMasq"], true);
        assert_eq!(d["mtu"], 9000);
        assert!(d.get("isGateway").is_none(), "only a bridge gets isGateway");
        // No cniVersion in the config: the delegate's own stays.
        assert_eq!(d["cniVersion"], "9.9.9");
        assert_eq!(d["runtimeConfig"]["portMappings"][0]["hostPort"], 80);
        assert_eq!(
            d["ipam"],
            json!({"dataDir": "/x", "type": "host-local",
                   "ranges": [[{"subnet": "10.244.3.0/24"}]],
                   "routes": [{"dst": "192.168.0.0/16", "gw": "10.244.3.254"}, {"dst": "10.244.0.0/16"}]})
        );
    }

    #[test]
    fn forbidden_delegate_keys() {
        let env = dual_stack_env(true);
        for delegate in [
            json!({"type": 5}),
            json!({"type": null}),
            json!({"name": "x"}),
            json!({"ipam": {}}),
        ] {
            let v = json!({"name": "n", "delegate": delegate});
            let conf = NetConf::from_map(v.as_object().unwrap()).unwrap();
            let err = libcni::CniError::from(build(&conf, &env).unwrap_err());
            assert_eq!(err.code, libcni::error::codes::INTERNAL, "{delegate}");
        }
        let v = json!({"name": "n", "ipam": {"routes": "x"}});
        let conf = NetConf::from_map(v.as_object().unwrap()).unwrap();
        assert!(build(&conf, &env).is_err());
    }
}
