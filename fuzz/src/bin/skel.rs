//! The plugin skeleton end to end: a fuzzed CNI environment and stdin through
//! `skel::dispatch`, with a plugin that reads what plugins read from a request
//! (`prevResult`, `cni.dev/valid-attachments`, `CNI_ARGS`, `runtimeConfig`) and answers ADD
//! with the prevResult it was given. Invariant: whatever comes in, what the skeleton prints
//! is JSON: a result in the config's version, or an error with a spec code and a message.
//!
//! Input: `NAME=value` lines (the environment) up to the first empty line, then stdin.
#![no_main]

use ferrocni_fuzz::{check_error, check_outcome, PairsEnv};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{dispatch, CmdArgs, Plugin};
use libfuzzer_sys::fuzz_target;

struct Reader;

impl Reader {
    fn read(args: &CmdArgs) -> Result<Option<CniResult>, CniError> {
        let pairs = args.cni_args()?;
        libcni::args::check_known(&pairs, &["IP", "MAC", "K8S_POD_NAME", "K8S_POD_NAMESPACE"])?;
        let _ = libcni::args::get(&pairs, "IP");
        let _ = args.runtime_config("portMappings");
        let _ = args.decode_config::<serde_json::Value>();
        let _ = args.valid_attachments().map_err(|e| check_error(&e));
        args.prev_result()
    }
}

impl Plugin for Reader {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        Ok(Self::read(args)?.unwrap_or_default())
    }
    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        Self::read(args).map(drop)
    }
    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        Self::read(args).map(drop)
    }
    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        args.valid_attachments().map(drop)
    }
}

fuzz_target!(|data: &[u8]| {
    let (env_text, stdin) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &[][..]),
    };
    let env = PairsEnv(
        String::from_utf8_lossy(env_text)
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    let outcome = dispatch(&Reader, &env, &mut &stdin[..]);
    check_outcome(&outcome);
});
