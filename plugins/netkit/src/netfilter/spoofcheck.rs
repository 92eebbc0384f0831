//! MAC spoof checking on a bridge port (reference `pkg/link/spoofcheck.go`): frames entering
//! from the port must carry the container's MAC.
//!
//! Objects: table `bridge nat`, base chain `PREROUTING` (filter, prerouting, priority -300,
//! policy accept) with `iifname <port> jump cni-br-iface-<id>`; chain `cni-br-iface-<id>` jumps
//! to `cni-br-iface-<id>-mac`, which returns for `ether saddr <mac>` and drops the rest. Every
//! rule carries the comment `macspoofchk-<id>`, where `<id>` is `<containerID>-<ifname>`.

use serde_json::{json, Value};

use super::exec::Result;
use super::nftables as nft;

const FAMILY: &str = "bridge";
const TABLE: &str = "nat";
const BASE_CHAIN: &str = "PREROUTING";
const BASE_PRIORITY: i32 = -300;

/// The spoof checker of one attachment.
#[derive(Debug, Clone)]
pub struct SpoofChecker {
    iface: String,
    mac: String,
    ref_id: String,
}

impl SpoofChecker {
    /// `iface`: the host-side port; `mac`: the container MAC; `ref_id`: `<containerID>-<ifname>`.
    pub fn new(iface: &str, mac: &str, ref_id: &str) -> SpoofChecker {
        SpoofChecker {
            iface: iface.to_string(),
            mac: mac.to_string(),
            ref_id: ref_id.to_string(),
        }
    }

    /// The reference's unique ID of an attachment.
    pub fn ref_id_for(container_id: &str, ifname: &str) -> String {
        format!("{container_id}-{ifname}")
    }

    pub fn iface_chain(&self) -> String {
        format!("cni-br-iface-{}", self.ref_id)
    }

    pub fn mac_chain(&self) -> String {
        format!("{}-mac", self.iface_chain())
    }

    pub fn comment(&self) -> String {
        format!("macspoofchk-{}", self.ref_id)
    }

    /// Installs the chains and rules in one nft transaction.
    pub fn setup(&self) -> Result<()> {
        let (iface_chain, mac_chain, comment) =
            (self.iface_chain(), self.mac_chain(), self.comment());
        let c = Some(comment.as_str());
        let tx = vec![
            nft::add(nft::table(FAMILY, TABLE)),
            nft::add(nft::base_chain(
                FAMILY,
                TABLE,
                BASE_CHAIN,
                "filter",
                "prerouting",
                BASE_PRIORITY,
            )),
            nft::add(nft::chain(FAMILY, TABLE, &iface_chain)),
            nft::add(nft::chain(FAMILY, TABLE, &mac_chain)),
            nft::flush(nft::chain(FAMILY, TABLE, &iface_chain)),
            nft::flush(nft::chain(FAMILY, TABLE, &mac_chain)),
            nft::add(nft::rule(
                FAMILY,
                TABLE,
                BASE_CHAIN,
                vec![
                    json!({"match": {"op": "==", "left": {"meta": {"key": "iifname"}}, "right": self.iface}}),
                    json!({"jump": {"target": iface_chain}}),
                ],
                c,
            )),
            nft::add(nft::rule(
                FAMILY,
                TABLE,
                &iface_chain,
                vec![json!({"jump": {"target": mac_chain}})],
                c,
            )),
            nft::add(nft::rule(
                FAMILY,
                TABLE,
                &mac_chain,
                vec![
                    json!({"match": {"op": "==", "left": {"payload": {"protocol": "ether", "field": "saddr"}}, "right": self.mac}}),
                    json!({"return": null}),
                ],
                c,
            )),
            nft::add(nft::rule(
                FAMILY,
                TABLE,
                &mac_chain,
                vec![json!({"drop": null})],
                c,
            )),
        ];
        nft::apply(
            tx,
            &format!("failed to setup spoof-check on {}", self.iface),
        )
    }

    /// Removes the jump rule(s) and both chains; succeeds when they are already gone.
    /// Only `ref_id` matters here (the interface and MAC may be unknown at DEL time).
    pub fn teardown(&self) -> Result<()> {
        let ctx = format!("failed to teardown spoof-check {}", self.ref_id);
        let listing = match list_table() {
            Ok(Some(v)) => v,
            Ok(None) => return Ok(()),
            Err(e) => return Err(e.context(&ctx)),
        };
        nft::apply(self.teardown_ops(&listing), &ctx)
    }

