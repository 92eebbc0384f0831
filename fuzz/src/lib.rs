//! What ferrocni's fuzz targets (`src/bin/*.rs`, one per parser) share: how an input is split
//! into the pieces a plugin reads, the request a plugin's skeleton hands over for a config,
//! and the invariants every target checks the same way.
//!
//! An input of a plugin-config target is the config as a runtime writes it on stdin; bytes
//! after a NUL, when there is one, are `CNI_ARGS` (a JSON config holds no raw NUL). So the
//! example conflists' plugin configs are seeds as they are.

use std::cell::RefCell;

use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{self, CmdArgs, Command, Env, Outcome, Plugin};
use serde_json::Value;

/// The container ID, interface and netns a fuzzed request names (valid, so the skeleton
/// passes the config on to the plugin).
pub const CONTAINER_ID: &str = "fuzz-container";
pub const IFNAME: &str = "eth0";
/// A path that does not exist: the skeleton's own-netns check finds nothing to compare.
pub const NETNS: &str = "/nonexistent/ferrocni-fuzz/netns";

/// The stdin part and the `CNI_ARGS` part of an input (`<config>\0<CNI_ARGS>`).
pub fn split_config(data: &[u8]) -> (&[u8], String) {
    match data.iter().position(|&b| b == 0) {
        Some(at) => (
            &data[..at],
            String::from_utf8_lossy(&data[at + 1..]).into_owned(),
        ),
        None => (data, String::new()),
    }
}

/// A process environment given as pairs.
pub struct PairsEnv(pub Vec<(String, String)>);

impl Env for PairsEnv {
    fn var(&self, name: &str) -> String {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }
    fn is_set(&self, name: &str) -> bool {
        self.0.iter().any(|(k, _)| k == name)
    }
}

/// A plugin that keeps the request the skeleton built and does nothing else.
#[derive(Default)]
struct Capture(RefCell<Option<CmdArgs>>);

impl Capture {
    fn keep(&self, args: &CmdArgs) {
        *self.0.borrow_mut() = Some(args.clone());
    }
}

impl Plugin for Capture {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        self.keep(args);
        Ok(CniResult::new())
    }
    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.keep(args);
        Ok(())
    }
    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.keep(args);
        Ok(())
    }
}

/// The request a plugin gets for `stdin` and `cni_args` (DEL, which every config version
/// allows); `None` when the skeleton refuses the config before any plugin sees it. Its
/// refusal must be a well-formed error.
pub fn request(stdin: &[u8], cni_args: &str) -> Option<CmdArgs> {
    let env = PairsEnv(vec![
        ("CNI_COMMAND".into(), "DEL".into()),
        ("CNI_CONTAINERID".into(), CONTAINER_ID.into()),
        ("CNI_NETNS".into(), NETNS.into()),
        ("CNI_IFNAME".into(), IFNAME.into()),
        ("CNI_ARGS".into(), cni_args.into()),
        ("CNI_PATH".into(), "/nonexistent/ferrocni-fuzz/bin".into()),
    ]);
    let capture = Capture::default();
    let outcome = skel::dispatch(&capture, &env, &mut &stdin[..]);
    check_outcome(&outcome);
    capture.0.into_inner()
}

/// The verbs the skeleton lets through for the request's config version, each as a request
/// of its own (same config).
pub fn requests_per_verb(args: &CmdArgs) -> Vec<CmdArgs> {
    let allowed = |min: &str| libcni::version::at_least(&args.cni_version, min);
    [
        (Command::Add, "0.1.0"),
        (Command::Del, "0.1.0"),
        (Command::Check, "0.4.0"),
        (Command::Gc, "1.1.0"),
        (Command::Status, "1.1.0"),
    ]
    .into_iter()
    .filter(|(_, min)| allowed(min))
    .map(|(command, _)| CmdArgs {
        command,
        ..args.clone()
    })
    .collect()
}

/// Runs `load` on the request for every verb the config allows; an error must convert into a
/// well-formed CNI error (a spec or plugin code, a message).
pub fn load_per_verb<T, E: Into<CniError>>(
    stdin: &[u8],
    cni_args: &str,
    mut load: impl FnMut(&CmdArgs) -> Result<T, E>,
    mut check: impl FnMut(&CmdArgs, &T),
) {
    let Some(args) = request(stdin, cni_args) else {
        return;
    };
    for args in requests_per_verb(&args) {
        match load(&args) {
            Ok(conf) => check(&args, &conf),
            Err(e) => check_error(&e.into()),
        }
    }
}

/// A CNI error as the spec has it: a known code (or a plugin's own, 100 and up) and a message
/// saying what failed; printable in every version.
pub fn check_error(e: &CniError) {
    const SPEC_CODES: &[u32] = &[1, 2, 3, 4, 5, 6, 7, 8, 11, 50, 51, 999];
    assert!(
        SPEC_CODES.contains(&e.code) || e.code >= 100,
        "error code {} is neither the spec's nor a plugin's: {e:?}",
        e.code
    );
    assert!(!e.msg.trim().is_empty(), "error without a message: {e:?}");
    for version in libcni::version::SUPPORTED_VERSIONS {
        let v = e.to_value(version);
        assert!(v.get("code").is_some_and(Value::is_u64), "{v}");
    }
}

/// What the skeleton prints is JSON (a result, or an error with its code).
pub fn check_outcome(outcome: &Outcome) {
    match outcome {
        Outcome::Print(text) => {
            serde_json::from_str::<Value>(text).expect("the skeleton printed invalid JSON");
        }
        Outcome::Fail(text) => {
            let v: Value =
                serde_json::from_str(text).expect("the skeleton printed an invalid error");
            let e = CniError::from_json(text.as_bytes()).expect("an error JSON without a code");
            check_error(&e);
            assert!(v.get("msg").is_some(), "{text}");
        }
        Outcome::About | Outcome::Done => {}
    }
}

/// Encoding `value` and decoding it again gives it back (JSON texts we write are read back
/// as written), but for the last bit of a float: serde_json's default float parsing is not
/// correctly rounded (its `float_roundtrip` feature is; docs/building-and-testing.md, Fuzzing).
pub fn check_json_round_trip(value: &Value) {
    let text = serde_json::to_vec(value).expect("a Value always serializes");
    let back = libcni::gojson::parse(&text).expect("our own JSON text does not parse");
    assert!(
        same_json(&back, value),
        "JSON round trip changed the value: {back} != {value}"
    );
}

/// `a == b`, floats within one unit in the last place.
pub fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x != y => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) if x.is_finite() && y.is_finite() && x.signum() == y.signum() => {
                x.to_bits().abs_diff(y.to_bits()) <= 1
            }
            _ => false,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((kx, vx), (ky, vy))| kx == ky && same_json(vx, vy))
        }
        _ => a == b,
    }
}
