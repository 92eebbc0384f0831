//! [`Bgp`]: BIRD driven by the agent. `apply` renders the node's configuration, has BIRD check
//! it, and starts BIRD (or adopts the one a previous agent left running) or reconfigures it; a
//! watcher thread restarts BIRD when it dies, reads the sessions' state every few seconds
//! (for the log and the metrics) and follows BIRD's log for the routes the import filters
//! refused ([`super::refusal_log`]); `stop` shuts BIRD down for a graceful restart. `apply` also
//! keeps the kernel's blackhole route for the node's subnet ([`blackhole`]), which `shutdown`
//! removes with BIRD's routes.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ipnetwork::{Ipv4Network, Ipv6Network};

use super::announce::{NodePrefixes, NodePrefixes6};
use super::bird::{self, Paths, Process};
use super::blackhole;
use super::control::{self, Control};
use super::error::BgpError;
use super::family::Ipv6Routes;
use super::metrics::{self, Counters, Family};
use super::node_as::mesh_remote_as;
use super::options::{merge_peers, BgpOptions, NodeSettings, Peer};
use super::origin::LeaseRoute;
use super::refusal_log::{LogTail, Refusals, Refused, ROTATE_AT_BYTES};
use super::render::{render, BirdConfig};
use super::sessions::Sessions;
use super::status::{self, Session};
use crate::{debug, log, warn};

/// How often the watcher reads BIRD's log for refusals (a reading goes on to the log's end,
/// and starts a new file when this one is long: [`super::refusal_log`]).
const LOG_TICK: Duration = Duration::from_millis(250);
/// How often it checks that BIRD runs (in log ticks: one second).
const SUPERVISE_EVERY_LOG_TICKS: u32 = 4;
/// How often it reads the sessions' state (in ticks).
const STATUS_EVERY_TICKS: u32 = 2;
/// Restart delays after BIRD dies: the first, and the most (doubling in between while it keeps
/// dying within [`STABLE_AFTER`] of its start).
const RESTART_DELAY: Duration = Duration::from_secs(1);
const MAX_RESTART_DELAY: Duration = Duration::from_secs(30);
const STABLE_AFTER: Duration = Duration::from_secs(60);

/// This node, as the backend needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// The lease's `PublicIP`: router ID, session source address, next hop of the subnet.
    pub public_ip: Ipv4Addr,
    /// The network config's `Network`.
    pub network: Ipv4Network,
    /// Its `IPv6Network` on a dual-stack network.
    pub network6: Option<Ipv6Network>,
    /// The node's name, when the agent knows it (an `AdvertisePrefixes` entry may name it).
    pub name: Option<String>,
}

/// What a [`Bgp::apply`] did to BIRD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// BIRD started; `recovering`: with `-R`, keeping the routes a previous BIRD left in the
    /// kernel until its sessions are back.
    Started { recovering: bool },
    /// A BIRD already answered on the control socket (left by the previous agent); it was
    /// given this configuration.
    Adopted { pid: Option<u32> },
    /// The running BIRD loaded the new configuration (unchanged sessions keep running).
    Reconfigured,
    /// Nothing to do: BIRD runs with this very configuration.
    Unchanged,
}

/// The outcome of a [`Bgp::apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub action: Action,
    /// The sessions BIRD now has configured.
    pub sessions: Sessions,
    /// Session addresses added and removed since the previous apply.
    pub added: Vec<Ipv4Addr>,
    pub removed: Vec<Ipv4Addr>,
}

impl Report {
    pub fn changed(&self) -> bool {
        self.action != Action::Unchanged
    }

    /// A line for the agent's log when something changed.
    pub fn log_line(&self) -> Option<String> {
        let what = match &self.action {
            Action::Unchanged => return None,
            Action::Started { recovering: false } => "BIRD started".to_string(),
            Action::Started { recovering: true } => {
                "BIRD started in graceful recovery (the kernel routes of the previous BIRD stay until its sessions are back)".to_string()
            }
            Action::Adopted { pid: Some(pid) } => format!("adopted the running BIRD (pid {pid})"),
            Action::Adopted { pid: None } => "adopted the running BIRD".to_string(),
            Action::Reconfigured => "BIRD reconfigured".to_string(),
        };
        let mut delta: Vec<String> = self.added.iter().map(|ip| format!("+{ip}")).collect();
        delta.extend(self.removed.iter().map(|ip| format!("-{ip}")));
        let delta = if delta.is_empty() {
            String::new()
        } else {
            format!(" ({})", delta.join(" "))
        };
        Some(format!("{what}: {}{delta}", self.sessions))
    }
}

