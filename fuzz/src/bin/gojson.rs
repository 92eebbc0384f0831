//! libcni's Go-compatible JSON: `gojson::parse` on any bytes, then the typed decoding every
//! plugin config goes through (`gojson::from_value`), on a struct with the field shapes the
//! plugins use. Invariants: what parses re-encodes and parses back unchanged; a decoded
//! struct encodes and decodes back to itself; `get` finds the value Go would.
#![no_main]

use std::collections::BTreeMap;
use std::net::IpAddr;

use ferrocni_fuzz::check_json_round_trip;
use libcni::gojson;
use libfuzzer_sys::fuzz_target;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
struct Shapes {
    name: String,
    #[serde(rename = "cniVersion")]
    cni_version: Option<String>,
    mtu: u32,
    vlan: Option<u16>,
    offset: i64,
    ratio: f64,
    enabled: bool,
    list: Vec<String>,
    ips: Vec<IpAddr>,
    map: BTreeMap<String, u64>,
    nested: Option<Box<Shapes>>,
    mode: Mode,
    any: Option<Value>,
    pair: Option<(u8, String)>,
}

#[derive(Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    #[default]
    Bridge,
    Private,
    Vepa,
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = gojson::parse(data) else {
        return;
    };
    check_json_round_trip(&value);
    if let Ok(shapes) = gojson::from_value::<Shapes>(&value) {
        let encoded = serde_json::to_value(&shapes).expect("a decoded struct encodes");
        let again: Shapes = gojson::from_value(&encoded).expect("our own encoding decodes");
        // NaN never equals itself; JSON has no NaN, so none is decoded.
        assert_eq!(
            again, shapes,
            "decode -> encode -> decode changed the struct"
        );
    }
    if let Value::Object(map) = &value {
        let _ = gojson::from_map::<Shapes>(map);
        for (key, v) in map {
            assert!(gojson::fold_eq(key, key));
            // Go's lookup finds an exact key that holds a value.
            if !v.is_null() {
                assert!(gojson::get(map, key).is_some(), "get misses {key:?}");
            }
            for other in map.keys() {
                assert_eq!(gojson::fold_eq(key, other), gojson::fold_eq(other, key));
            }
        }
    }
});