    /// The nft commands removing this check's jump rule(s) and chains, as far as `listing`
    /// (the `bridge nat` table) holds them.
    fn teardown_ops(&self, listing: &Value) -> Vec<Value> {
        let comment = self.comment();
        let mut tx: Vec<Value> = rules_of(listing, BASE_CHAIN)
            .filter(|r| r.get("comment").and_then(Value::as_str) == Some(comment.as_str()))
            .filter_map(|r| r.get("handle").and_then(Value::as_u64))
            .map(|h| nft::delete_rule(FAMILY, TABLE, BASE_CHAIN, h))
            .collect();
        let chains = chain_names(listing);
        for chain in [self.iface_chain(), self.mac_chain()] {
            if chains.contains(&chain) {
                tx.push(nft::delete(nft::chain(FAMILY, TABLE, &chain)));
            }
        }
        tx
    }

    /// Whether the rules are installed (for CHECK).
    pub fn is_installed(&self) -> Result<bool> {
        let Some(listing) = list_table()? else {
            return Ok(false);
        };
        let comment = self.comment();
        let jump = rules_of(&listing, BASE_CHAIN)
            .any(|r| r.get("comment").and_then(Value::as_str) == Some(comment.as_str()));
        let mac_rules = rules_of(&listing, &self.mac_chain()).count();
        Ok(jump && mac_rules >= 2)
    }
}

/// GC: tears down the spoof checks that can no longer belong to a live attachment. One is stale
/// when its attachment is not in `valid` (`(containerID, ifname)` pairs) and either its bridge
/// port is gone (`port_exists` says no) or its jump rule is missing. Either way no pod can be
/// behind it, so this holds whichever network the attachment belonged to: the rules carry no
/// network name. Returns the reference IDs removed.
pub fn gc(
    valid: &[(String, String)],
    port_exists: impl FnMut(&str) -> bool,
) -> Result<Vec<String>> {
    let Some(listing) = list_table().map_err(|e| e.context("spoof-check GC"))? else {
        return Ok(Vec::new());
    };
    let valid: Vec<String> = valid
        .iter()
        .map(|(cid, ifname)| SpoofChecker::ref_id_for(cid, ifname))
        .collect();
    let stale = stale_ref_ids(&listing, &valid, port_exists);
    // One listing, one transaction for all of them.
    let tx: Vec<Value> = stale
        .iter()
        .flat_map(|id| SpoofChecker::new("", "", id).teardown_ops(&listing))
        .collect();
    nft::apply(tx, "spoof-check GC: failed to remove stale checks")?;
    Ok(stale)
}

/// The reference IDs `gc` removes, from a table listing.
fn stale_ref_ids(
    listing: &Value,
    valid: &[String],
    mut port_exists: impl FnMut(&str) -> bool,
) -> Vec<String> {
    let mut jumps: Vec<(String, Option<String>)> = Vec::new();
    for rule in rules_of(listing, BASE_CHAIN) {
        let Some(ref_id) = rule
            .get("comment")
            .and_then(Value::as_str)
            .and_then(|c| c.strip_prefix("macspoofchk-"))
        else {
            continue;
        };
        jumps.push((ref_id.to_string(), iifname_of(rule)));
    }
    let mut stale: Vec<String> = jumps
        .iter()
        .filter(|(_, port)| !port.as_deref().is_some_and(&mut port_exists))
        .map(|(id, _)| id.clone())
        .collect();
    // A chain pair left without its jump rule (cleaned up by hand, or half-removed).
    let chains = chain_names(listing);
    for chain in &chains {
        let Some(id) = chain.strip_prefix("cni-br-iface-") else {
            continue;
        };
        let pair = SpoofChecker::new("", "", id);
        if chains.contains(&pair.mac_chain()) && !jumps.iter().any(|(j, _)| j == id) {
            stale.push(id.to_string());
        }
    }
    stale.sort();
    stale.dedup();
    stale.retain(|id| !valid.contains(id));
    stale
}

/// The port a `iifname <port> jump ...` rule matches.
fn iifname_of(rule: &Value) -> Option<String> {
    rule.get("expr")?.as_array()?.iter().find_map(|e| {
        let m = e.get("match")?;
        (m.pointer("/left/meta/key")?.as_str()? == "iifname")
            .then(|| m.get("right")?.as_str().map(str::to_string))?
    })
}

