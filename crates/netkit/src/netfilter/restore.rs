//! Batched iptables changes with `iptables-restore --noflush` (added by the portmap/firewall
//! helper): one exec applies a whole set of rule changes atomically, instead of one exec per
//! rule. Callers build the script with [`Script`]; values are quoted in the restore format,
//! so no argument can start another command.

use super::exec::{self, Result};
use super::iptables::Iptables;

/// Seconds to wait for the xtables lock.
const LOCK_WAIT_SECS: &str = "10";

/// Quotes one argument for iptables-restore: plain when it has no special characters, else
/// in double quotes with `"` and `\` escaped.
pub fn quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/,!=+@%^[]".contains(c));
    if plain {
        return arg.to_string();
    }
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('"');
    for c in arg.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        // A line break would end the command: replace it (never expected in a rule).
        out.push(if c == '\n' || c == '\r' { ' ' } else { c });
    }
    out.push('"');
    out
}

/// An iptables-restore script for one table, applied with `--noflush` (existing chains and
/// rules not mentioned are left alone).
#[derive(Debug, Clone)]
pub struct Script {
    table: String,
    lines: Vec<String>,
}

impl Script {
    pub fn new(table: &str) -> Script {
        Script {
            table: table.to_string(),
            lines: Vec::new(),
        }
    }

    /// Declares `chain`: creates it, or FLUSHES it when it exists (restore semantics).
    pub fn declare_chain(&mut self, chain: &str) -> &mut Self {
        self.lines.push(format!(":{} - [0:0]", quote(chain)));
        self
    }

    /// `-A chain args...`
    pub fn append(&mut self, chain: &str, args: &[&str]) -> &mut Self {
        self.op("-A", chain, args)
    }

    /// `-I chain 1 args...` (insert at the top)
    pub fn insert_first(&mut self, chain: &str, args: &[&str]) -> &mut Self {
        let mut all = vec!["1"];
        all.extend_from_slice(args);
        self.op("-I", chain, &all)
    }

    /// `-D chain args...`
    pub fn delete(&mut self, chain: &str, args: &[&str]) -> &mut Self {
        self.op("-D", chain, args)
    }

    /// A rule line exactly as `iptables -S` printed it (already in restore syntax), with its
    /// leading `-A` replaced by `op` (e.g. "-D" to delete a listed rule).
    pub fn listed_rule(&mut self, op: &str, listed: &str) -> &mut Self {
        if let Some(rest) = listed.strip_prefix("-A ") {
            self.lines.push(format!("{op} {rest}"));
        }
        self
    }

    /// `-F chain`
    pub fn flush(&mut self, chain: &str) -> &mut Self {
        self.lines.push(format!("-F {}", quote(chain)));
        self
    }

    /// `-X chain`
    pub fn delete_chain(&mut self, chain: &str) -> &mut Self {
        self.lines.push(format!("-X {}", quote(chain)));
        self
    }

    fn op(&mut self, op: &str, chain: &str, args: &[&str]) -> &mut Self {
        let mut line = format!("{op} {}", quote(chain));
        for a in args {
            line.push(' ');
            line.push_str(&quote(a));
        }
        self.lines.push(line);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The restore input.
    pub fn text(&self) -> String {
        let mut s = format!("*{}\n", self.table);
        for l in &self.lines {
            s.push_str(l);
            s.push('\n');
        }
        s.push_str("COMMIT\n");
        s
    }

    /// Applies the script atomically with `ipt`'s restore tool; nothing to do when empty.
    pub fn apply(&self, ipt: &Iptables, context: &str) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let text = self.text();
        exec::run_ok(
            ipt.restore_tool(),
            &["-w", LOCK_WAIT_SECS, "--noflush"],
            Some(text.as_bytes()),
            context,
        )
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote("CNI-DN-abc"), "CNI-DN-abc");
        assert_eq!(quote("10.0.0.5/32"), "10.0.0.5/32");
        assert_eq!(
            quote(r#"dnat name: "n" id: "c""#),
            r#""dnat name: \"n\" id: \"c\"""#
        );
        assert_eq!(quote("a\nb"), "\"a b\"");
        assert_eq!(quote(""), "\"\"");
    }

    #[test]
    fn script_text() {
        let mut s = Script::new("nat");
        s.declare_chain("CNI-DN-x")
            .append("CNI-DN-x", &["-p", "tcp", "-j", "DNAT"]);
        s.listed_rule("-D", "-A CNI-HOSTPORT-DNAT -p tcp -j CNI-DN-x");
        s.flush("CNI-DN-y")
            .delete_chain("CNI-DN-y")
            .insert_first("POSTROUTING", &["-j", "X"]);
        assert_eq!(
            s.text(),
            "*nat\n:CNI-DN-x - [0:0]\n-A CNI-DN-x -p tcp -j DNAT\n-D CNI-HOSTPORT-DNAT -p tcp -j CNI-DN-x\n-F CNI-DN-y\n-X CNI-DN-y\n-I POSTROUTING 1 -j X\nCOMMIT\n"
        );
    }
}
