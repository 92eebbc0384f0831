//! The flannel plugin's config (`NetConf::load`) with a `subnet.env`, and the delegate
//! config built from both (`delegate::build`: bridge + host-local by default), saved for DEL.
//! Invariants: the delegate names a plugin type; the bytes handed to the delegate and saved
//! read back (`scratch::parse`) as the delegate itself; refusals are well-formed CNI errors.
//!
//! Input: the config, then a NUL and the `subnet.env` text.
#![no_main]

use ferrocni_fuzz::{check_error, request, requests_per_verb, same_json};
use flannel::{config, delegate, scratch, subnet_env};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (stdin, env_text) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], String::from_utf8_lossy(&data[at + 1..])),
        None => (data, Default::default()),
    };
    let Some(args) = request(stdin, "") else {
        return;
    };
    let env = subnet_env::SubnetEnv::parse(&env_text).ok();
    for args in requests_per_verb(&args) {
        let conf = match config::NetConf::load(&args) {
            Ok(c) => c,
            Err(e) => {
                check_error(&e.into());
                continue;
            }
        };
        let Some(env) = &env else {
            continue;
        };
        let delegate = match delegate::build(&conf, env) {
            Ok(d) => d,
            Err(e) => {
                check_error(&e.into());
                continue;
            }
        };
        assert!(!delegate::plugin_type(&delegate).is_empty(), "{delegate:?}");
        let bytes = delegate::to_bytes(&delegate);
        let saved = scratch::parse(&bytes).expect("the saved delegate reads back");
        assert!(
            same_json(
                &serde_json::Value::Object(saved),
                &delegate::sorted(&serde_json::Value::Object(delegate))
            ),
            "the saved delegate is not the delegate"
        );
    }
});
