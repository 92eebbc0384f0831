//! Delegation to the configured IPAM plugin (Go `ipam.ExecAdd` & co.).
//!
//! The delegate gets our whole environment with the `CNI_*` variables of this call, set from
//! the call's arguments rather than inherited, so the plugin logic depends on nothing but its
//! [`CmdArgs`] (and can be driven in-process by tests).

use std::path::PathBuf;

use libcni::error::CniError;
use libcni::invoke;
use libcni::linked::LinkedPlugin;
use libcni::result::CniResult;
use libcni::skel::CmdArgs;

use crate::error::AttachError;
use crate::rollback::Rollback;

fn env(args: &CmdArgs, command: &str) -> Vec<(String, String)> {
    vec![
        ("CNI_COMMAND".into(), command.into()),
        ("CNI_CONTAINERID".into(), args.container_id.clone()),
        ("CNI_NETNS".into(), args.netns.clone()),
        ("CNI_IFNAME".into(), args.ifname.clone()),
        ("CNI_ARGS".into(), args.args.clone()),
        ("CNI_PATH".into(), args.path.join(":")),
    ]
}

fn plugin(args: &CmdArgs, ipam_type: &str) -> Result<PathBuf, CniError> {
    let paths: Vec<PathBuf> = args.path.iter().map(PathBuf::from).collect();
    invoke::find_in_path(ipam_type, &paths)
}

/// An IPAM call under way: [`Pending::finish`] waits for its outcome.
pub struct Pending<T>(Box<dyn FnOnce() -> Result<T, CniError>>);

impl<T: 'static> Pending<T> {
    /// A call that has already finished.
    pub fn done(outcome: Result<T, CniError>) -> Self {
        Pending(Box::new(move || outcome))
    }

    /// Waits for the call's outcome.
    pub fn finish(self) -> Result<T, CniError> {
        (self.0)()
    }
}

