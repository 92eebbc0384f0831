//! The tuning configuration: top-level fields, `runtimeConfig.mac`, `args.cni.*` and CNI_ARGS
//! `MAC=` merged into one [`Tuning`].

use std::fmt;

use libcni::skel::CmdArgs;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::error::TuningError;

/// Where link backups live unless `dataDir` says otherwise.
pub const DEFAULT_DATA_DIR: &str = "/run/cni/tuning";

/// Sysctl settings in the order given; duplicate keys are rejected while parsing.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Sysctls(pub Vec<(String, String)>);

impl Sysctls {
    /// Adds or replaces `key` (used to merge `args.cni.sysctl` over the top-level map).
    fn set(&mut self, key: String, value: String) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }
}

impl<'de> Deserialize<'de> for Sysctls {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SysctlVisitor;
        impl<'de> Visitor<'de> for SysctlVisitor {
            type Value = Sysctls;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of sysctl names to string values")
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Sysctls, E> {
                Ok(Sysctls::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Sysctls, A::Error> {
                let mut out: Vec<(String, String)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, String>()? {
                    // The reference rejects a key given twice (also as dotted vs slashed form).
                    let canon = canonical_key(&key);
                    if out.iter().any(|(k, _)| canonical_key(k) == canon) {
                        return Err(serde::de::Error::custom(DUPLICATE_SYSCTL));
                    }
                    out.push((key, value));
                }
                Ok(Sysctls(out))
            }
        }
        d.deserialize_any(SysctlVisitor)
    }
}

/// The reference's error for a sysctl key given twice (a plain error: code 999).
const DUPLICATE_SYSCTL: &str = "duplicated sysctl keys are not allowed";

/// `net.ipv4.ip_forward` and `net/ipv4/ip_forward` name the same sysctl.
fn canonical_key(key: &str) -> String {
    if key.contains('/') {
        key.trim_matches('/').to_string()
    } else {
        key.replace('.', "/")
    }
}

/// The reference rejects a top-level sysctl key written twice. Decoding keeps only the last
/// of repeated keys, so this pass reads the raw bytes: only the keys of every `sysctl` object
/// (any case, as Go matches the field), values unchecked.
fn check_repeated_sysctl_keys(stdin: &[u8]) -> Result<(), TuningError> {
    struct TopLevel;
    impl<'de> Visitor<'de> for TopLevel {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen: Vec<String> = Vec::new();
            while let Some(key) = map.next_key::<String>()? {
                if libcni::gojson::fold_eq(&key, "sysctl") {
                    map.next_value_seed(SysctlKeys(&mut seen))?;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(())
        }
    }
    struct SysctlKeys<'a>(&'a mut Vec<String>);
    impl<'de> DeserializeSeed<'de> for SysctlKeys<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for SysctlKeys<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object of sysctl names to string values")
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                let canon = canonical_key(&key);
                if self.0.contains(&canon) {
                    return Err(serde::de::Error::custom(DUPLICATE_SYSCTL));
                }
                self.0.push(canon);
            }
            Ok(())
        }
    }
    // Anything that is not an object is reported by the decoding pass.
    let mut de = serde_json::Deserializer::from_slice(stdin);
    match de.deserialize_map(TopLevel) {
        Err(e) if e.to_string().starts_with(DUPLICATE_SYSCTL) => Err(TuningError::DuplicateSysctl),
        _ => Ok(()),
    }
}

#[derive(Debug, Default, Deserialize)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "TuningConf")]
struct RawConf {
    #[serde(default)]
    sysctl: Sysctls,
    #[serde(default)]
    mac: Option<String>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(default)]
    promisc: Option<bool>,
    #[serde(default)]
    allmulti: Option<bool>,
    #[serde(default, rename = "txQLen")]
    tx_qlen: Option<i64>,
    #[serde(default, rename = "dataDir")]
    data_dir: Option<String>,
    #[serde(default, rename = "runtimeConfig")]
    runtime_config: Option<RawRuntimeConfig>,
    #[serde(default)]
    args: Option<RawArgs>,
}

