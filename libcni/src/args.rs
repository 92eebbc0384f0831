//! CNI_ARGS (`K=V;K2=V2`) parsing with the reference's `IgnoreUnknown` rule.

use crate::error::CniError;

/// Splits CNI_ARGS into pairs; every pair must split into exactly two parts on `=`.
pub fn parse_cni_args(s: &str) -> Result<Vec<(String, String)>, CniError> {
    let mut out = Vec::new();
    if s.is_empty() {
        return Ok(out);
    }
    for pair in s.split(';') {
        let mut kv = pair.split('=');
        match (kv.next(), kv.next(), kv.next()) {
            (Some(k), Some(v), None) => out.push((k.to_string(), v.to_string())),
            _ => {
                return Err(CniError::invalid_env(format!(
                    "ARGS: invalid pair {pair:?}"
                )));
            }
        }
    }
    Ok(out)
}

/// True when `IgnoreUnknown` is set to a true value (`1`, `true`, case-insensitive).
pub fn ignore_unknown(pairs: &[(String, String)]) -> bool {
    pairs
        .iter()
        .any(|(k, v)| k == "IgnoreUnknown" && (v == "1" || v.eq_ignore_ascii_case("true")))
}

/// Errors on keys outside `known` (plus `IgnoreUnknown`) unless IgnoreUnknown is set.
pub fn check_known(pairs: &[(String, String)], known: &[&str]) -> Result<(), CniError> {
    if ignore_unknown(pairs) {
        return Ok(());
    }
    // Go's `types.LoadArgs` lists the whole pairs, formatted with `%q` (`["A=1" "B=2"]`).
    let unknown: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k != "IgnoreUnknown" && !known.contains(&k.as_str()))
        .map(|(k, v)| format!("{:?}", format!("{k}={v}")))
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(CniError::internal(format!(
            "ARGS: unknown args [{}]",
            unknown.join(" ")
        )))
    }
}

/// The value of `key`, last one wins.
pub fn get<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pairs() {
        let p = parse_cni_args("IP=10.0.0.5;K8S_POD_NAME=x").unwrap();
        assert_eq!(get(&p, "IP"), Some("10.0.0.5"));
        assert!(parse_cni_args("").unwrap().is_empty());
        assert!(parse_cni_args("a=b=c").is_err());
        assert!(parse_cni_args("novalue").is_err());
        assert!(parse_cni_args("a=1;;b=2").is_err());
    }

    #[test]
    fn unknown_keys() {
        let p = parse_cni_args("IP=1.2.3.4;FOO=bar").unwrap();
        let e = check_known(&p, &["IP"]).unwrap_err();
        assert_eq!(e.code, 999);
        assert!(e.msg.contains("FOO"));
        let p = parse_cni_args("IgnoreUnknown=1;FOO=bar").unwrap();
        assert!(check_known(&p, &["IP"]).is_ok());
        let p = parse_cni_args("IgnoreUnknown=true;FOO=bar").unwrap();
        assert!(check_known(&p, &["IP"]).is_ok());
    }
}
