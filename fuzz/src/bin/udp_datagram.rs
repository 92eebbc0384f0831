//! A message on the udp backend's port (8285), as its fast receive path reads it: anyone who
//! can reach the port sends one. A flags byte, the UDP GRO segment size, then the message; its
//! datagrams checked, the accepted ones coalesced into TUN writes. Invariants: every accepted
//! packet is valid IPv4 and written exactly once, each write behind a virtio-net header.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    udp_proxy::fuzzing::receive(data);
});