#[derive(Debug, Default, Deserialize)]
struct RawRuntimeConfig {
    #[serde(default)]
    mac: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawArgs {
    #[serde(default)]
    cni: Option<RawCniArgs>,
}

#[derive(Debug, Default, Deserialize)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "IPAMArgs")]
struct RawCniArgs {
    #[serde(default)]
    sysctl: Sysctls,
    #[serde(default)]
    mac: Option<String>,
    #[serde(default)]
    mtu: Option<i64>,
    #[serde(default)]
    promisc: Option<bool>,
    #[serde(default)]
    allmulti: Option<bool>,
    #[serde(default, rename = "txQLen")]
    tx_qlen: Option<i64>,
}

/// The effective settings for one call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tuning {
    pub sysctls: Sysctls,
    pub mac: Option<[u8; 6]>,
    pub mtu: Option<u32>,
    /// Only `true` has an effect (the reference never turns promiscuous mode off on ADD).
    pub promisc: bool,
    pub allmulti: Option<bool>,
    pub tx_qlen: Option<u32>,
    pub data_dir: String,
}

impl Tuning {
    /// Whether any link attribute is configured (and so a backup is needed).
    pub fn touches_link(&self) -> bool {
        self.mac.is_some()
            || self.mtu.is_some()
            || self.promisc
            || self.allmulti.is_some()
            || self.tx_qlen.is_some()
    }
}

/// Parses the request (keys matched as Go does) and CNI_ARGS.
pub fn parse(args: &CmdArgs) -> Result<Tuning, TuningError> {
    check_repeated_sysctl_keys(&args.stdin)?;
    let raw: RawConf = args.decode_config().map_err(TuningError::Load)?;
    let pairs = args.cni_args()?;
    libcni::args::check_known(&pairs, &["IgnoreUnknown", "MAC"])?;
    let env_mac = libcni::args::get(&pairs, "MAC").map(str::to_string);
    merge(raw, env_mac)
}

