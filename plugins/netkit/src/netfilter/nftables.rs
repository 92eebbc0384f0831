//! Generic nftables helpers over `nft -j` (JSON in, JSON out).

use serde_json::{json, Value};

use super::exec::{self, Error, Result};

/// Whether `nft` is installed and can talk to the kernel (reference `SupportsNFTables`).
pub fn is_usable() -> bool {
    matches!(exec::run("nft", &["-j", "list", "tables"], None, "probe"), Ok(o) if o.success)
}

/// Applies a batch of nft JSON commands atomically (`nft -j -f -`).
pub fn apply(commands: Vec<Value>, context: &str) -> Result<()> {
    if commands.is_empty() {
        return Ok(());
    }
    let doc = json!({ "nftables": commands });
    let input = doc.to_string();
    exec::run_ok("nft", &["-j", "-f", "-"], Some(input.as_bytes()), context).map(|_| ())
}

/// `{"table": {...}}` identifying a table.
pub fn table(family: &str, name: &str) -> Value {
    json!({ "table": { "family": family, "name": name } })
}

/// `{"chain": {...}}` identifying a regular chain.
pub fn chain(family: &str, table: &str, name: &str) -> Value {
    json!({ "chain": { "family": family, "table": table, "name": name } })
}

/// A base chain: `type <kind> hook <hook> priority <prio>; policy accept`.
pub fn base_chain(
    family: &str,
    table: &str,
    name: &str,
    kind: &str,
    hook: &str,
    prio: i32,
) -> Value {
    json!({ "chain": { "family": family, "table": table, "name": name,
        "type": kind, "hook": hook, "prio": prio, "policy": "accept" } })
}

/// A rule with the given expression statements and optional comment.
pub fn rule(
    family: &str,
    table: &str,
    chain: &str,
    expr: Vec<Value>,
    comment: Option<&str>,
) -> Value {
    let mut r = json!({ "family": family, "table": table, "chain": chain, "expr": expr });
    if let Some(c) = comment {
        r["comment"] = Value::String(c.to_string());
    }
    json!({ "rule": r })
}

/// `{"add": obj}`
pub fn add(obj: Value) -> Value {
    json!({ "add": obj })
}

/// `{"flush": obj}`
pub fn flush(obj: Value) -> Value {
    json!({ "flush": obj })
}

/// `{"delete": obj}`
pub fn delete(obj: Value) -> Value {
    json!({ "delete": obj })
}

/// Deletion of one rule by handle.
pub fn delete_rule(family: &str, table: &str, chain: &str, handle: u64) -> Value {
    json!({ "delete": { "rule": { "family": family, "table": table, "chain": chain, "handle": handle } } })
}

/// One rule as listed by `nft -j list chain`.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedRule {
    pub handle: u64,
    pub comment: Option<String>,
    pub expr: Value,
}

/// The rules of a chain; `Ok(None)` when the table or chain does not exist.
pub fn list_chain(family: &str, table: &str, chain: &str) -> Result<Option<Vec<ListedRule>>> {
    let ctx = format!("failed to list nftables chain {family} {table} {chain}");
    let args = ["-j", "list", "chain", family, table, chain];
    let out = exec::run("nft", &args, None, &ctx)?;
    if !out.success {
        if exec::is_not_found_text(&out.stderr) {
            return Ok(None);
        }
        return Err(exec::failed("nft", &args, &out, &ctx));
    }
    parse_rules(&out.stdout)
        .map(Some)
        .map_err(|detail| Error::Parse {
            context: ctx,
            tool: "nft".into(),
            detail,
        })
}

/// Starts listing a chain in the background (see [`finish_list_chain`]).
pub fn spawn_list_chain(family: &str, table: &str, chain: &str) -> Result<exec::Pending> {
    let ctx = format!("failed to list nftables chain {family} {table} {chain}");
    exec::spawn("nft", &["-j", "list", "chain", family, table, chain], &ctx)
}

/// Completes [`spawn_list_chain`]: the rules, or `None` when the table or chain does not exist.
pub fn finish_list_chain(
    p: exec::Pending,
    family: &str,
    table: &str,
    chain: &str,
) -> Result<Option<Vec<ListedRule>>> {
    let ctx = format!("failed to list nftables chain {family} {table} {chain}");
    let out = p.wait()?;
    if !out.success {
        if exec::is_not_found_text(&out.stderr) {
            return Ok(None);
        }
        return Err(exec::failed(
            "nft",
            &["-j", "list", "chain", family, table, chain],
            &out,
            &ctx,
        ));
    }
    parse_rules(&out.stdout)
        .map(Some)
        .map_err(|detail| Error::Parse {
            context: ctx,
            tool: "nft".into(),
            detail,
        })
}

/// Whether a table exists.
pub fn table_exists(family: &str, name: &str) -> Result<bool> {
    let ctx = format!("failed to list nftables table {family} {name}");
    let args = ["-j", "list", "table", family, name];
    let out = exec::run("nft", &args, None, &ctx)?;
    if out.success {
        return Ok(true);
    }
    if exec::is_not_found_text(&out.stderr) {
        return Ok(false);
    }
    Err(exec::failed("nft", &args, &out, &ctx))
}

/// Extracts the rules from `nft -j list ...` output.
pub fn parse_rules(text: &str) -> std::result::Result<Vec<ListedRule>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let items = doc
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or("no \"nftables\" array")?;
    let mut rules = Vec::new();
    for item in items {
        let Some(r) = item.get("rule") else { continue };
        let handle = r
            .get("handle")
            .and_then(Value::as_u64)
            .ok_or("rule without handle")?;
        rules.push(ListedRule {
            handle,
            comment: r.get("comment").and_then(Value::as_str).map(str::to_string),
            expr: r.get("expr").cloned().unwrap_or(Value::Null),
        });
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listing() {
        let text = r#"{"nftables":[{"metainfo":{"version":"1.0.6"}},{"chain":{"family":"inet","table":"t","name":"c","handle":1}},
            {"rule":{"family":"inet","table":"t","chain":"c","handle":4,"comment":"abc","expr":[{"masquerade":null}]}},
            {"rule":{"family":"inet","table":"t","chain":"c","handle":5,"expr":[]}}]}"#;
        let rules = parse_rules(text).unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].handle, 4);
        assert_eq!(rules[0].comment.as_deref(), Some("abc"));
        assert_eq!(rules[1].comment, None);
        assert!(parse_rules("{}").is_err());
    }

    #[test]
    fn builders_make_nft_json() {
        let r = rule("inet", "t", "c", vec![json!({"accept": null})], Some("x"));
        assert_eq!(r["rule"]["comment"], "x");
        assert_eq!(add(table("inet", "t"))["add"]["table"]["name"], "t");
    }
}
