//! Generic iptables/ip6tables helpers (the operations go-iptables offers the reference plugins).

use super::exec::{self, Error, Result};
pub use super::ip_family::Family;

/// The iptables-legacy tool names (Debian, Fedora, Alpine...).
fn legacy_name(family: Family, restore: bool) -> &'static str {
    match (family, restore) {
        (Family::V4, false) => "iptables-legacy",
        (Family::V6, false) => "ip6tables-legacy",
        (Family::V4, true) => "iptables-legacy-restore",
        (Family::V6, true) => "ip6tables-legacy-restore",
    }
}

/// Seconds to wait for the xtables lock held by a concurrent invocation.
const LOCK_WAIT_SECS: &str = "10";

/// One iptables binary (v4 or v6). Cheap to create; each call runs the tool once.
#[derive(Debug, Clone, Copy)]
pub struct Iptables {
    family: Family,
    /// Run `iptables-legacy` rather than the host's `iptables` (which is iptables-nft).
    legacy_named: bool,
}

/// One rule as printed by `-S`: the chain it is in and its match/target tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub chain: String,
    pub spec: Vec<String>,
}

impl Rule {
    /// The `-j`/`-g` target, if any.
    pub fn target(&self) -> Option<&str> {
        self.spec
            .windows(2)
            .find(|w| w[0] == "-j" || w[0] == "-g" || w[0] == "--jump" || w[0] == "--goto")
            .map(|w| w[1].as_str())
    }

    /// The `--comment` text, if any.
    pub fn comment(&self) -> Option<&str> {
        self.spec
            .windows(2)
            .find(|w| w[0] == "--comment")
            .map(|w| w[1].as_str())
    }
}

impl Iptables {
    /// The host's `iptables` / `ip6tables` command, whichever variant it is.
    pub fn new(family: Family) -> Iptables {
        Iptables {
            family,
            legacy_named: false,
        }
    }

    /// The tool that reaches the legacy (x_tables) tables: the host's `iptables` when it is
    /// iptables-legacy, else `iptables-legacy` when installed (next to an iptables-nft
    /// `iptables`), else the host's `iptables` all the same.
    pub fn legacy(family: Family) -> Iptables {
        let named = !super::host::iptables_is_legacy()
            && exec::find_tool(legacy_name(family, false)).is_some();
        Iptables {
            family,
            legacy_named: named,
        }
    }

    /// The tool for `table`'s rules on this host: the legacy tables' where
    /// [`super::host::HostView::place`] says they belong there, else the host's `iptables`.
    pub fn for_table(family: Family, table: &str) -> Iptables {
        if super::host::iptables_uses_nf_tables(family, table) {
            Iptables::new(family)
        } else {
            Iptables::legacy(family)
        }
    }

    pub fn family(&self) -> Family {
        self.family
    }