struct Settings {
    opts: BgpOptions,
    node: NodeInfo,
    /// This node's AS: `--bgp-as`, else the network's `ASNumber`.
    node_as: u32,
    /// The network's `Peers` and the node's `--bgp-peers`, merged.
    peers: Vec<Peer>,
    /// The advertised prefixes this node announces, and the external ones it accepts: the
    /// IPv4 ones and the IPv6 ones.
    prefixes: NodePrefixes,
    prefixes6: NodePrefixes6,
    binary: PathBuf,
    paths: Paths,
}

#[derive(Default)]
struct State {
    process: Option<Process>,
    /// The configuration BIRD runs with (or is to be restarted with).
    applied: Option<String>,
    sessions: Sessions,
    started_at: Option<Instant>,
    /// When a dead BIRD is due to be started again, and the delay after the next death.
    restart_at: Option<Instant>,
    restart_delay: Duration,
    /// The subnet whose blackhole route this backend put in the kernel.
    blackhole: Option<Ipv4Network>,
    /// On a dual-stack network: the `IPv6Network` (what `shutdown` cleans) and the IPv6
    /// subnet whose blackhole route this backend put in the kernel.
    network6: Option<Ipv6Network>,
    blackhole6: Option<Ipv6Network>,
}

#[derive(Default)]
struct Status {
    counters: Counters,
    sessions: Vec<Session>,
    refusals: Refusals,
}

struct Shared {
    settings: Settings,
    state: Mutex<State>,
    status: Mutex<Status>,
    /// BIRD's log, followed by the watcher.
    log: Mutex<LogTail>,
}

/// The bgp backend on this node.
pub struct Bgp {
    shared: Arc<Shared>,
    watcher: Option<(Sender<()>, JoinHandle<()>)>,
}

impl Bgp {
    /// Checks the settings (BIRD found, directory usable, the node's peers agree with the
    /// network's) and starts the watcher; BIRD itself starts at the first [`Bgp::apply`].
    pub fn new(opts: BgpOptions, settings: NodeSettings, node: NodeInfo) -> Result<Bgp, BgpError> {
        let peers = merge_peers(&opts.peers, &settings.peers)?;
        let node_as = settings.as_number.unwrap_or(opts.as_number);
        opts.prefixes.check_network(node.network, node.network6)?;
        let prefixes = opts.prefixes.for_node(node.public_ip, node.name.as_deref());
        let prefixes6 = opts
            .prefixes
            .for_node6(node.public_ip, node.name.as_deref());
        if node.name.is_none() {
            for a in opts.prefixes.advertise.iter().filter(|a| a.names_nodes()) {
                warn!("bgp: AdvertisePrefixes names nodes of {} by name, but this agent knows no node name (it has one with the Kubernetes subnet manager): name this node by its address {} to have it announce the prefix", a.prefix, node.public_ip);
            }
        }
        let announced: Vec<String> = (prefixes.announced.iter().map(ToString::to_string))
            .chain(prefixes6.announced.iter().map(ToString::to_string))
            .collect();
        if !announced.is_empty() {
            log!(
                "bgp: this node announces {} besides its subnet",
                announced.join(", ")
            );
        }
        for e in &opts.prefixes.external {
            for ip in e
                .peers
                .iter()
                .filter(|ip| !peers.iter().any(|p| p.ip == **ip))
            {
                warn!("bgp: ExternalPrefixes names {ip} for {}, but {ip} is not a peer of this node: this node takes that prefix from its other peers named only", e.prefix);
            }
        }
        let binary = bird::find_binary(&settings.bird_binary)?;
        let paths = Paths::new(&settings.dir)?;
        let log = Mutex::new(LogTail::from_end(&paths.log));
        let shared = Arc::new(Shared {
            log,
            settings: Settings {
                opts,
                node,
                node_as,
                peers,
                prefixes,
                prefixes6,
                binary,
                paths,
            },
            state: Mutex::new(State {
                restart_delay: RESTART_DELAY,
                ..State::default()
            }),
            status: Mutex::new(Status::default()),
        });
        let (tx, rx) = mpsc::channel::<()>();
        let watched = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("bgp-watcher".into())
            .spawn(move || {
                let mut log_ticks = 0u32;
                let mut tick = 0u32;
                while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(LOG_TICK) {
                    watched.read_refusals();
                    log_ticks = (log_ticks + 1) % SUPERVISE_EVERY_LOG_TICKS;
                    if log_ticks != 0 {
                        continue;
                    }
                    watched.supervise();
                    tick = (tick + 1) % STATUS_EVERY_TICKS;
                    if tick == 0 {
                        watched.poll_status();
                    }
                }
            })
            .map_err(|source| BgpError::Spawn {
                binary: "the bgp watcher thread".into(),
                source,
            })?;
        Ok(Bgp {
            shared,
            watcher: Some((tx, handle)),
        })
    }

