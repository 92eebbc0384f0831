//! The agent's counters and gauges, served in Prometheus' text exposition format
//! (`--metrics-port`). Process-wide atomics: every part of the agent bumps them directly.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A monotonically increasing count.
pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Counter {
        Counter(AtomicU64::new(0))
    }
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
pub struct Gauge(AtomicU64);

impl Gauge {
    const fn new() -> Gauge {
        Gauge(AtomicU64::new(0))
    }
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

pub static LEASE_RENEWALS: Counter = Counter::new();
pub static LEASE_RENEWAL_FAILURES: Counter = Counter::new();
pub static LEASE_ACQUISITIONS: Counter = Counter::new();
/// Moves to another etcd member, and watches set up again after a loss.
pub static ETCD_RECONNECTS: Counter = Counter::new();
pub static ETCD_AUTHENTICATIONS: Counter = Counter::new();
pub static WATCH_EVENTS: Counter = Counter::new();
pub static RECONCILES: Counter = Counter::new();
pub static RECONCILE_FAILURES: Counter = Counter::new();
/// Sum of the reconcile passes' durations, in microseconds.
static RECONCILE_MICROS: Counter = Counter::new();
static LAST_RECONCILE_MICROS: Gauge = Gauge::new();
/// Peers by state: programmed into the overlay, and leases present but unusable (unreadable
/// value, another backend, a VNI or family we cannot serve).
pub static PEERS_PROGRAMMED: Gauge = Gauge::new();
pub static LEASES_KNOWN: Gauge = Gauge::new();
pub static LEASES_UNUSABLE: Gauge = Gauge::new();

/// Leases (and other keys under the subnets prefix) refused, by reason label, each counted
/// once per value (when it is logged).
static REFUSED: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// Makes `labels` show in `leases_refused_total` from the start (at 0).
pub fn register_refusals(labels: &[&'static str]) {
    if let Ok(mut m) = REFUSED.lock() {
        for l in labels {
            m.entry(l).or_insert(0);
        }
    }
}

/// Counts one refusal of kind `label`.
pub fn refused(label: &'static str) {
    if let Ok(mut m) = REFUSED.lock() {
        *m.entry(label).or_insert(0) += 1;
    }
}

/// The refusals counted so far of kind `label`.
pub fn refusals(label: &str) -> u64 {
    REFUSED
        .lock()
        .ok()
        .and_then(|m| m.get(label).copied())
        .unwrap_or(0)
}

struct LastError {
    message: String,
    at: SystemTime,
}
static LAST_ERROR: Mutex<Option<LastError>> = Mutex::new(None);

pub fn reconciled(took: Duration, ok: bool) {
    RECONCILES.inc();
    if !ok {
        RECONCILE_FAILURES.inc();
    }
    let micros = took.as_micros().min(u128::from(u64::MAX)) as u64;
    RECONCILE_MICROS.0.fetch_add(micros, Ordering::Relaxed);
    LAST_RECONCILE_MICROS.set(micros);
}

/// Remembers the latest error (shown until the next one).
pub fn record_error(message: &str) {
    if let Ok(mut e) = LAST_ERROR.lock() {
        *e = Some(LastError {
            message: message.to_string(),
            at: SystemTime::now(),
        });
    }
}

/// A label value, escaped as the text format wants.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Metric families being written in the text exposition format (version 0.0.4).
#[derive(Debug, Default)]
pub struct Samples {
    out: String,
}

impl Samples {
    /// One family: `samples` are `(labels, value)`, labels written as `{k="v",...}` or empty.
    pub fn family(&mut self, name: &str, kind: &str, help: &str, samples: &[(String, String)]) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(self.out, "{name}{labels} {value}");
        }
    }

    pub fn into_text(self) -> String {
        self.out
    }
}

/// A label set `{name="value"}`, the value escaped.
pub fn label(name: &str, value: &str) -> String {
    format!("{{{name}=\"{}\"}}", escape(value))
}

/// Where a backend's own metrics come from: called at every scrape, so it must only read
/// values kept up to date elsewhere (no I/O).
pub type Source = Arc<dyn Fn(&mut Samples) + Send + Sync>;

static BACKEND_SOURCE: Mutex<Option<Source>> = Mutex::new(None);
static POLICY_SOURCE: Mutex<Option<Source>> = Mutex::new(None);

/// Adds the running backend's metrics to every scrape.
pub fn set_backend_source(source: Option<Source>) {
    if let Ok(mut s) = BACKEND_SOURCE.lock() {
        *s = source;
    }
}

/// Adds NetworkPolicy enforcement's metrics to every scrape.
pub fn set_policy_source(source: Option<Source>) {
    if let Ok(mut s) = POLICY_SOURCE.lock() {
        *s = source;
    }
}

