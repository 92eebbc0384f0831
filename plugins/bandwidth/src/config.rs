//! The plugin's configuration: limits from the top level or `runtimeConfig.bandwidth`,
//! validated like the reference (rate and burst set together, burst below 4 GB), plus our
//! optional `latencyMs`.

use libcni::gojson;
use serde_json::{Map, Value};

/// The reference's fixed TBF latency, our default.
pub const DEFAULT_LATENCY_MS: u32 = 25;
/// Upper bound for `latencyMs`: beyond this the queue limit stops meaning anything useful.
pub const MAX_LATENCY_MS: u32 = 60_000;

const LIMIT_KEYS: [&str; 4] = ["ingressRate", "ingressBurst", "egressRate", "egressBurst"];

/// One direction's limit: rate in bits per second, burst in bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub rate_bits: u64,
    pub burst_bits: u64,
}

/// Both directions as seen from the container; `None` means unshaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// Traffic to the container (TBF on the host veth).
    pub ingress: Option<Limit>,
    /// Traffic from the container (TBF on the IFB).
    pub egress: Option<Limit>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        self.ingress.is_none() && self.egress.is_none()
    }
}

/// The parsed configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub limits: Limits,
    pub latency_ms: u32,
}

/// A configuration error, worded like the reference where it has a message (a plain error
/// there, so code 999).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A limit of the wrong JSON type, in Go's `encoding/json` wording (`field` is the JSON
    /// path Go reports, `value` what was found).
    #[error("failed to parse network configuration: json: cannot unmarshal {} into Go struct field {field} of type uint64", go_value_kind(value))]
    NotUint64 { field: String, value: Value },
    /// `runtimeConfig.bandwidth` is not an object.
    #[error("failed to parse network configuration: json: cannot unmarshal {} into Go struct field .runtimeConfig.bandwidth of type main.BandwidthEntry", go_value_kind(value).split(' ').next().unwrap_or_default())]
    NotAnEntry { value: Value },
    /// Ours (`latencyMs` is not the reference's).
    #[error("invalid latencyMs: {value} is not a whole number of milliseconds between 1 and {MAX_LATENCY_MS}")]
    BadLatency { value: Value },
    #[error("if rate is set, burst must also be set")]
    RateWithoutBurst { direction: &'static str },
    #[error("if burst is set, rate must also be set")]
    BurstWithoutRate { direction: &'static str },
    #[error("burst cannot be more than 4GB")]
    BurstTooLarge { direction: &'static str },
}

/// How Go's decoder names a JSON value it cannot store in an integer field (a number is
/// named with its literal; for other targets only the first word is).
fn go_value_kind(v: &Value) -> String {
    match v {
        Value::Number(n) => format!("number {n}"),
        Value::String(_) => "string".into(),
        Value::Bool(_) => "bool".into(),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
        Value::Null => "null".into(),
    }
}

impl Config {
    /// Reads the limits and latency from the request's config object.
    ///
    /// The top level wins as soon as it names any of the four limit keys; then
    /// `runtimeConfig.bandwidth` is ignored entirely, as in the reference.
    pub fn from_map(config: &Map<String, Value>) -> Result<Config, ConfigError> {
        // Keys match as with Go's encoding/json: containerd sends `IngressRate` & co.
        let top_level = LIMIT_KEYS.iter().any(|k| gojson::get(config, k).is_some());
        let runtime =
            gojson::get(config, "runtimeConfig").and_then(|r| gojson::get_in(r, "bandwidth"));
        let limits = if top_level {
            limits_from(config, "PluginConf.")?
        } else if let Some(rt) = runtime {
            let obj = rt
                .as_object()
                .ok_or_else(|| ConfigError::NotAnEntry { value: rt.clone() })?;
            limits_from(obj, "BandwidthEntry.runtimeConfig.bandwidth.")?
        } else {
            Limits::default()
        };
        let latency_ms = match gojson::get(config, "latencyMs") {
            None => DEFAULT_LATENCY_MS,
            Some(v) => {
                let ms = v
                    .as_u64()
                    .filter(|ms| (1..=u64::from(MAX_LATENCY_MS)).contains(ms));
                let bad = || ConfigError::BadLatency { value: v.clone() };
                u32::try_from(ms.ok_or_else(bad)?).map_err(|_| bad())?
            }
        };
        Ok(Config { limits, latency_ms })
    }
}

fn limits_from(obj: &Map<String, Value>, prefix: &str) -> Result<Limits, ConfigError> {
    let get = |key: &str| -> Result<u64, ConfigError> {
        match gojson::get(obj, key) {
            None => Ok(0),
            Some(v) => v.as_u64().ok_or_else(|| ConfigError::NotUint64 {
                field: format!("{prefix}{key}"),
                value: v.clone(),
            }),
        }
    };
    Ok(Limits {
        ingress: validate(get("ingressRate")?, get("ingressBurst")?, "ingress")?,
        egress: validate(get("egressRate")?, get("egressBurst")?, "egress")?,
    })
}

/// The reference's `validateRateAndBurst`: both zero (unshaped) or both set, burst in
/// bytes below `u32::MAX`.
pub fn validate(
    rate_bits: u64,
    burst_bits: u64,
    direction: &'static str,
) -> Result<Option<Limit>, ConfigError> {
    match (rate_bits, burst_bits) {
        (0, 0) => Ok(None),
        (_, 0) => Err(ConfigError::RateWithoutBurst { direction }),
        (0, _) => Err(ConfigError::BurstWithoutRate { direction }),
        (_, b) if b / 8 >= u64::from(u32::MAX) => Err(ConfigError::BurstTooLarge { direction }),
        (rate_bits, burst_bits) => Ok(Some(Limit {
            rate_bits,
            burst_bits,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Config, ConfigError> {
        Config::from_map(v.as_object().unwrap())
    }

    #[test]
    fn no_limits_is_empty_with_default_latency() {
        let c = parse(json!({"name": "n", "type": "bandwidth"})).unwrap();
        assert!(c.limits.is_empty());
        assert_eq!(c.latency_ms, 25);
        let c = parse(json!({"ingressRate": 0, "ingressBurst": 0, "runtimeConfig": {}})).unwrap();
        assert!(c.limits.is_empty());
    }

    #[test]
    fn top_level_limits() {
        let c = parse(json!({"ingressRate": 8_000_000, "ingressBurst": 80_000, "egressRate": 16_000_000, "egressBurst": 160_000})).unwrap();
        assert_eq!(
            c.limits.ingress,
            Some(Limit {
                rate_bits: 8_000_000,
                burst_bits: 80_000
            })
        );
        assert_eq!(
            c.limits.egress,
            Some(Limit {
                rate_bits: 16_000_000,
                burst_bits: 160_000
            })
        );
    }

    #[test]
    fn runtime_config_used_when_top_level_absent() {
        let c = parse(
            json!({"runtimeConfig": {"bandwidth": {"egressRate": 1000, "egressBurst": 800}}}),
        )
        .unwrap();
        assert_eq!(c.limits.ingress, None);
        assert_eq!(
            c.limits.egress,
            Some(Limit {
                rate_bits: 1000,
                burst_bits: 800
            })
        );
    }

    #[test]
    fn containerd_and_crio_runtime_shapes() {
        // containerd 1.6: go-cni's BandWidth struct has no JSON tags; bursts are MaxUint32.
        let c = parse(
            json!({"name":"k8s","type":"bandwidth","capabilities":{"bandwidth":true},
            "runtimeConfig":{"bandwidth":{"IngressRate":10000000u64,"IngressBurst":4294967295u64,
                                          "EgressRate":20000000u64,"EgressBurst":4294967295u64}}}),
        )
        .unwrap();
        assert_eq!(
            c.limits.ingress,
            Some(Limit {
                rate_bits: 10_000_000,
                burst_bits: 4_294_967_295
            })
        );
        assert_eq!(c.limits.egress.map(|l| l.rate_bits), Some(20_000_000));
        // CRI-O (ocicni) uses the CONVENTIONS.md names.
        let c =
            parse(json!({"runtimeConfig":{"bandwidth":{"ingressRate":1000,"ingressBurst":800}}}))
                .unwrap();
        assert_eq!(c.limits.ingress.map(|l| l.burst_bits), Some(800));
    }

    #[test]
    fn top_level_wins_entirely() {
        let c = parse(json!({
            "ingressRate": 1000, "ingressBurst": 800,
            "runtimeConfig": {"bandwidth": {"egressRate": 5000, "egressBurst": 800}}
        }))
        .unwrap();
        assert_eq!(
            c.limits.ingress,
            Some(Limit {
                rate_bits: 1000,
                burst_bits: 800
            })
        );
        assert_eq!(
            c.limits.egress, None,
            "runtimeConfig must be ignored when the top level sets limits"
        );
    }

    #[test]
    fn rate_and_burst_go_together() {
        assert_eq!(
            parse(json!({"ingressRate": 1000})).unwrap_err(),
            ConfigError::RateWithoutBurst {
                direction: "ingress"
            }
        );
        assert_eq!(
            parse(json!({"egressBurst": 1000})).unwrap_err(),
            ConfigError::BurstWithoutRate {
                direction: "egress"
            }
        );
        let e = parse(json!({"runtimeConfig": {"bandwidth": {"ingressBurst": 5}}})).unwrap_err();
        assert_eq!(e.to_string(), "if burst is set, rate must also be set");
    }

    #[test]
    fn burst_limit_is_4gb_in_bytes() {
        let max_ok = (u64::from(u32::MAX) - 1) * 8 + 7;
        assert!(validate(1, max_ok, "ingress").unwrap().is_some());
        assert_eq!(
            validate(1, max_ok + 1, "ingress").unwrap_err(),
            ConfigError::BurstTooLarge {
                direction: "ingress"
            }
        );
        assert_eq!(
            validate(1, u64::MAX, "egress").unwrap_err().to_string(),
            "burst cannot be more than 4GB"
        );
    }

    #[test]
    fn wrong_types_are_rejected() {
        for bad in [json!(-1), json!(1.5), json!("100"), json!(true), json!([1])] {
            let e = parse(json!({"ingressRate": bad.clone(), "ingressBurst": 10})).unwrap_err();
            assert!(
                matches!(e, ConfigError::NotUint64 { ref field, .. } if field == "PluginConf.ingressRate"),
                "{bad}: {e}"
            );
        }
        let e = parse(json!({"ingressRate": -1, "ingressBurst": 10})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to parse network configuration: json: cannot unmarshal number -1 into Go struct field PluginConf.ingressRate of type uint64"
        );
        let e = parse(json!({"runtimeConfig": {"bandwidth": 5}})).unwrap_err();
        assert!(e.to_string().contains("runtimeConfig.bandwidth"), "{e}");
        let e =
            parse(json!({"runtimeConfig": {"bandwidth": {"egressRate": "x", "egressBurst": 1}}}))
                .unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to parse network configuration: json: cannot unmarshal string into Go struct field BandwidthEntry.runtimeConfig.bandwidth.egressRate of type uint64"
        );
    }

    #[test]
    fn null_counts_as_absent() {
        let c = parse(json!({"ingressRate": null, "runtimeConfig": {"bandwidth": {"ingressRate": 8, "ingressBurst": 8}}})).unwrap();
        assert!(c.limits.ingress.is_some());
    }

    #[test]
    fn latency() {
        assert_eq!(parse(json!({"latencyMs": 5})).unwrap().latency_ms, 5);
        assert_eq!(parse(json!({"latencyMs": null})).unwrap().latency_ms, 25);
        for bad in [json!(0), json!(-3), json!(2.5), json!("25"), json!(60_001)] {
            assert!(parse(json!({"latencyMs": bad.clone()})).is_err(), "{bad}");
        }
    }
}