    /// "iptables" or "ip6tables" ("iptables-legacy"... for [`Iptables::legacy`]).
    pub fn tool(&self) -> &'static str {
        if self.legacy_named {
            return legacy_name(self.family, false);
        }
        match self.family {
            Family::V4 => "iptables",
            Family::V6 => "ip6tables",
        }
    }

    /// Whether the tool is installed (no run).
    pub fn is_installed(&self) -> bool {
        exec::find_tool(self.tool()).is_some()
    }

    /// Whether the tool is installed and can talk to the kernel (reference `SupportsIPTables`).
    pub fn is_usable(&self) -> bool {
        matches!(self.exec(&["-t", "filter", "-S", "INPUT"], "probe"), Ok(o) if o.success)
    }

    fn exec(&self, args: &[&str], context: &str) -> Result<exec::Output> {
        let mut full = Vec::with_capacity(args.len() + 2);
        full.extend_from_slice(&["-w", LOCK_WAIT_SECS]);
        full.extend_from_slice(args);
        exec::run(self.tool(), &full, None, context)
    }

    fn exec_ok(&self, args: &[&str], context: &str) -> Result<String> {
        let out = self.exec(args, context)?;
        if out.success {
            Ok(out.stdout)
        } else {
            Err(exec::failed(self.tool(), args, &out, context))
        }
    }

    /// Runs arbitrary iptables arguments (the `-w` flag is added).
    pub fn run(&self, args: &[&str]) -> Result<String> {
        self.exec_ok(args, &format!("{} failed", self.tool()))
    }

    /// Creates `chain` in `table` unless it exists.
    pub fn ensure_chain(&self, table: &str, chain: &str) -> Result<()> {
        let ctx = format!("failed to create {} chain {table}/{chain}", self.tool());
        let out = self.exec(&["-t", table, "-N", chain], &ctx)?;
        if out.success || out.stderr.contains("already exists") {
            return Ok(());
        }
        Err(exec::failed(
            self.tool(),
            &["-t", table, "-N", chain],
            &out,
            &ctx,
        ))
    }

    /// Whether `chain` exists in `table` (a listing of that chain alone).
    pub fn chain_exists(&self, table: &str, chain: &str) -> Result<bool> {
        let ctx = format!("failed to look up {} chain {table}/{chain}", self.tool());
        let args = ["-t", table, "-S", chain];
        let out = self.exec(&args, &ctx)?;
        if out.success {
            return Ok(true);
        }
        if exec::is_not_found_text(&out.stderr) || out.stderr.contains("incompatible") {
            return Ok(false);
        }
        Err(exec::failed(self.tool(), &args, &out, &ctx))
    }

    /// Names of the user and builtin chains of `table`.
    pub fn list_chains(&self, table: &str) -> Result<Vec<String>> {
        let ctx = format!("failed to list {} chains of table {table}", self.tool());
        let out = self.exec_ok(&["-t", table, "-S"], &ctx)?;
        let mut chains = Vec::new();
        for line in out.lines() {
            let tokens = split_rule_line(line).map_err(|d| parse_err(self.tool(), &ctx, d))?;
            if tokens.len() >= 2 && (tokens[0] == "-N" || tokens[0] == "-P") {
                chains.push(tokens[1].clone());
            }
        }
        Ok(chains)
    }

    /// Whether the exact rule is present in `chain` (`-C`). A missing chain counts as absent.
    pub fn exists(&self, table: &str, chain: &str, rule: &[&str]) -> Result<bool> {
        let ctx = format!("failed to check a rule in {} {table}/{chain}", self.tool());
        let args = rule_args(table, "-C", chain, None, rule);
        let out = self.exec(&args, &ctx)?;
        if out.success {
            return Ok(true);
        }
        if out.code == Some(1) {
            return Ok(false);
        }
        Err(exec::failed(self.tool(), &args, &out, &ctx))
    }

    /// Appends the rule unless an identical one exists.
    pub fn append_unique(&self, table: &str, chain: &str, rule: &[&str]) -> Result<()> {
        if self.exists(table, chain, rule)? {
            return Ok(());
        }
        let ctx = format!("failed to append a rule to {} {table}/{chain}", self.tool());
        self.exec_ok(&rule_args(table, "-A", chain, None, rule), &ctx)
            .map(|_| ())
    }

    /// Inserts the rule at `position` (1-based) unless an identical one exists anywhere.
    pub fn insert_unique(
        &self,
        table: &str,
        chain: &str,
        position: u32,
        rule: &[&str],
    ) -> Result<()> {
        if self.exists(table, chain, rule)? {
            return Ok(());
        }
        let ctx = format!(
            "failed to insert a rule into {} {table}/{chain}",
            self.tool()
        );
        let pos = position.to_string();
        self.exec_ok(&rule_args(table, "-I", chain, Some(&pos), rule), &ctx)
            .map(|_| ())
    }

    /// Deletes one instance of the rule; `Ok(false)` when it (or the chain) was not there.
    pub fn delete_rule(&self, table: &str, chain: &str, rule: &[&str]) -> Result<bool> {
        let ctx = format!(
            "failed to delete a rule from {} {table}/{chain}",
            self.tool()
        );
        let args = rule_args(table, "-D", chain, None, rule);
        let out = self.exec(&args, &ctx)?;
        if out.success {
            return Ok(true);
        }
        if exec::is_not_found_text(&out.stderr) {
            return Ok(false);
        }
        Err(exec::failed(self.tool(), &args, &out, &ctx))
    }

    /// The rules of `chain` (`-S chain`), in order. A missing chain yields an empty list.
    pub fn list_rules(&self, table: &str, chain: &str) -> Result<Vec<Rule>> {
        let ctx = format!("failed to list {} rules of {table}/{chain}", self.tool());
        let out = self.exec(&["-t", table, "-S", chain], &ctx)?;
        if !out.success {
            if exec::is_not_found_text(&out.stderr) {
                return Ok(Vec::new());
            }
            return Err(exec::failed(
                self.tool(),
                &["-t", table, "-S", chain],
                &out,
                &ctx,
            ));
        }
        parse_rules(&out.stdout).map_err(|d| parse_err(self.tool(), &ctx, d))
    }

    /// Removes every rule of `chain`; `Ok(false)` when the chain does not exist.
    pub fn clear_chain(&self, table: &str, chain: &str) -> Result<bool> {
        let ctx = format!("failed to flush {} chain {table}/{chain}", self.tool());
        let out = self.exec(&["-t", table, "-F", chain], &ctx)?;
        if out.success {
            return Ok(true);
        }
        if exec::is_not_found_text(&out.stderr) {
            return Ok(false);
        }
        Err(exec::failed(
            self.tool(),
            &["-t", table, "-F", chain],
            &out,
            &ctx,
        ))
    }

    /// Deletes the (empty, unreferenced) chain; `Ok(false)` when it does not exist.
    pub fn delete_chain(&self, table: &str, chain: &str) -> Result<bool> {
        let ctx = format!("failed to delete {} chain {table}/{chain}", self.tool());
        let out = self.exec(&["-t", table, "-X", chain], &ctx)?;
        if out.success {
            return Ok(true);
        }
        if exec::is_not_found_text(&out.stderr) {
            return Ok(false);
        }
        Err(exec::failed(
            self.tool(),
            &["-t", table, "-X", chain],
            &out,
            &ctx,
        ))
    }

    /// Flushes and deletes `chain` after removing the rules of `from_chains` that jump to it.
    /// Succeeds when nothing is there. Returns whether the chain existed.
    pub fn remove_chain_and_jumps(
        &self,
        table: &str,
        chain: &str,
        from_chains: &[&str],
    ) -> Result<bool> {
        for from in from_chains {
            for rule in self.list_rules(table, from)? {
                if rule.target() == Some(chain) {
                    let spec: Vec<&str> = rule.spec.iter().map(String::as_str).collect();
                    self.delete_rule(table, from, &spec)?;
                }
            }
        }
        if !self.clear_chain(table, chain)? {
            return Ok(false);
        }
        self.delete_chain(table, chain)
    }
}

