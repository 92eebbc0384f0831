//! A raw request on the agent's health and metrics listeners (`--healthz-port`,
//! `--metrics-port`). Invariant: every request gets one of the answers the server gives.
#![no_main]

use ferrocni_agent::ops::http::{respond, Routes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for routes in [
        Routes {
            healthz: true,
            metrics: true,
        },
        Routes {
            healthz: true,
            metrics: false,
        },
    ] {
        let (status, kind, _body) = respond(data, routes);
        assert!(
            [
                "200 OK",
                "400 Bad Request",
                "404 Not Found",
                "405 Method Not Allowed"
            ]
            .contains(&status),
            "unexpected status {status:?}"
        );
        assert!(kind.starts_with("text/plain"), "{kind}");
    }
});
