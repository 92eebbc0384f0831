//! What the udp backend fails on.

#[derive(Debug, thiserror::Error)]
pub enum UdpError {
    /// The underlay interface, `flannel0` or its route (the text says which, and what the
    /// kernel answered).
    #[error("{0}")]
    Kernel(String),
    /// The packet engine would not start.
    #[error("the udp backend's packet engine: {0}")]
    Engine(String),
}
