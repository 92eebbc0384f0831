//! What the main plugins (bridge, ptp, macvlan, ipvlan, vlan, host-device, dummy, tap) share, on top
//! of `libcni` (protocol) and `netkit` (kernel): IPAM delegation, addressing the container
//! interface from a result (Go `ipam.ConfigureIface`), CHECK of a prevResult against the
//! kernel, new links under a temporary name, rollback of a failed ADD and a tolerant DEL, and
//! the netfilter seam (masquerade, spoof check) of bridge and ptp.
//!
//! The steps are generic over netkit's [`netkit::Kernel`], [`ipam::Ipam`] and
//! [`netfilter::Netfilter`] (the `*_with` functions and the trait methods), so a plugin's
//! ADD/DEL/CHECK can run on netkit's fake kernel in unit tests (see [`testing`], feature
//! `fake`); the functions without `_with` are the same steps on the live kernel and the
//! executed IPAM plugin.

pub mod check;
pub mod conf;
pub mod configure;
pub mod error;
pub mod errors;
pub mod ipam;
pub mod link;
pub mod netfilter;
pub mod rollback;
pub mod testing;
