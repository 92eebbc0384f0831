//! The agent flags a backend brings, declared once as data in its registration: the options
//! parser reads them from the command line or their `FLANNELD_*` variable like every other
//! flag, `--help` lists them, and the backend gets their values when it starts
//! ([`Node::flag`](crate::backend::Node::flag)).

use std::collections::BTreeMap;

/// The prefix of the environment variables read for unset flags, as flanneld's.
const ENV_PREFIX: &str = "FLANNELD_";
/// Where a flag's help starts on its `--help` line.
const HELP_COLUMN: usize = 33;

/// One flag taking a value (`--udp-datapath MODE`).
#[derive(Debug)]
pub struct Flag {
    /// `--udp-datapath`; its environment variable is [`env_name`] of it.
    pub name: &'static str,
    /// What the value is called in `--help` (`MODE`, `PATH`).
    pub value: &'static str,
    /// Its `--help` text, one item per line.
    pub help: &'static [&'static str],
    /// The value when the flag is given neither on the command line nor in the environment.
    pub default: Option<&'static str>,
    /// Checks a value as the flag is read, so a bad one stops the agent before it starts;
    /// the error is worded after the value (`is not a udp data path (fast or per-packet)`).
    pub check: fn(&str) -> Result<(), String>,
    /// Whether a node annotation may set it for one node (Kubernetes mode): the annotation
    /// `<annotation prefix>/<name without -->`, which wins over the flag. For what differs
    /// from node to node (a rack's router, a node's AS), where a DaemonSet gives every node the
    /// same arguments.
    pub per_node: bool,
}

impl Flag {
    /// Any value will do (the backend reads it when it starts).
    pub fn any_value(_: &str) -> Result<(), String> {
        Ok(())
    }

    /// The annotation suffix of a [`Flag::per_node`] flag: `--bgp-as` -> `bgp-as`.
    pub fn annotation_suffix(&self) -> &'static str {
        self.name.trim_start_matches('-')
    }

    /// Its lines of `--help`.
    pub fn usage(&self) -> String {
        let head = format!("{} {}", self.name, self.value);
        let mut out = String::new();
        for (i, line) in self.help.iter().enumerate() {
            if i == 0 {
                let pad = (HELP_COLUMN - 2).saturating_sub(head.len()).max(2);
                out.push_str(&format!("  {head}{}{line}\n", " ".repeat(pad)));
            } else {
                out.push_str(&format!("{}{line}\n", " ".repeat(HELP_COLUMN)));
            }
        }
        out
    }
}

/// `--etcd-endpoints` -> `FLANNELD_ETCD_ENDPOINTS`.
pub fn env_name(flag: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        flag.trim_start_matches('-')
            .replace('-', "_")
            .to_uppercase()
    )
}

/// The values given for backends' flags, by flag name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlagValues(BTreeMap<&'static str, String>);

impl FlagValues {
    pub fn set(&mut self, flag: &'static Flag, value: String) {
        self.0.insert(flag.name, value);
    }

    /// The value given for `flag`, or its default.
    pub fn get(&self, flag: &Flag) -> Option<&str> {
        self.0.get(flag.name).map(String::as_str).or(flag.default)
    }

    /// Only the values of `flags` (what one backend is handed).
    pub fn only(&self, flags: &[Flag]) -> FlagValues {
        FlagValues(
            self.0
                .iter()
                .filter(|(name, _)| flags.iter().any(|f| f.name == **name))
                .map(|(name, value)| (*name, value.clone()))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static DIR: Flag = Flag {
        name: "--x-dir",
        value: "DIR",
        help: &["where x lives", "(default /run/x)"],
        default: Some("/run/x"),
        check: Flag::any_value,
        per_node: false,
    };
    static LONG: Flag = Flag {
        name: "--a-very-long-flag-name",
        value: "SECONDS",
        help: &["text"],
        default: None,
        check: Flag::any_value,
        per_node: false,
    };

    #[test]
    fn usage_lines_line_up_with_the_others() {
        assert_eq!(
            DIR.usage(),
            "  --x-dir DIR                    where x lives\n                                 (default /run/x)\n"
        );
        assert_eq!(LONG.usage(), "  --a-very-long-flag-name SECONDS  text\n");
        assert_eq!(env_name(DIR.name), "FLANNELD_X_DIR");
    }

    #[test]
    fn values_fall_back_to_defaults_and_are_handed_out_by_flag() {
        let mut v = FlagValues::default();
        assert_eq!(v.get(&DIR), Some("/run/x"));
        assert_eq!(v.get(&LONG), None);
        v.set(&DIR, "/tmp/x".into());
        v.set(&LONG, "5".into());
        assert_eq!(v.get(&DIR), Some("/tmp/x"));
        let only = v.only(std::slice::from_ref(&DIR));
        assert_eq!((only.get(&DIR), only.get(&LONG)), (Some("/tmp/x"), None));
    }
}