    /// The BIRD binary used (resolved on PATH).
    pub fn bird_binary(&self) -> &std::path::Path {
        &self.shared.settings.binary
    }

    /// The control socket (`birdc -s <it> show protocols`).
    pub fn control_socket(&self) -> &std::path::Path {
        &self.shared.settings.paths.socket
    }

    /// Makes BIRD run with the configuration for `own_subnet`, the mesh `mesh_peers` (the
    /// other nodes' `PublicIP`s; ignored without `NodeToNodeMesh`) and the other nodes'
    /// `leases` (the only routes BIRD imports, whoever announces them; their AS is also the
    /// remote AS of the mesh session with their node). Blocking: a first start
    /// waits for BIRD's control socket, a reconfiguration for BIRD's answer.
    pub fn apply(
        &self,
        own_subnet: Ipv4Network,
        mesh_peers: &[Ipv4Addr],
        leases: &[LeaseRoute],
    ) -> Result<Report, BgpError> {
        self.apply_dual(own_subnet, mesh_peers, leases, None)
    }

    /// [`Bgp::apply`] on a dual-stack network: `v6` is the IPv6 half (this node's IPv6 subnet
    /// and the other nodes' IPv6 leases), announced and learnt over the same sessions.
    pub fn apply_dual(
        &self,
        own_subnet: Ipv4Network,
        mesh_peers: &[Ipv4Addr],
        leases: &[LeaseRoute],
        v6: Option<&Ipv6Routes>,
    ) -> Result<Report, BgpError> {
        let s = &self.shared.settings;
        if let Some(v6) = v6 {
            if v6.own_subnet.prefix() < v6.network.prefix()
                || !v6.network.contains(v6.own_subnet.network())
            {
                return Err(BgpError::BadInput(format!(
                    "this node's IPv6 subnet {} is not inside the IPv6 network {}",
                    v6.own_subnet, v6.network
                )));
            }
        }
        if own_subnet.prefix() < s.node.network.prefix()
            || !s.node.network.contains(own_subnet.network())
        {
            return Err(BgpError::BadInput(format!(
                "this node's subnet {own_subnet} is not inside the network {}",
                s.node.network
            )));
        }
        let mesh = s.opts.node_to_node_mesh.then_some(mesh_peers);
        let mut sessions = Sessions::new(s.node.public_ip, mesh, &s.peers);
        sessions.mesh_as = mesh_remote_as(&sessions.mesh, leases, s.node_as);
        let text = render(&BirdConfig {
            router_id: s.node.public_ip,
            as_number: s.node_as,
            own_subnet,
            network: s.node.network,
            sessions: &sessions,
            leases,
            graceful_restart: s.opts.graceful_restart,
            graceful_restart_time: s.opts.graceful_restart_time,
            mesh_timers: s.opts.mesh_timers,
            mesh_bfd: s.opts.mesh_bfd,
            prefixes: &s.prefixes,
            prefixes6: &s.prefixes6,
            log_file: &s.paths.log,
            v6,
        });
        let mut st = self.shared.lock_state();
        // A blackhole of an earlier subnet (a lease acquired again, another agent's) goes first.
        if st.blackhole != Some(own_subnet) {
            blackhole::remove(s.node.network.into(), Some(own_subnet.into()))?;
        }
        blackhole::install(own_subnet.into())?;
        st.blackhole = Some(own_subnet);
        if let Some(v6) = v6 {
            if st.blackhole6 != Some(v6.own_subnet) {
                blackhole::remove(v6.network.into(), Some(v6.own_subnet.into()))?;
            }
            blackhole::install(v6.own_subnet.into())?;
            st.blackhole6 = Some(v6.own_subnet);
            st.network6 = Some(v6.network);
        }
        let action = self.shared.converge(&mut st, &text)?;
        let (added, removed) = diff(&st.sessions, &sessions);
        st.sessions = sessions.clone();
        Ok(Report {
            action,
            sessions,
            added,
            removed,
        })
    }

