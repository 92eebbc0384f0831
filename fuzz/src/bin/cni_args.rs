//! `CNI_ARGS` (`K=V;K2=V2`) as the skeleton hands it to plugins, and the reference's
//! `IgnoreUnknown` rule. Invariant: the pairs joined again are the text they came from.
#![no_main]

use ferrocni_fuzz::check_error;
use libcni::args;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let pairs = match args::parse_cni_args(text) {
        Ok(p) => p,
        Err(e) => return check_error(&e),
    };
    let joined: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    assert_eq!(joined.join(";"), text);
    for (k, v) in &pairs {
        assert!(!k.contains(';') && !k.contains('=') && !v.contains(';') && !v.contains('='));
        assert!(args::get(&pairs, k).is_some());
    }
    if let Err(e) = args::check_known(&pairs, &["IP", "MAC", "K8S_POD_NAME"]) {
        check_error(&e);
        assert!(!args::ignore_unknown(&pairs));
    }
});
