//! `ferrocni-agent`: the node agent keeping this node's subnet lease in etcd (flannel's layout)
//! and the VXLAN overlay in step with cluster membership.

mod acquire;
mod agent;
mod error;
mod etcd;
mod files;
mod ipip;
mod key;
mod lease;
mod log;
mod masquerade;
mod membership;
mod netconfig;
mod netconfig_v6;
mod node_addr;
mod options;
mod overlay;
mod startup;
mod store;
mod subnet_env;
mod template;
mod tunnel;
mod wgkey;
mod wireguard;

use std::process::ExitCode;

fn main() -> ExitCode {
    let opts = match options::parse(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{}", options::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("ferrocni-agent: {e}");
            return ExitCode::from(2);
        }
    };
    // One thread is plenty: the agent mostly waits on etcd; reconciles run as a child process.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(agent::run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log!("fatal: {e}");
            ExitCode::FAILURE
        }
    }
}
