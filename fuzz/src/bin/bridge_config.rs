//! The bridge plugin's config (`config::load`: the config on stdin, runtime config, CNI_ARGS),
//! for every verb the config's version allows. Invariants: a refusal is a well-formed CNI
//! error; an accepted config has VLAN IDs the kernel takes.
#![no_main]

use bridge::config;
use ferrocni_fuzz::{load_per_verb, split_config};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (stdin, cni_args) = split_config(data);
    load_per_verb(stdin, &cni_args, config::load, |_, conf| {
        assert!(conf.vlan <= 4094, "vlan {} accepted", conf.vlan);
        if let Some(trunk) = &conf.trunk {
            assert!(
                trunk.iter().all(|&id| (1..=4094).contains(&id)),
                "{trunk:?}"
            );
        }
        let _ = (conf.is_layer3(), conf.uses_vlans(), conf.native_vlan());
    });
});