/// Every metric, in the text exposition format (version 0.0.4).
pub fn render() -> String {
    let mut samples = Samples::default();
    let mut metric = |name: &str, kind: &str, help: &str, s: &[(String, String)]| {
        samples.family(name, kind, help, s)
    };
    let plain = |v: u64| vec![(String::new(), v.to_string())];
    let version = format!("{{version=\"{}\"}}", env!("CARGO_PKG_VERSION"));
    metric(
        "ferrocni_agent_build_info",
        "gauge",
        "The agent's version.",
        &[(version, "1".into())],
    );
    metric(
        "ferrocni_agent_lease_acquisitions_total",
        "counter",
        "Subnet leases acquired (at start and after losing one).",
        &plain(LEASE_ACQUISITIONS.get()),
    );
    metric(
        "ferrocni_agent_lease_renewals_total",
        "counter",
        "Successful renewals of this node's subnet lease.",
        &plain(LEASE_RENEWALS.get()),
    );
    metric(
        "ferrocni_agent_lease_renewal_failures_total",
        "counter",
        "Failed attempts to renew this node's subnet lease.",
        &plain(LEASE_RENEWAL_FAILURES.get()),
    );
    metric(
        "ferrocni_agent_etcd_reconnects_total",
        "counter",
        "Switches to another etcd member and watches set up again after a loss.",
        &plain(ETCD_RECONNECTS.get()),
    );
    metric(
        "ferrocni_agent_etcd_authentications_total",
        "counter",
        "Auth tokens obtained from etcd (--etcd-username), refreshes included.",
        &plain(ETCD_AUTHENTICATIONS.get()),
    );
    metric(
        "ferrocni_agent_watch_events_total",
        "counter",
        "Lease events received on the etcd watch.",
        &plain(WATCH_EVENTS.get()),
    );
    metric(
        "ferrocni_agent_leases",
        "gauge",
        "Subnet leases in etcd by state: peers programmed into the data plane, leases that \
         cannot be programmed, and all known leases (this node's included).",
        &[
            (
                "{state=\"programmed\"}".into(),
                PEERS_PROGRAMMED.get().to_string(),
            ),
            (
                "{state=\"unusable\"}".into(),
                LEASES_UNUSABLE.get().to_string(),
            ),
            ("{state=\"known\"}".into(), LEASES_KNOWN.get().to_string()),
        ],
    );
    let refused: Vec<(String, String)> = REFUSED
        .lock()
        .map(|m| {
            m.iter()
                .map(|(l, n)| (label("reason", l), n.to_string()))
                .collect()
        })
        .unwrap_or_default();
    metric(
        "ferrocni_agent_leases_refused_total",
        "counter",
        "Leases refused (each value counted once, when logged), and other keys under the \
         subnets prefix, by reason.",
        &refused,
    );
    metric(
        "ferrocni_agent_reconciles_total",
        "counter",
        "Data plane reconcile passes.",
        &plain(RECONCILES.get()),
    );
    metric(
        "ferrocni_agent_reconcile_failures_total",
        "counter",
        "Data plane reconcile passes that failed.",
        &plain(RECONCILE_FAILURES.get()),
    );
    let secs = |micros: u64| format!("{:.6}", micros as f64 / 1e6);
    metric(
        "ferrocni_agent_reconcile_duration_seconds_sum",
        "counter",
        "Total time spent in reconcile passes.",
        &[(String::new(), secs(RECONCILE_MICROS.get()))],
    );
    metric(
        "ferrocni_agent_last_reconcile_duration_seconds",
        "gauge",
        "Duration of the latest reconcile pass.",
        &[(String::new(), secs(LAST_RECONCILE_MICROS.get()))],
    );
    let last = LAST_ERROR.lock().ok().and_then(|e| {
        e.as_ref().map(|e| {
            let at = e.at.duration_since(UNIX_EPOCH).unwrap_or_default();
            (escape(&e.message), at.as_secs_f64())
        })
    });
    let (info, at) = match last {
        Some((msg, at)) => (vec![(format!("{{message=\"{msg}\"}}"), "1".into())], at),
        None => (Vec::new(), 0.0),
    };
    metric(
        "ferrocni_agent_last_error_timestamp_seconds",
        "gauge",
        "When the latest error happened (Unix time; 0 = none yet).",
        &[(String::new(), format!("{at:.3}"))],
    );
    metric(
        "ferrocni_agent_last_error_info",
        "gauge",
        "The latest error's message.",
        &info,
    );
    for slot in [&BACKEND_SOURCE, &POLICY_SOURCE] {
        let source = slot.lock().ok().and_then(|s| s.clone());
        if let Some(source) = source {
            source(&mut samples);
        }
    }
    samples.into_text()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        LEASE_RENEWALS.inc();
        reconciled(Duration::from_millis(1500), true);
        record_error("etcd \"m1\" down\nretrying");
        let text = render();
        assert!(text.contains("# TYPE ferrocni_agent_lease_renewals_total counter\n"));
        assert!(text.contains("ferrocni_agent_last_reconcile_duration_seconds 1.500000\n"));
        assert!(text
            .contains(r#"ferrocni_agent_last_error_info{message="etcd \"m1\" down\nretrying"} 1"#));
        assert!(text.contains("ferrocni_agent_leases{state=\"programmed\"} "));
        register_refusals(&["subnet", "overlap"]);
        refused("overlap");
        let text = render();
        assert!(text.contains("ferrocni_agent_leases_refused_total{reason=\"subnet\"} "));
        assert!(refusals("overlap") >= 1);
        // Every sample line is `name{labels} value` or `name value`.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
