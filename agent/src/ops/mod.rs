//! Operations: the log lines, the Prometheus metrics and the HTTP endpoints serving them, the
//! checks of key files' modes, and atomic file replacement.

pub mod files;
pub mod http;
pub mod log;
pub mod metrics;
pub mod secrets;