impl Iptables {
    /// "iptables-restore" or "ip6tables-restore" (or their `-legacy-` variants).
    pub fn restore_tool(&self) -> &'static str {
        if self.legacy_named {
            return legacy_name(self.family, true);
        }
        match self.family {
            Family::V4 => "iptables-restore",
            Family::V6 => "ip6tables-restore",
        }
    }

    /// Applies several commands to `table` in ONE kernel transaction (`iptables-restore
    /// --noflush`): each line is an argument vector such as `["-A", "CHAIN", "-j", "ACCEPT"]`,
    /// `["-D", ...]`, `["-F", "CHAIN"]`, `["-X", "CHAIN"]`, or a chain declaration
    /// `[":CHAIN", "-", "[0:0]"]` (which creates the chain, or flushes it if it exists).
    /// All or nothing: a failing line leaves the table unchanged.
    pub fn restore(&self, table: &str, lines: &[Vec<String>]) -> Result<()> {
        let ctx = format!("failed to apply {} rules to table {table}", self.tool());
        let mut input = format!("*{table}\n");
        for line in lines {
            let mut rendered = Vec::with_capacity(line.len());
            for tok in line {
                rendered.push(quote_restore_token(tok).map_err(|detail| Error::Invalid {
                    context: ctx.clone(),
                    detail,
                })?);
            }
            input.push_str(&rendered.join(" "));
            input.push('\n');
        }
        input.push_str("COMMIT\n");
        exec::run_ok(
            self.restore_tool(),
            &["-w", LOCK_WAIT_SECS, "--noflush"],
            Some(input.as_bytes()),
            &ctx,
        )
        .map(|_| ())
    }
}

