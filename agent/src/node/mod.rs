//! What the agent writes on the node for the CNI plugins and the operator: `subnet.env`, the
//! rendered conflist, the container image's installer (`install-cni`), flanneld's masquerade
//! rules, and how the node's own addresses are found.

pub mod addr;
pub mod install_cni;
pub mod masquerade;
pub mod outputs;
pub mod subnet_env;
pub mod template;
