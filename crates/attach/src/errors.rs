//! Kernel failures as CNI errors, and collecting several failures into the first one.

use libcni::error::CniError;

use crate::error::AttachError;

/// A netkit failure as a CNI error: netkit's `From` conversion (code 999, bad input
/// included), named for `map_err` call sites.
pub fn kernel(e: netkit::Error) -> CniError {
    CniError::from(e)
}

/// A netkit failure with an outer context: "`outer`: `cause`".
pub fn kernel_ctx(e: netkit::Error, outer: impl std::fmt::Display) -> CniError {
    AttachError::KernelContext {
        context: outer.to_string(),
        source: e,
    }
    .into()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_is_reported_after_every_step_ran() {
        let mut failures = Failures::default();
        assert_eq!(failures.note(Ok::<_, CniError>(3)), Some(3));
        assert_eq!(
            failures.note(Err::<(), _>(CniError::internal(
                "failed to delete link eth0"
            ))),
            None
        );
        failures.note(Err::<(), _>(CniError::invalid_config("second")));
        let e = failures.finish("t").unwrap_err();
        assert_eq!(
            (e.code, e.msg.as_str()),
            (999, "failed to delete link eth0")
        );
        assert!(Failures::default().finish("t").is_ok());
    }

    #[test]
    fn context_keeps_the_code() {
        let e = context(CniError::invalid_config("bad"), "failed to parse");
        assert_eq!((e.code, e.msg.as_str()), (7, "failed to parse: bad"));
        let e = kernel_ctx(
            netkit::Error::invalid("failed to add address 10.1.2.3/24 to eth0", "File exists"),
            "outer",
        );
        assert_eq!(
            (e.code, e.msg.as_str()),
            (
                999,
                "outer: failed to add address 10.1.2.3/24 to eth0: File exists"
            )
        );
    }
}
