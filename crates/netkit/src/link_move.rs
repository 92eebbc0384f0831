//! Moving a link into another network namespace (`ip link set dev X netns NS`).
//!
//! The link keeps its name, so a name taken in the target fails the move (EEXIST) and leaves
//! the link where it was. (A rename in the same request is applied only after the move, so a
//! clash there would leave the link moved but not renamed: callers rename in a separate step
//! and undo the move themselves when that fails.)

use std::os::fd::AsRawFd;

use crate::error::Result;
use crate::netlink::Socket;
use crate::netns::Netns;

impl Socket {
    /// Moves link `index` (of this socket's netns) into `ns`. It arrives down and without
    /// addresses, and may get another ifindex there (use its name to find it).
    pub fn move_link(&mut self, index: u32, ns: &Netns) -> Result<()> {
        let what = format!("move to netns {}", ns.path().display());
        self.set_link(index, &what, |b| b.setns_by_fd(ns.as_raw_fd()))
    }
}
