//! What the vxlan backend fails on: its passes are the `vxlan` crate's reconcile, through the
//! overlay seam.

use crate::backend::overlay::OverlayError;

#[derive(Debug, thiserror::Error)]
pub enum VxlanError {
    #[error(transparent)]
    Overlay(#[from] OverlayError),
}
