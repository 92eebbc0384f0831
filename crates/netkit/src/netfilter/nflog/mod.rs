//! NFLOG: receiving the packets nf_tables `log group N` rules send to nfnetlink_log.
//!
//! * [`receiver`]: the socket bound to one group, non-blocking;
//! * [`message`]: the group's configuration request and its packet messages;
//! * [`flow`]: addresses, protocol and ports from a packet's first bytes.

pub mod flow;
pub mod message;
pub mod receiver;

pub use flow::{Flow, Transport};
pub use message::LoggedPacket;
pub use receiver::Receiver;
