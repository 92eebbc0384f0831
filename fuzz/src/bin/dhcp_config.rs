//! The dhcp IPAM plugin's config (`config::parse`: daemon socket, options to provide and
//! request, route priority, from the config and CNI_ARGS), as the plugin reads its stdin and
//! as the daemon reads a request from its socket (`protocol::Request`, any local client), and
//! the daemon's reply as the plugin reads it (`protocol::Reply`). Invariants: refusals are
//! well-formed CNI errors; a request or reply written back reads back the same.
//!
//! Input: a daemon request or reply (JSON), or a plugin config (then a NUL and CNI_ARGS).
#![no_main]

use dhcp::{config, protocol};
use ferrocni_fuzz::{check_error, request, requests_per_verb, same_json, split_config};
use libfuzzer_sys::fuzz_target;

fn parse(config: &serde_json::Map<String, serde_json::Value>, cni_args: &str) {
    match config::parse(config, cni_args) {
        Ok(conf) => {
            let _ = config::client_id("fuzz-container", &conf.network, "eth0");
            assert!(conf
                .provide
                .iter()
                .all(|(code, _)| *code != 0 && *code != 255));
        }
        Err(e) => check_error(&e.into()),
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = serde_json::from_slice::<protocol::Request>(data) {
        parse(&req.config, &req.args);
        let written = serde_json::to_vec(&req).expect("a request encodes");
        let back: protocol::Request = serde_json::from_slice(&written).expect("it decodes");
        assert_eq!(back.method, req.method);
        let config = |m| serde_json::Value::Object(m);
        assert!(same_json(&config(back.config), &config(req.config)));
        return;
    }
    if let Ok(reply) = serde_json::from_slice::<protocol::Reply>(data) {
        if let Some(e) = &reply.error {
            let _ = e.to_value("1.0.0");
        }
        return;
    }
    let (stdin, cni_args) = split_config(data);
    let Some(args) = request(stdin, &cni_args) else {
        return;
    };
    for args in requests_per_verb(&args) {
        parse(&args.config, &args.args);
    }
});