/// The IPAM delegation of a plugin: executing the configured IPAM plugin ([`ExecIpam`]) or,
/// in unit tests, a fake that answers in-process. Cheap to clone (an undo step keeps a copy).
pub trait Ipam: Clone + 'static {
    /// IPAM ADD: the delegate's result in the current shape.
    fn add(&self, args: &CmdArgs, ipam_type: &str) -> Result<CniResult, CniError>;

    /// IPAM DEL, CHECK, GC or STATUS.
    fn call(&self, args: &CmdArgs, ipam_type: &str, command: &str) -> Result<(), CniError>;

    /// [`Ipam::add`], started: the caller works while the delegate runs. By default the call
    /// is made at once.
    fn start_add(&self, args: &CmdArgs, ipam_type: &str) -> Pending<CniResult> {
        Pending::done(self.add(args, ipam_type))
    }

    /// [`Ipam::call`], started as [`Ipam::start_add`].
    fn start_call(&self, args: &CmdArgs, ipam_type: &str, command: &str) -> Pending<()> {
        Pending::done(self.call(args, ipam_type, command))
    }

    /// IPAM ADD that registers the IPAM DEL undoing it, refuses a result without IPs (the
    /// reference's "IPAM plugin returned missing IP config") and points every IP at interface
    /// `iface` of the plugin's result.
    fn add_for_interface(
        &self,
        args: &CmdArgs,
        ipam_type: &str,
        iface: usize,
        rollback: &mut Rollback,
    ) -> Result<CniResult, CniError> {
        let result = self.add(args, ipam_type)?;
        self.undo_add(args, ipam_type, rollback);
        for_interface(result, iface)
    }

    /// [`Ipam::add_for_interface`] running while `work` does (on this thread: it may enter
    /// namespaces) what does not depend on the addresses, typically creating the link: the
    /// IPAM plugin's exec and file locking overlap the kernel work. The delegate is started
    /// before `work` (so it runs in our netns, the host's) and its output read after; no
    /// thread is needed. IPAM plugins that may need the link run after `work` instead. The
    /// IPAM DEL undo is registered whenever IPAM succeeded, also when `work` failed.
    fn add_alongside<T>(
        &self,
        args: &CmdArgs,
        ipam_type: &str,
        iface: usize,
        rollback: &mut Rollback,
        work: impl FnOnce(&mut Rollback) -> Result<T, CniError>,
    ) -> Result<(T, CniResult), CniError> {
        let (worked, ipam) = if independent_of_the_link(ipam_type) {
            let delegate = self.start_add(args, ipam_type);
            let worked = work(rollback);
            (worked, delegate.finish())
        } else {
            let worked = work(rollback);
            match worked {
                Ok(w) => (Ok(w), self.add(args, ipam_type)),
                Err(e) => return Err(e),
            }
        };
        let result = match ipam {
            Ok(r) => {
                self.undo_add(args, ipam_type, rollback);
                r
            }
            Err(e) => {
                worked?;
                return Err(e);
            }
        };
        let worked = worked?;
        Ok((worked, for_interface(result, iface)?))
    }

    /// [`Ipam::add_alongside`] when an IPAM plugin is configured, `work` alone otherwise.
    fn add_alongside_if_set<T>(
        &self,
        args: &CmdArgs,
        ipam_type: &str,
        iface: usize,
        rollback: &mut Rollback,
        work: impl FnOnce(&mut Rollback) -> Result<T, CniError>,
    ) -> Result<(T, Option<CniResult>), CniError> {
        if ipam_type.is_empty() {
            return Ok((work(rollback)?, None));
        }
        self.add_alongside(args, ipam_type, iface, rollback, work)
            .map(|(t, r)| (t, Some(r)))
    }

    /// IPAM `command` (typically DEL) when an IPAM plugin is configured, running while `work`
    /// does (or before it, for IPAM plugins that may need the link); both outcomes are
    /// returned.
    fn call_alongside<T>(
        &self,
        args: &CmdArgs,
        ipam_type: &str,
        command: &str,
        work: impl FnOnce() -> T,
    ) -> (Result<(), CniError>, T) {
        if ipam_type.is_empty() {
            return (Ok(()), work());
        }
        if !independent_of_the_link(ipam_type) {
            let ipam = self.call(args, ipam_type, command);
            return (ipam, work());
        }
        let delegate = self.start_call(args, ipam_type, command);
        let worked = work();
        (delegate.finish(), worked)
    }

    /// The verb passed on when an IPAM plugin is configured; nothing otherwise.
    fn call_if_set(&self, args: &CmdArgs, ipam_type: &str, command: &str) -> Result<(), CniError> {
        if ipam_type.is_empty() {
            Ok(())
        } else {
            self.call(args, ipam_type, command)
        }
    }

    /// Registers the IPAM DEL that undoes a successful IPAM ADD.
    fn undo_add(&self, args: &CmdArgs, ipam_type: &str, rollback: &mut Rollback) {
        let (ipam, undo_args, undo_type) = (self.clone(), args.clone(), ipam_type.to_string());
        rollback.push(format!("IPAM DEL ({ipam_type})"), move || {
            ipam.call(&undo_args, &undo_type, "DEL")
                .map_err(|e| e.to_string())
        });
    }
}

/// The IPAM plugin's result for interface `iface` (an error without any IP).
fn for_interface(mut result: CniResult, iface: usize) -> Result<CniResult, CniError> {
    if result.ips.is_empty() {
        return Err(AttachError::IpamNoIps.into());
    }
    for ip in &mut result.ips {
        ip.interface = Some(iface);
    }
    Ok(result)
}

/// The IPAM plugin found on `CNI_PATH`, executed.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExecIpam;

impl Ipam for ExecIpam {
    fn add(&self, args: &CmdArgs, ipam_type: &str) -> Result<CniResult, CniError> {
        LinkedIpam(&[]).add(args, ipam_type)
    }

    fn call(&self, args: &CmdArgs, ipam_type: &str, command: &str) -> Result<(), CniError> {
        LinkedIpam(&[]).call(args, ipam_type, command)
    }