fn merge(raw: RawConf, env_mac: Option<String>) -> Result<Tuning, TuningError> {
    let mut sysctls = raw.sysctl;
    let mut mac = raw.mac.filter(|m| !m.is_empty());
    let mut mtu = raw.mtu.filter(|m| *m != 0);
    let mut promisc = raw.promisc.unwrap_or(false);
    let mut allmulti = raw.allmulti;
    let mut tx_qlen = raw.tx_qlen;

    // Precedence for the MAC: CNI_ARGS < runtimeConfig.mac < args.cni.mac.
    if let Some(m) = env_mac.filter(|m| !m.is_empty()) {
        mac = Some(m);
    }
    if let Some(m) = raw
        .runtime_config
        .and_then(|r| r.mac)
        .filter(|m| !m.is_empty())
    {
        mac = Some(m);
    }
    if let Some(cni) = raw.args.and_then(|a| a.cni) {
        for (k, v) in cni.sysctl.0 {
            sysctls.set(k, v);
        }
        if let Some(m) = cni.mac.filter(|m| !m.is_empty()) {
            mac = Some(m);
        }
        if let Some(m) = cni.mtu.filter(|m| *m != 0) {
            mtu = Some(m);
        }
        if cni.promisc == Some(true) {
            promisc = true;
        }
        if cni.allmulti.is_some() {
            allmulti = cni.allmulti;
        }
        if cni.tx_qlen.is_some() {
            tx_qlen = cni.tx_qlen;
        }
    }

    let mac = match mac {
        Some(m) => {
            Some(netkit::link::parse_mac(&m).map_err(|_| TuningError::BadMac { mac: m.clone() })?)
        }
        None => None,
    };
    let mtu = match mtu {
        Some(m) => Some(
            u32::try_from(m)
                .ok()
                .filter(|m| *m > 0)
                .ok_or(TuningError::BadMtu(m))?,
        ),
        None => None,
    };
    let tx_qlen = match tx_qlen {
        Some(q) => Some(u32::try_from(q).map_err(|_| TuningError::BadTxQlen(q))?),
        None => None,
    };
    let data_dir = raw
        .data_dir
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| DEFAULT_DATA_DIR.to_string());
    Ok(Tuning {
        sysctls,
        mac,
        mtu,
        promisc,
        allmulti,
        tx_qlen,
        data_dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_json(s: &str, env_mac: Option<&str>) -> Result<Tuning, libcni::CniError> {
        check_repeated_sysctl_keys(s.as_bytes())?;
        let raw: RawConf = libcni::gojson::from_slice(s.as_bytes())
            .map_err(|e| libcni::CniError::internal(e.to_string()))?;
        Ok(merge(raw, env_mac.map(str::to_string))?)
    }

    #[test]
    fn defaults() {
        let t = parse_json(r#"{"name":"n","type":"tuning"}"#, None).unwrap();
        assert_eq!(t.data_dir, DEFAULT_DATA_DIR);
        assert!(!t.touches_link());
        assert!(t.sysctls.0.is_empty());
    }

    #[test]
    fn duplicate_sysctl_keys_are_rejected() {
        let e = parse_json(
            r#"{"sysctl":{"net.ipv4.ip_forward":"1","net.ipv4.ip_forward":"0"}}"#,
            None,
        )
        .unwrap_err();
        assert_eq!(
            (e.code, e.msg.as_str()),
            (999, "duplicated sysctl keys are not allowed")
        );
        let e = parse_json(
            r#"{"sysctl":{"net.ipv4.ip_forward":"1","net/ipv4/ip_forward":"0"}}"#,
            None,
        )
        .unwrap_err();
        assert!(e.msg.contains("duplicate"), "{e}");
    }

    #[test]
    fn mac_precedence() {
        let cfg = r#"{"mac":"02:00:00:00:00:01"}"#;
        assert_eq!(parse_json(cfg, None).unwrap().mac, Some([2, 0, 0, 0, 0, 1]));
        assert_eq!(
            parse_json(cfg, Some("02:00:00:00:00:02")).unwrap().mac,
            Some([2, 0, 0, 0, 0, 2])
        );
        let cfg = r#"{"mac":"02:00:00:00:00:01","runtimeConfig":{"mac":"02:00:00:00:00:03"}}"#;
        assert_eq!(
            parse_json(cfg, Some("02:00:00:00:00:02")).unwrap().mac,
            Some([2, 0, 0, 0, 0, 3])
        );
        let cfg = r#"{"runtimeConfig":{"mac":"02:00:00:00:00:03"},"args":{"cni":{"mac":"02:00:00:00:00:04"}}}"#;
        assert_eq!(
            parse_json(cfg, Some("02:00:00:00:00:02")).unwrap().mac,
            Some([2, 0, 0, 0, 0, 4])
        );
    }

    #[test]
    fn args_cni_override_and_merge() {
        let cfg = r#"{"sysctl":{"net.a":"1","net.b":"2"},"mtu":1400,
            "args":{"cni":{"sysctl":{"net.b":"3","net.c":"4"},"mtu":1300,"promisc":true,"allmulti":false,"txQLen":0}}}"#;
        let t = parse_json(cfg, None).unwrap();
        assert_eq!(
            t.sysctls.0,
            vec![
                ("net.a".into(), "1".into()),
                ("net.b".into(), "3".into()),
                ("net.c".into(), "4".into())
            ]
        );
        assert_eq!(t.mtu, Some(1300));
        assert!(t.promisc);
        assert_eq!(t.allmulti, Some(false));
        assert_eq!(t.tx_qlen, Some(0));
        assert!(t.touches_link());
    }

    #[test]
    fn bad_values_are_config_errors() {
        assert_eq!(
            parse_json(r#"{"mac":"zz"}"#, None).unwrap_err().msg,
            "invalid args zz for MAC addr: address zz: invalid MAC address"
        );
        assert_eq!(parse_json(r#"{"mtu":-5}"#, None).unwrap_err().code, 999);
        assert_eq!(parse_json(r#"{"txQLen":-1}"#, None).unwrap_err().code, 999);
        assert!(parse_json(r#"{"sysctl":{"net.a":1}}"#, None).is_err());
        assert!(parse_json(r#"{"sysctl":["x"]}"#, None).is_err());
    }
}
