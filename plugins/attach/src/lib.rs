//! What the main plugins (ptp, macvlan, ipvlan, vlan, host-device, dummy, tap) share, on top
//! of `libcni` (protocol) and `netkit` (kernel): IPAM delegation, addressing the container
//! interface from a result (Go `ipam.ConfigureIface`), CHECK of a prevResult against the
//! kernel, new links under a temporary name, rollback of a failed ADD and a tolerant DEL.

pub mod check;
pub mod conf;
pub mod configure;
pub mod errors;
pub mod ipam;
pub mod link;
pub mod rollback;
pub mod testing;
