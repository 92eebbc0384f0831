//! Kernel failures as CNI errors, and collecting several failures into the first one.

use libcni::error::CniError;

/// A netkit failure as a CNI error: netkit's `From` conversion (bad input is a config error,
/// the rest internal), named for `map_err` call sites.
pub fn kernel(e: netkit::Error) -> CniError {
    CniError::from(e)
}

/// A netkit failure with an outer context: "`outer`: `cause`".
pub fn kernel_ctx(e: netkit::Error, outer: impl std::fmt::Display) -> CniError {
    context(kernel(e), outer)
}

/// Prepends `outer: ` to a CNI error's message, keeping its code.
pub fn context(e: CniError, outer: impl std::fmt::Display) -> CniError {
    CniError::new(e.code, format!("{outer}: {}", e.msg), e.details)
}

/// The outcome of several independent steps (DEL keeps going after a failure): the first
/// failure is reported, the others go to stderr.
#[derive(Default)]
pub struct Failures(Vec<CniError>);

impl Failures {
    pub fn note<T>(&mut self, r: Result<T, CniError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.0.push(e);
                None
            }
        }
    }

    pub fn finish(self, plugin: &str) -> Result<(), CniError> {
        let mut it = self.0.into_iter();
        let Some(first) = it.next() else {
            return Ok(());
        };
        for other in it {
            eprintln!("{plugin}: also failed: {other}");
        }
        Err(first)
    }
}