/// `nft -j list table bridge nat`, or `None` when the table does not exist.
fn list_table() -> Result<Option<Value>> {
    let ctx = "failed to list nftables table bridge nat";
    let args = ["-j", "list", "table", FAMILY, TABLE];
    let out = super::exec::run("nft", &args, None, ctx)?;
    if !out.success {
        if super::exec::is_not_found_text(&out.stderr) {
            return Ok(None);
        }
        return Err(super::exec::failed("nft", &args, &out, ctx));
    }
    serde_json::from_str(&out.stdout)
        .map(Some)
        .map_err(|e| super::exec::Error::Parse {
            context: ctx.to_string(),
            tool: "nft".into(),
            detail: e.to_string(),
        })
}

fn items(listing: &Value) -> impl Iterator<Item = &Value> {
    listing
        .get("nftables")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn rules_of<'a>(listing: &'a Value, chain: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    items(listing)
        .filter_map(|i| i.get("rule"))
        .filter(move |r| r.get("chain").and_then(Value::as_str) == Some(chain))
}

fn chain_names(listing: &Value) -> Vec<String> {
    items(listing)
        .filter_map(|i| i.get("chain"))
        .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_reference() {
        let sc = SpoofChecker::new(
            "veth1",
            "02:00:00:00:00:01",
            &SpoofChecker::ref_id_for("cid", "eth0"),
        );
        assert_eq!(sc.iface_chain(), "cni-br-iface-cid-eth0");
        assert_eq!(sc.mac_chain(), "cni-br-iface-cid-eth0-mac");
        assert_eq!(sc.comment(), "macspoofchk-cid-eth0");
    }

    #[test]
    fn listing_helpers() {
        let v: Value = serde_json::from_str(
            r#"{"nftables":[{"chain":{"name":"PREROUTING"}},{"chain":{"name":"x"}},
            {"rule":{"chain":"PREROUTING","handle":3,"comment":"macspoofchk-a"}},{"rule":{"chain":"x","handle":4}}]}"#,
        )
        .unwrap();
        assert_eq!(chain_names(&v), ["PREROUTING", "x"]);
        assert_eq!(rules_of(&v, "PREROUTING").count(), 1);
    }

    fn jump(id: &str, port: &str) -> String {
        format!(
            r#"{{"rule":{{"chain":"PREROUTING","comment":"macspoofchk-{id}","expr":[
            {{"match":{{"op":"==","left":{{"meta":{{"key":"iifname"}}}},"right":"{port}"}}}},
            {{"jump":{{"target":"cni-br-iface-{id}"}}}}]}}}}"#
        )
    }

    fn chains(id: &str) -> String {
        format!(
            r#"{{"chain":{{"name":"cni-br-iface-{id}"}}}},{{"chain":{{"name":"cni-br-iface-{id}-mac"}}}}"#
        )
    }

    #[test]
    fn gc_selects_unlisted_attachments_whose_port_is_gone_or_jump_missing() {
        let listing: Value = serde_json::from_str(&format!(
            r#"{{"nftables":[{{"chain":{{"name":"PREROUTING"}}}},{},{},{},{},{},{},{},{}]}}"#,
            chains("live-eth0"),
            jump("live-eth0", "vethlive"),
            chains("gone-eth0"),
            jump("gone-eth0", "vethgone"),
            chains("valid-eth0"),
            jump("valid-eth0", "vethvalid"),
            chains("orphan-eth0"),
            // An attachment whose ifname is "mac": its iface chain ends in "-mac".
            chains("odd-mac"),
        ))
        .unwrap();
        let odd_jump: Value = serde_json::from_str(&jump("odd-mac", "vethodd")).unwrap();
        let mut listing = listing;
        listing["nftables"].as_array_mut().unwrap().push(odd_jump);
        let exists = |p: &str| p == "vethlive" || p == "vethodd";
        let valid = vec![
            SpoofChecker::ref_id_for("valid", "eth0"),
            SpoofChecker::ref_id_for("orphan-not", "eth0"),
        ];
        assert_eq!(
            stale_ref_ids(&listing, &valid, exists),
            vec!["gone-eth0".to_string(), "orphan-eth0".to_string()]
        );
    }
}