    /// The latest reading of the sessions (every few seconds; [`Bgp::refresh`] reads now).
    pub fn sessions(&self) -> Vec<Session> {
        self.shared.lock_status().sessions.clone()
    }

    /// Reads the sessions' state and the refusals now (logging what changed).
    pub fn refresh(&self) {
        self.shared.read_refusals();
        self.shared.poll_status();
    }

    /// The metric families of the latest reading (no BIRD command runs here).
    pub fn metric_families(&self) -> Vec<Family> {
        self.metrics_reader().families()
    }

    /// A handle for the metrics endpoint (another thread): it reads what the watcher last saw.
    pub fn metrics_reader(&self) -> MetricsReader {
        MetricsReader(Arc::clone(&self.shared))
    }

    /// Stops BIRD for a graceful restart: it exits without withdrawing anything, the kernel
    /// keeps its routes, and peers keep this node's routes (marked stale) for the restart time,
    /// so the next agent's BIRD (`-R`) takes over without a gap. What stays, for the log.
    pub fn stop(&mut self) -> String {
        self.stop_watcher();
        let shared = &self.shared;
        let s = &shared.settings;
        let mut st = shared.lock_state();
        let Some(mut process) = st.process.take() else {
            return "BIRD was not running".into();
        };
        let kept = if s.opts.graceful_restart {
            format!(
                "its routes stay in this node's kernel and peers keep this node's for {} s",
                s.opts.graceful_restart_time
            )
        } else {
            "its routes stay in this node's kernel (GracefulRestart is off: peers drop this node's at once)".to_string()
        };
        let control = Control::new(&s.paths.socket);
        match control.run("graceful restart") {
            Ok(_) if process.wait_exit(&s.paths, &s.binary) => {
                format!("BIRD stopped for a graceful restart: {kept}")
            }
            Ok(_) => format!("BIRD did not exit after `graceful restart` and was killed: {kept}"),
            Err(e) => {
                process.kill();
                format!("BIRD did not take `graceful restart` ({e}) and was killed: {kept}")
            }
        }
    }

    /// Shuts BIRD down for good (a backend change, a node leaving): every peer is told and
    /// withdraws this node's subnet, and BIRD's routes leave the kernel, also those a BIRD
    /// stopped for a graceful restart left there (BIRD's kernel protocol is `persist`: BIRD
    /// itself never removes them), and so does the subnet's blackhole route.
    pub fn shutdown(&mut self) -> Result<String, BgpError> {
        self.stop_watcher();
        let shared = &self.shared;
        let s = &shared.settings;
        let mut st = shared.lock_state();
        st.applied = None;
        let running = st
            .process
            .take()
            .or_else(|| Process::adopt(&s.paths, &s.binary));
        let what = match running {
            None => "BIRD was not running",
            Some(mut process) => {
                Control::new(&s.paths.socket).run("down")?;
                if process.wait_exit(&s.paths, &s.binary) {
                    "BIRD shut down: this node's subnet withdrawn from its peers"
                } else {
                    "BIRD did not exit after `down` and was killed"
                }
            }
        };
        let mut flushed = bird::flush_kernel_routes(s.node.network.into())?;
        let mut blackholes = blackhole::remove(s.node.network.into(), None)?;
        if let Some(network6) = st.network6 {
            flushed += bird::flush_kernel_routes(network6.into())?;
            blackholes += blackhole::remove(network6.into(), None)?;
        }
        st.blackhole = None;
        st.blackhole6 = None;
        Ok(format!(
            "{what}; {flushed} BIRD route(s) left in the kernel removed, and {blackholes} blackhole route(s) of this node's subnet"
        ))
    }

