//! Operations: the log lines, the Prometheus metrics and the HTTP endpoints serving them, and
//! the checks of key files' modes.

pub mod http;
pub mod log;
pub mod metrics;
pub mod secrets;