/// Quotes one token for iptables-restore input: plain when it has no special characters,
/// else in double quotes with `"` and `\` escaped. Line breaks cannot be expressed.
pub fn quote_restore_token(tok: &str) -> std::result::Result<String, String> {
    if tok.contains(['\n', '\r', '\0']) {
        return Err(format!("argument {tok:?} contains a line break or NUL"));
    }
    let plain = !tok.is_empty()
        && !tok
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '\\' || c == '\'' || c == '#');
    if plain {
        return Ok(tok.to_string());
    }
    let mut q = String::with_capacity(tok.len() + 2);
    q.push('"');
    for c in tok.chars() {
        if c == '"' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    Ok(q)
}

fn parse_err(tool: &str, ctx: &str, detail: String) -> Error {
    Error::Parse {
        context: ctx.to_string(),
        tool: tool.to_string(),
        detail,
    }
}

fn rule_args<'a>(
    table: &'a str,
    op: &'a str,
    chain: &'a str,
    pos: Option<&'a str>,
    rule: &[&'a str],
) -> Vec<&'a str> {
    let mut v = vec!["-t", table, op, chain];
    if let Some(p) = pos {
        v.push(p);
    }
    v.extend_from_slice(rule);
    v
}

/// Parses `-S` output into rules (lines starting with `-A`); `-N`/`-P` lines are skipped.
pub fn parse_rules(text: &str) -> std::result::Result<Vec<Rule>, String> {
    let mut rules = Vec::new();
    for line in text.lines() {
        let tokens = split_rule_line(line)?;
        if tokens.len() >= 2 && tokens[0] == "-A" {
            rules.push(Rule {
                chain: tokens[1].clone(),
                spec: tokens[2..].to_vec(),
            });
        }
    }
    Ok(rules)
}

/// Splits one line of `iptables -S` output into arguments, undoing its quoting: a token in
/// double quotes may contain spaces, and `\"` / `\\` inside it are escapes.
pub fn split_rule_line(line: &str) -> std::result::Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&first) = chars.peek() else { break };
        let mut tok = String::new();
        if first == '"' {
            chars.next();
            loop {
                match chars.next() {
                    Some('\\') => match chars.next() {
                        Some(c) => tok.push(c),
                        None => return Err(format!("dangling escape in {line:?}")),
                    },
                    Some('"') => break,
                    Some(c) => tok.push(c),
                    None => return Err(format!("unterminated quote in {line:?}")),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                tok.push(c);
                chars.next();
            }
        }
        tokens.push(tok);
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_quoted_comment() {
        let line = r#"-A POSTROUTING -s 10.0.0.5/32 -m comment --comment "name: \"n\" id: \"c\"" -j CNI-x"#;
        let t = split_rule_line(line).unwrap();
        assert_eq!(
            t,
            [
                "-A",
                "POSTROUTING",
                "-s",
                "10.0.0.5/32",
                "-m",
                "comment",
                "--comment",
                r#"name: "n" id: "c""#,
                "-j",
                "CNI-x"
            ]
        );
        assert!(split_rule_line(r#"-A X "open"#).is_err());
    }

    #[test]
    fn restore_quoting_round_trips_through_the_listing_parser() {
        let comment = r#"name: "n" id: "c""#;
        let q = quote_restore_token(comment).unwrap();
        assert_eq!(q, r#""name: \"n\" id: \"c\"""#);
        assert_eq!(split_rule_line(&q).unwrap(), [comment]);
        assert_eq!(quote_restore_token("CNI-x").unwrap(), "CNI-x");
        assert_eq!(quote_restore_token("").unwrap(), "\"\"");
        assert!(quote_restore_token("a\nb").is_err());
    }

    #[test]
    fn parses_rules_and_targets() {
        let text = "-P POSTROUTING ACCEPT\n-N CNI-x\n-A POSTROUTING -s 10.0.0.5/32 -j CNI-x\n-A CNI-x -d 10.0.0.0/24 -m comment --comment \"a b\" -j ACCEPT\n";
        let rules = parse_rules(text).unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].target(), Some("CNI-x"));
        assert_eq!(rules[1].chain, "CNI-x");
        assert_eq!(rules[1].comment(), Some("a b"));
    }
}