    fn stop_watcher(&mut self) {
        if let Some((tx, handle)) = self.watcher.take() {
            drop(tx);
            let _ = handle.join();
        }
    }
}

/// Reads the backend's metric families from another thread (the `/metrics` handler).
#[derive(Clone)]
pub struct MetricsReader(Arc<Shared>);

impl MetricsReader {
    pub fn families(&self) -> Vec<Family> {
        let status = self.0.lock_status();
        metrics::families(&status.counters, &status.sessions, &status.refusals)
    }
}

impl Drop for Bgp {
    /// Leaves BIRD as it is (the next agent adopts it); only the watcher ends.
    fn drop(&mut self) {
        self.stop_watcher();
    }
}

impl Shared {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_log(&self) -> MutexGuard<'_, LogTail> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_status(&self) -> MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Brings BIRD to running `text`: adopt or start it when none runs here, else reload it
    /// if the text changed.
    fn converge(&self, st: &mut State, text: &str) -> Result<Action, BgpError> {
        let s = &self.settings;
        if let Some(p) = st.process.as_mut() {
            if let Some(how) = p.ended(&s.paths, &s.binary) {
                warn!("BIRD {how}; starting it again");
                st.process = None;
            }
        }
        if st.process.is_some() {
            if st.applied.as_deref() == Some(text) {
                return Ok(Action::Unchanged);
            }
            self.install(text)?;
            self.reconfigure()?;
            st.applied = Some(text.to_string());
            self.lock_status().counters.reconfigurations += 1;
            return Ok(Action::Reconfigured);
        }
        self.install(text)?;
        if let Some(p) = Process::adopt(&s.paths, &s.binary) {
            let pid = p.pid();
            st.process = Some(p);
            st.started_at = Some(Instant::now());
            self.reconfigure()?;
            st.applied = Some(text.to_string());
            return Ok(Action::Adopted { pid });
        }
        st.applied = Some(text.to_string());
        match self.start(st) {
            Ok(recovering) => Ok(Action::Started { recovering }),
            Err(e) => {
                // The watcher tries again, ever later, meanwhile.
                st.restart_at = Some(Instant::now() + st.restart_delay);
                st.restart_delay = (st.restart_delay * 2).min(MAX_RESTART_DELAY);
                Err(e)
            }
        }
    }

