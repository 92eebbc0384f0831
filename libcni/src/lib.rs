//! libcni: the CNI protocol (spec 0.1.0 – 1.1.0) for plugins and runtimes.
//!
//! Plugin side: [`skel`] (env + stdin → verb), [`result`] (results in every version and the
//! conversions between them), [`error`] (spec error codes), [`args`] (CNI_ARGS).
//! Runtime side: [`conf`] (conf-dir loading), [`invoke`] (exec and delegation), [`cache`]
//! (result cache), [`api`] (list operations ADD/CHECK/DEL/GC/STATUS).
//! This crate never touches netlink.

pub mod args;
pub mod boot;
pub mod error;
pub mod gojson;
pub mod result;
pub mod skel;
pub mod statefile;
pub mod validate;
pub mod version;

pub mod api;
pub mod attach_lock;
pub mod cache;
pub mod conf;
pub mod invoke;
pub mod linked;

pub use error::{CniError, ErrorCode};
pub use result::CniResult;

#[cfg(target_env = "musl")]
mod alloc;

/// The musl builds (the shipped plugins and cnitool) allocate with [`alloc::KeepingAllocator`]
/// rather than musl's own malloc; see that module for the measurements.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: alloc::KeepingAllocator = alloc::KeepingAllocator::new();
