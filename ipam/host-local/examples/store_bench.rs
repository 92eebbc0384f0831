//! Store benchmark: pre-populates host-local stores with N leases in the reference layout,
//! then times M ADD+DEL calls of our binary and of the reference binary (same config and
//! environment, separate but identical stores) and prints median latencies and ratios.
//!
//! cargo run --release -p host-local --example store_bench -- [--leases 0,1000,60000]
//!     [--iterations 20] [--ours PATH] [--reference /usr/lib/cni/host-local] [--dir /var/tmp]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Options {
    leases: Vec<usize>,
    iterations: usize,
    ours: PathBuf,
    reference: PathBuf,
    dir: PathBuf,
}

fn parse_options() -> Result<Options, String> {
    let default_ours = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent()?.parent().map(|d| d.join("host-local")))
        .unwrap_or_else(|| PathBuf::from("host-local"));
    let mut o = Options {
        leases: vec![0, 1000, 60000],
        iterations: 20,
        ours: default_ours,
        reference: PathBuf::from("/usr/lib/cni/host-local"),
        dir: std::env::temp_dir(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--leases" => {
                o.leases = value
                    .split(',')
                    .map(|s| s.trim().parse().map_err(|_| format!("bad count {s}")))
                    .collect::<Result<_, _>>()?
            }
            "--iterations" => {
                o.iterations = value
                    .parse()
                    .map_err(|_| format!("bad iterations {value}"))?
            }
            "--ours" => o.ours = PathBuf::from(value),
            "--reference" => o.reference = PathBuf::from(value),
            "--dir" => o.dir = PathBuf::from(value),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if o.leases.iter().any(|&n| n > 65000) {
        return Err("at most 65000 leases (one /16)".into());
    }
    Ok(o)
}

/// The n-th address of 10.128.0.0/16 after the gateway (.0.1): .0.2, .0.3, ...
fn nth_ip(n: usize) -> String {
    let v = 2 + n as u32;
    format!("10.128.{}.{}", v >> 8, v & 0xff)
}

fn config(data_dir: &Path) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"bench","type":"bridge","ipam":{{"type":"host-local","dataDir":"{}","ranges":[[{{"subnet":"10.128.0.0/16"}}]]}}}}"#,
        data_dir.display()
    )
}

/// Writes a store the way the reference leaves it after `n` ADDs.
fn populate(data_dir: &Path, n: usize) -> std::io::Result<()> {
    let store = data_dir.join("bench");
    std::fs::create_dir_all(&store)?;
    for i in 0..n {
        std::fs::write(store.join(nth_ip(i)), format!("prepop{i:08}\r\neth0"))?;
    }
    if n > 0 {
        std::fs::write(store.join("last_reserved_ip.0"), nth_ip(n - 1))?;
    }
    std::fs::File::create(store.join("lock"))?;
    Ok(())
}

fn call(bin: &Path, command: &str, cid: &str, conf: &str) -> Result<Duration, String> {
    let start = Instant::now();
    let mut child = Command::new(bin)
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", cid)
        .env("CNI_NETNS", "/var/run/netns/bench-does-not-exist")
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/usr/lib/cni")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("exec {}: {e}", bin.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(conf.as_bytes())
            .map_err(|e| format!("stdin: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("wait: {e}"))?;
    let elapsed = start.elapsed();
    if !out.status.success() {
        return Err(format!(
            "{} {command} {cid} failed: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stdout)
        ));
    }
    Ok(elapsed)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Row {
    leases: usize,
    first_ours: Duration,
    add: [Duration; 2],
    del: [Duration; 2],
}

fn bench(o: &Options, n: usize) -> Result<Row, String> {
    let base = o.dir.join(format!("hl-bench-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let dirs = [base.join("ours"), base.join("reference")];
    for d in &dirs {
        populate(d, n).map_err(|e| format!("populate {}: {e}", d.display()))?;
    }
    let bins = [o.ours.as_path(), o.reference.as_path()];
    let confs: Vec<String> = dirs.iter().map(|d| config(d)).collect();
    // One warm-up ADD+DEL each: ours builds its index from the reference-layout store here.
    let first_ours = call(bins[0], "ADD", "warmup", &confs[0])?;
    call(bins[0], "DEL", "warmup", &confs[0])?;
    call(bins[1], "ADD", "warmup", &confs[1])?;
    call(bins[1], "DEL", "warmup", &confs[1])?;
    let mut adds: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut dels: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for i in 0..o.iterations {
        let cid = format!("bench{i}");
        for k in 0..2 {
            adds[k].push(call(bins[k], "ADD", &cid, &confs[k])?);
        }
        for k in 0..2 {
            dels[k].push(call(bins[k], "DEL", &cid, &confs[k])?);
        }
    }
    let _ = std::fs::remove_dir_all(&base);
    Ok(Row {
        leases: n,
        first_ours,
        add: [median(&mut adds[0]), median(&mut adds[1])],
        del: [median(&mut dels[0]), median(&mut dels[1])],
    })
}

fn main() {
    let o = match parse_options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("store_bench: {e}");
            std::process::exit(2);
        }
    };
    println!(
        "ours: {}  reference: {}  iterations: {}",
        o.ours.display(),
        o.reference.display(),
        o.iterations
    );
    println!(
        "{:>7} | {:>9} {:>9} {:>6} | {:>9} {:>9} {:>6} | {:>12}",
        "leases", "ADD ours", "ADD ref", "x", "DEL ours", "DEL ref", "x", "1st ADD ours"
    );
    for &n in &o.leases {
        match bench(&o, n) {
            Ok(r) => println!(
                "{:>7} | {:>7.2}ms {:>7.2}ms {:>6.1} | {:>7.2}ms {:>7.2}ms {:>6.1} | {:>10.2}ms",
                r.leases,
                ms(r.add[0]),
                ms(r.add[1]),
                ms(r.add[1]) / ms(r.add[0]).max(1e-6),
                ms(r.del[0]),
                ms(r.del[1]),
                ms(r.del[1]) / ms(r.del[0]).max(1e-6),
                ms(r.first_ours)
            ),
            Err(e) => {
                eprintln!("store_bench: {e}");
                std::process::exit(1);
            }
        }
    }
}
