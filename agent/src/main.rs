//! `ferrocni-agent`: the node agent (see the library's documentation for its parts).

use std::process::ExitCode;

use ferrocni_agent::backend::registry;
use ferrocni_agent::node::install_cni;
use ferrocni_agent::ops::log;
use ferrocni_agent::policy::explain;
use ferrocni_agent::{agent, options};

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("install-cni") {
        return install_cni_main(&argv[1..]);
    }
    if argv.first().map(String::as_str) == Some("policy") {
        return policy_main(&argv[1..]);
    }
    let opts = match options::from_process() {
        Ok(options::Invocation::Run(o)) => *o,
        Ok(options::Invocation::Help) => {
            print!("{}", options::usage());
            return ExitCode::SUCCESS;
        }
        Ok(options::Invocation::ListBackends) => {
            print!("{}", registry::listing());
            return ExitCode::SUCCESS;
        }
        Ok(options::Invocation::Version) => {
            println!("{}", options::VERSION_LINE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("ferrocni-agent: {e}");
            return ExitCode::from(2);
        }
    };
    log::set_verbosity(opts.verbosity);
    ferrocni_agent::log!("{} starting", options::VERSION_LINE);
    // One thread is plenty: the agent mostly waits on etcd; reconciles run as a child process.
    let runtime = match one_thread_runtime() {
        Ok(rt) => rt,
        Err(e) => {
            log::emit(
                log::Level::Error,
                &format!("cannot start the async runtime: {e}"),
            );
            return ExitCode::FAILURE;
        }
    };
    // A LocalSet: the policy informers run beside the serve loop on the same thread.
    let local = tokio::task::LocalSet::new();
    match local.block_on(&runtime, agent::run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::emit(log::Level::Error, &format!("fatal: {e}"));
            ExitCode::FAILURE
        }
    }
}

/// `ferrocni-agent install-cni ...`: the container image's installer.
fn install_cni_main(args: &[String]) -> ExitCode {
    let opts = match install_cni::parse(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{}", install_cni::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("ferrocni-agent: {e}");
            return ExitCode::from(2);
        }
    };
    match install_cni::run(&opts) {
        Ok(installed) => {
            for p in installed {
                ferrocni_agent::log!("installed {}", p.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            log::emit(log::Level::Error, &format!("install-cni: {e}"));
            ExitCode::FAILURE
        }
    }
}

/// `ferrocni-agent policy explain ...`: the verdict of the policies on one flow.
fn policy_main(args: &[String]) -> ExitCode {
    if args.first().map(String::as_str) != Some("explain") {
        eprint!("{}", explain::USAGE);
        return ExitCode::from(2);
    }
    let query = match explain::parse(&args[1..]) {
        Ok(Some(q)) => q,
        Ok(None) => {
            print!("{}", explain::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("ferrocni-agent policy explain: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match one_thread_runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ferrocni-agent policy explain: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(explain::run(&query)) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ferrocni-agent policy explain: {e}");
            ExitCode::FAILURE
        }
    }
}

fn one_thread_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}
