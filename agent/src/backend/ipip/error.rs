//! What the ipip backend fails on.

#[derive(Debug, thiserror::Error)]
pub enum IpipError {
    /// The underlay interface, `flannel.ipip`, its address or its routes (the text says
    /// which, and what the kernel answered).
    #[error("{0}")]
    Kernel(String),
}
