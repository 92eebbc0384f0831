//! Operations: the log lines, the Prometheus metrics and the HTTP endpoints serving them.

pub mod http;
pub mod log;
pub mod metrics;