    /// Writes `text` beside the configuration, has BIRD check it, then puts it in place.
    fn install(&self, text: &str) -> Result<(), BgpError> {
        let p = &self.settings.paths;
        fs::create_dir_all(&p.dir).map_err(|e| BgpError::io("creating directory", &p.dir, e))?;
        // Peer passwords are in the configuration.
        fs::set_permissions(&p.dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| BgpError::io("restricting", &p.dir, e))?;
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&p.candidate)
            .map_err(|e| BgpError::io("creating", &p.candidate, e))?;
        // `mode` applies only to a file created now: one left by anything else is narrowed.
        f.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(|e| BgpError::io("restricting", &p.candidate, e))?;
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| BgpError::io("writing", &p.candidate, e))?;
        bird::check_config(&self.settings.binary, &p.candidate)?;
        fs::rename(&p.candidate, &p.config)
            .map_err(|e| BgpError::io("renaming into place", &p.config, e))
    }

    /// `configure "<file>"`: BIRD compares the new configuration with the running one and
    /// restarts only the protocols whose configuration changed.
    fn reconfigure(&self) -> Result<(), BgpError> {
        let command = format!("configure \"{}\"", self.settings.paths.config.display());
        let reply = Control::new(&self.settings.paths.socket).run(&command)?;
        match reply.last().map(|l| l.code) {
            Some(
                control::CODE_RECONFIGURED
                | control::CODE_RECONFIG_IN_PROGRESS
                | control::CODE_RECONFIG_QUEUED,
            ) => Ok(()),
            _ => Err(BgpError::Control {
                socket: self.settings.paths.socket.clone(),
                command,
                detail: format!(
                    "unexpected reply {:?}",
                    reply.last().map(|l| (l.code, &l.text))
                ),
            }),
        }
    }

    /// Starts BIRD with the installed configuration; whether in graceful recovery.
    fn start(&self, st: &mut State) -> Result<bool, BgpError> {
        let s = &self.settings;
        let recovering = bird::kernel_has_bird_routes(s.node.network)?;
        let process = Process::start(&s.binary, &s.paths, recovering)?;
        debug!(
            1,
            "BIRD started (pid {:?}){}",
            process.pid(),
            if recovering { " with -R" } else { "" }
        );
        st.process = Some(process);
        st.started_at = Some(Instant::now());
        st.restart_at = None;
        Ok(recovering)
    }

    /// One watcher tick: notices a dead BIRD and starts it again when its delay has passed.
    fn supervise(&self) {
        let s = &self.settings;
        let mut st = self.lock_state();
        if let Some(p) = st.process.as_mut() {
            let Some(how) = p.ended(&s.paths, &s.binary) else {
                return;
            };
            st.process = None;
            // A BIRD that keeps dying soon after its start is started ever later.
            if st.started_at.is_some_and(|t| t.elapsed() >= STABLE_AFTER) {
                st.restart_delay = RESTART_DELAY;
            }
            let delay = st.restart_delay;
            st.restart_delay = (delay * 2).min(MAX_RESTART_DELAY);
            warn!("BIRD {how}; starting it again in {} s", delay.as_secs());
            st.restart_at = Some(Instant::now() + delay);
            self.lock_status().counters.bird_up = false;
            return;
        }
        if st.applied.is_none() || st.restart_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        match self.start(&mut st) {
            Ok(recovering) => {
                log!(
                    "BIRD started again{}",
                    if recovering {
                        " in graceful recovery"
                    } else {
                        ""
                    }
                );
                self.lock_status().counters.bird_restarts += 1;
            }
            Err(e) => {
                let delay = st.restart_delay;
                st.restart_delay = (delay * 2).min(MAX_RESTART_DELAY);
                warn!("{e}; trying again in {} s", delay.as_secs());
                st.restart_at = Some(Instant::now() + delay);
            }
        }
    }

    /// Counts the refusals BIRD logged since the last reading, and logs each route's first.
    /// Starts a new log file once this one is [`ROTATE_AT_BYTES`] long (BIRD opens its log
    /// again at a `configure` with the same file, which changes nothing else).
    fn read_refusals(&self) {
        let mut notes = Vec::new();
        let mut count = |line: &str| {
            if let Some(refused) = Refused::parse_line(line) {
                notes.extend(self.lock_status().refusals.record(&refused));
            }
        };
        let full = {
            let mut tail = self.lock_log();
            tail.poll(&mut count);
            tail.read_bytes() >= ROTATE_AT_BYTES
        };
        if full {
            // After the state's lock, as `apply` takes it: no configure of ours in between.
            let st = self.lock_state();
            let mut tail = self.lock_log();
            if st.process.is_some() {
                tail.rotate(&mut || self.reconfigure().is_ok(), &mut count);
            }
        }
        for note in notes {
            if note.warning {
                warn!("{}", note.line);
            } else {
                log!("{}", note.line);
            }
        }
    }

    /// Reads the sessions' state, logs what changed, keeps it for the metrics.
    fn poll_status(&self) {
        if self.lock_state().applied.is_none() {
            return;
        }
        let control = Control::new(&self.settings.paths.socket);
        let reading = control
            .run("show protocols all")
            .map(|r| status::parse_protocols(&r));
        let mut status = self.lock_status();
        match reading {
            Ok(sessions) => {
                for change in status::changes(&status.sessions, &sessions) {
                    if change.up {
                        log!("{}", change.line);
                    } else {
                        warn!("{}", change.line);
                    }
                }
                status.counters.bird_up = true;
                // A session gone from the configuration takes its refusal counts along.
                status.refusals.retain_sessions(|kind, ip| {
                    sessions.iter().any(|s| s.kind == kind && s.peer == ip)
                });
                status.sessions = sessions;
            }
            Err(e) => {
                debug!(1, "reading BIRD's sessions: {e}");
                status.counters.bird_up = false;
                status.sessions.clear();
            }
        }
    }
}