    fn start_add(&self, args: &CmdArgs, ipam_type: &str) -> Pending<CniResult> {
        LinkedIpam(&[]).start_add(args, ipam_type)
    }

    fn start_call(&self, args: &CmdArgs, ipam_type: &str, command: &str) -> Pending<()> {
        LinkedIpam(&[]).start_call(args, ipam_type, command)
    }
}

/// The IPAM plugin found on `CNI_PATH`: answered in-process by one of these plugins linked
/// into ours when the binary is of the same build (`libcni::linked`: no exec, same answer),
/// executed otherwise.
#[derive(Clone, Copy)]
pub struct LinkedIpam(pub &'static [LinkedPlugin]);

impl Ipam for LinkedIpam {
    fn add(&self, args: &CmdArgs, ipam_type: &str) -> Result<CniResult, CniError> {
        self.start_add(args, ipam_type).finish()
    }

    fn call(&self, args: &CmdArgs, ipam_type: &str, command: &str) -> Result<(), CniError> {
        self.start_call(args, ipam_type, command).finish()
    }

    fn start_add(&self, args: &CmdArgs, ipam_type: &str) -> Pending<CniResult> {
        let running = plugin(args, ipam_type).and_then(|bin| {
            invoke::start_plugin_linked(self.0, &bin, &args.stdin, &env(args, "ADD"))
        });
        match running {
            Ok(running) => {
                let request = args.stdin.clone();
                Pending(Box::new(move || {
                    CniResult::from_value(&running.finish_with_result(&request)?)
                }))
            }
            Err(e) => Pending::done(Err(e)),
        }
    }

    fn start_call(&self, args: &CmdArgs, ipam_type: &str, command: &str) -> Pending<()> {
        let running = plugin(args, ipam_type).and_then(|bin| {
            invoke::start_plugin_linked(self.0, &bin, &args.stdin, &env(args, command))
        });
        match running {
            Ok(running) => Pending(Box::new(move || running.finish().map(|_| ()))),
            Err(e) => Pending::done(Err(e)),
        }
    }
}

/// IPAM plugins that never touch the container's interface, so they may run while the link is
/// being created or deleted. Others may need the link: dhcp's daemon sends DISCOVER through it
/// on ADD and RELEASE on DEL, and an unknown IPAM plugin may do the same. Those run in the
/// reference's order: link, then IPAM on ADD; IPAM, then link on DEL.
pub fn independent_of_the_link(ipam_type: &str) -> bool {
    matches!(ipam_type, "host-local" | "static")
}

// The executed IPAM plugin, for the plugins that are not generic over [`Ipam`].

/// [`Ipam::add`] of [`ExecIpam`].
pub fn add(args: &CmdArgs, ipam_type: &str) -> Result<CniResult, CniError> {
    ExecIpam.add(args, ipam_type)
}

/// [`Ipam::call`] of [`ExecIpam`].
pub fn call(args: &CmdArgs, ipam_type: &str, command: &str) -> Result<(), CniError> {
    ExecIpam.call(args, ipam_type, command)
}

/// [`Ipam::add_for_interface`] of [`ExecIpam`].
pub fn add_for_interface(
    args: &CmdArgs,
    ipam_type: &str,
    iface: usize,
    rollback: &mut Rollback,
) -> Result<CniResult, CniError> {
    ExecIpam.add_for_interface(args, ipam_type, iface, rollback)
}

/// [`Ipam::add_alongside`] of [`ExecIpam`].
pub fn add_alongside<T>(
    args: &CmdArgs,
    ipam_type: &str,
    iface: usize,
    rollback: &mut Rollback,
    work: impl FnOnce(&mut Rollback) -> Result<T, CniError>,
) -> Result<(T, CniResult), CniError> {
    ExecIpam.add_alongside(args, ipam_type, iface, rollback, work)
}

/// [`Ipam::add_alongside_if_set`] of [`ExecIpam`].
pub fn add_alongside_if_set<T>(
    args: &CmdArgs,
    ipam_type: &str,
    iface: usize,
    rollback: &mut Rollback,
    work: impl FnOnce(&mut Rollback) -> Result<T, CniError>,
) -> Result<(T, Option<CniResult>), CniError> {
    ExecIpam.add_alongside_if_set(args, ipam_type, iface, rollback, work)
}

/// [`Ipam::call_alongside`] of [`ExecIpam`].
pub fn call_alongside<T>(
    args: &CmdArgs,
    ipam_type: &str,
    command: &str,
    work: impl FnOnce() -> T,
) -> (Result<(), CniError>, T) {
    ExecIpam.call_alongside(args, ipam_type, command, work)
}

/// [`Ipam::call_if_set`] of [`ExecIpam`].
pub fn call_if_set(args: &CmdArgs, ipam_type: &str, command: &str) -> Result<(), CniError> {
    ExecIpam.call_if_set(args, ipam_type, command)
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use libcni::result::IpConfig;

    use super::*;
    use crate::rollback;

    /// An in-process IPAM that logs its calls next to the work's, optionally failing its ADD
    /// or answering without IPs, and signalling once its ADD has started.
    #[derive(Clone, Default)]
    struct Recorder {
        log: Arc<Mutex<Vec<String>>>,
        fail_add: bool,
        no_ips: bool,
        started: Option<Arc<Mutex<mpsc::Sender<()>>>>,
    }

    impl Recorder {
        fn note(&self, what: impl Into<String>) {
            self.log.lock().unwrap().push(what.into());
        }

        fn log(&self) -> Vec<String> {
            self.log.lock().unwrap().clone()
        }
    }

    impl Ipam for Recorder {
        fn add(&self, _args: &CmdArgs, ipam_type: &str) -> Result<CniResult, CniError> {
            if let Some(started) = &self.started {
                let _ = started.lock().unwrap().send(());
            }
            self.note(format!("ADD {ipam_type}"));
            if self.fail_add {
                return Err(CniError::internal("no address left"));
            }
            let ips = if self.no_ips {
                Vec::new()
            } else {
                vec![IpConfig {
                    interface: None,
                    address: "10.1.2.3/24".parse().unwrap(),
                    gateway: None,
                }]
            };
            Ok(CniResult {
                ips,
                ..Default::default()
            })
        }

        fn call(&self, _args: &CmdArgs, ipam_type: &str, command: &str) -> Result<(), CniError> {
            self.note(format!("{command} {ipam_type}"));
            Ok(())
        }
    }

    fn args() -> CmdArgs {
        crate::testing::cmd_args(serde_json::json!({"ipam": {"type": "x"}}), "")
    }

    /// Work that registers an undo step, logs itself and succeeds or fails.
    fn work(ipam: &Recorder, fail: bool) -> impl FnOnce(&mut Rollback) -> Result<u8, CniError> {
        let ipam = ipam.clone();
        move |rb| {
            ipam.note("work");
            let undo = ipam.clone();
            rb.push("link", move || {
                undo.note("undo link");
                Ok(())
            });
            if fail {
                Err(CniError::internal("failed to create link"))
            } else {
                Ok(7)
            }
        }
    }

    #[test]
    fn link_independent_ipam_runs_while_the_work_does() {
        let (tx, rx) = mpsc::channel();
        let ipam = Recorder {
            started: Some(Arc::new(Mutex::new(tx))),
            ..Default::default()
        };
        let mut rb = Rollback::default();
        let (worked, result) = ipam
            .add_alongside(&args(), "host-local", 2, &mut rb, |rb| {
                // Only an IPAM ADD running on another thread can signal while this waits.
                let overlapped = rx.recv_timeout(Duration::from_secs(30)).is_ok();
                work(&ipam, false)(rb).map(|w| (w, overlapped))
            })
            .unwrap();
        assert_eq!(worked, (7, true));
        assert_eq!(result.ips[0].interface, Some(2));
        // The link's undo, then the IPAM DEL's.
        assert_eq!(rb.len(), 2);
        rb.run("t");
        let log = ipam.log();
        assert_eq!(log[log.len() - 2..], ["DEL host-local", "undo link"]);
    }

    #[test]
    fn a_failed_work_releases_the_link_independent_lease() {
        let ipam = Recorder::default();
        let outcome = rollback::guarded("t", |rb| {
            ipam.add_alongside(&args(), "static", 0, rb, work(&ipam, true))
        });
        assert_eq!(outcome.unwrap_err().msg, "failed to create link");
        let mut log = ipam.log();
        // ADD and the work ran at once, in either order; the undo runs newest first.
        log[..2].sort();
        assert_eq!(
            log,
            ["ADD static", "work", "DEL static", "undo link"].map(String::from)
        );
    }

    #[test]
    fn ipam_that_may_need_the_link_runs_after_the_work() {
        for ipam_type in ["dhcp", "some-other-ipam"] {
            let ipam = Recorder::default();
            let mut rb = Rollback::default();
            ipam.add_alongside(&args(), ipam_type, 0, &mut rb, work(&ipam, false))
                .unwrap();
            assert_eq!(ipam.log(), ["work".to_string(), format!("ADD {ipam_type}")]);

            // A failed work: the IPAM plugin is never asked.
            let ipam = Recorder::default();
            let mut rb = Rollback::default();
            let e = ipam
                .add_alongside(&args(), ipam_type, 0, &mut rb, work(&ipam, true))
                .unwrap_err();
            assert_eq!(e.msg, "failed to create link");
            assert_eq!(ipam.log(), ["work"]);
            assert_eq!(rb.len(), 1);
        }
    }

    #[test]
    fn a_failed_ipam_add_is_reported_and_not_undone() {
        let ipam = Recorder {
            fail_add: true,
            ..Default::default()
        };
        for ipam_type in ["host-local", "dhcp"] {
            let mut rb = Rollback::default();
            let e = ipam
                .add_alongside(&args(), ipam_type, 0, &mut rb, work(&ipam, false))
                .unwrap_err();
            assert_eq!(e.msg, "no address left");
            // Only the work's undo: there is no lease to release.
            assert_eq!(rb.len(), 1);
        }
    }

    #[test]
    fn a_result_without_ips_is_refused_and_released() {
        let ipam = Recorder {
            no_ips: true,
            ..Default::default()
        };
        let mut rb = Rollback::default();
        let e = ipam
            .add_alongside(&args(), "host-local", 0, &mut rb, work(&ipam, false))
            .unwrap_err();
        assert_eq!(e.msg, "IPAM plugin returned missing IP config");
        assert_eq!(rb.len(), 2);
    }

    #[test]
    fn no_ipam_means_the_work_alone() {
        let ipam = Recorder::default();
        let mut rb = Rollback::default();
        let (worked, result) = ipam
            .add_alongside_if_set(&args(), "", 0, &mut rb, work(&ipam, false))
            .unwrap();
        assert_eq!((worked, result.is_none()), (7, true));
        assert_eq!(ipam.log(), ["work"]);
        let (ipam_outcome, ()) = ipam.call_alongside(&args(), "", "DEL", || ipam.note("delete"));
        assert!(ipam_outcome.is_ok());
        assert!(ipam.call_if_set(&args(), "", "GC").is_ok());
        assert_eq!(ipam.log(), ["work", "delete"]);
    }

    #[test]
    fn del_releases_link_dependent_ipam_before_the_link() {
        let ipam = Recorder::default();
        let (released, ()) =
            ipam.call_alongside(&args(), "dhcp", "DEL", || ipam.note("delete link"));
        assert!(released.is_ok());
        assert_eq!(ipam.log(), ["DEL dhcp", "delete link"]);

        let ipam = Recorder::default();
        let (released, ()) =
            ipam.call_alongside(&args(), "host-local", "DEL", || ipam.note("delete link"));
        assert!(released.is_ok());
        let mut log = ipam.log();
        log.sort();
        assert_eq!(log, ["DEL host-local", "delete link"]);
    }
}