/// Session addresses in `new` and not in `old`, and the other way round.
fn diff(old: &Sessions, new: &Sessions) -> (Vec<Ipv4Addr>, Vec<Ipv4Addr>) {
    let ips = |s: &Sessions| -> Vec<Ipv4Addr> {
        let mut v: Vec<Ipv4Addr> = s
            .mesh
            .iter()
            .copied()
            .chain(s.peers.iter().map(|p| p.ip))
            .collect();
        v.sort_unstable();
        v
    };
    let (old, new) = (ips(old), ips(new));
    (
        new.iter().filter(|ip| !old.contains(ip)).copied().collect(),
        old.iter().filter(|ip| !new.contains(ip)).copied().collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn report_lines() {
        let sessions = Sessions {
            mesh: vec![ip("10.0.0.2"), ip("10.0.0.4")],
            peers: vec![],
            ..Default::default()
        };
        let mut r = Report {
            action: Action::Reconfigured,
            sessions,
            added: vec![ip("10.0.0.4")],
            removed: vec![ip("10.0.0.3")],
        };
        assert_eq!(
            r.log_line().unwrap(),
            "BIRD reconfigured: 2 mesh sessions, 0 peers (+10.0.0.4 -10.0.0.3)"
        );
        r.action = Action::Adopted { pid: Some(42) };
        r.added.clear();
        r.removed.clear();
        assert_eq!(
            r.log_line().unwrap(),
            "adopted the running BIRD (pid 42): 2 mesh sessions, 0 peers"
        );
        r.action = Action::Unchanged;
        assert!(!r.changed());
        assert_eq!(r.log_line(), None);
    }

    #[test]
    fn session_diff() {
        let old = Sessions {
            mesh: vec![ip("10.0.0.2"), ip("10.0.0.3")],
            peers: vec![],
            ..Default::default()
        };
        let new = Sessions {
            mesh: vec![ip("10.0.0.3")],
            peers: vec![Peer::new(ip("192.0.2.1"), 1)],
            ..Sessions::default()
        };
        assert_eq!(
            diff(&old, &new),
            (vec![ip("192.0.2.1")], vec![ip("10.0.0.2")])
        );
        assert_eq!(diff(&new, &new), (vec![], vec![]));
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        let node = NodeInfo {
            public_ip: ip("172.31.250.1"),
            network: "10.244.0.0/16".parse().unwrap(),
            network6: None,
            name: None,
        };
        let settings = NodeSettings {
            bird_binary: "/nonexistent/bird".into(),
            ..NodeSettings::default()
        };
        let e = Bgp::new(BgpOptions::default(), settings, node.clone())
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .starts_with("BIRD binary \"/nonexistent/bird\" not found"),
            "{e}"
        );
        // A subnet outside the network is refused before anything is written or started.
        let dir = std::env::temp_dir().join(format!("bgp-driver-{}", std::process::id()));
        let settings = NodeSettings {
            bird_binary: "/bin/true".into(),
            dir: dir.clone(),
            peers: vec![],
            ..Default::default()
        };
        let bgp = Bgp::new(BgpOptions::default(), settings, node).unwrap();
        for subnet in ["10.245.1.0/24", "10.0.0.0/8"] {
            let e = bgp
                .apply(subnet.parse().unwrap(), &[], &[])
                .unwrap_err()
                .to_string();
            assert_eq!(
                e,
                format!("this node's subnet {subnet} is not inside the network 10.244.0.0/16")
            );
        }
        assert!(!dir.exists());
    }

    /// The configuration holds peer passwords: owner-only, whatever was there before.
    #[test]
    fn configuration_is_owner_only() {
        let dir = std::env::temp_dir().join(format!("bgp-driver-mode-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let candidate = dir.join("bird.conf.new");
        fs::write(&candidate, "old").unwrap();
        fs::set_permissions(&candidate, fs::Permissions::from_mode(0o644)).unwrap();
        let settings = NodeSettings {
            // `bird -p -c` stands in: any configuration passes.
            bird_binary: "/bin/true".into(),
            dir: dir.clone(),
            peers: vec![],
            ..Default::default()
        };
        let node = NodeInfo {
            public_ip: ip("172.31.250.1"),
            network: "10.244.0.0/16".parse().unwrap(),
            network6: None,
            name: None,
        };
        let bgp = Bgp::new(BgpOptions::default(), settings, node).unwrap();
        bgp.shared.install("password \"s3cret\";\n").unwrap();
        let mode = |p: &std::path::Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.join("bird.conf")), 0o600);
        assert_eq!(mode(&dir), 0o700);
        assert!(!candidate.exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
