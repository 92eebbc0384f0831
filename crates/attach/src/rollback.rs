//! Undo steps of an ADD, run newest first when it fails.

/// How to undo one step.
type UndoStep = Box<dyn FnOnce() -> Result<(), String>>;

/// Each step registers how to undo itself right after (or, when a partial application is
/// possible, right before) it succeeds.
#[derive(Default)]
pub struct Rollback {
    steps: Vec<(String, UndoStep)>,
}

impl Rollback {
    /// Registers an undo step; `what` names it in the log when it fails.
    pub fn push(
        &mut self,
        what: impl Into<String>,
        undo: impl FnOnce() -> Result<(), String> + 'static,
    ) {
        self.steps.push((what.into(), Box::new(undo)));
    }

    /// Best effort, newest first; failures are only logged (the ADD error is what matters).
    pub fn run(self, plugin: &str) {
        for (what, undo) in self.steps.into_iter().rev() {
            if let Err(e) = undo() {
                eprintln!("{plugin}: rollback after failed ADD: {what}: {e}");
            }
        }
    }

    /// Forgets every step (the ADD succeeded).
    pub fn disarm(mut self) {
        self.steps.clear();
    }

    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

/// Runs `steps` with a fresh rollback, which is run when they fail.
pub fn guarded<T>(
    plugin: &str,
    steps: impl FnOnce(&mut Rollback) -> Result<T, libcni::error::CniError>,
) -> Result<T, libcni::error::CniError> {
    let mut rollback = Rollback::default();
    match steps(&mut rollback) {
        Ok(v) => {
            rollback.disarm();
            Ok(v)
        }
        Err(e) => {
            rollback.run(plugin);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    #[test]
    fn undoes_newest_first_only_on_failure() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let r: Result<(), _> = guarded("t", |rb| {
            for n in 0..3 {
                let log = log.clone();
                rb.push(format!("step {n}"), move || {
                    log.borrow_mut().push(n);
                    if n == 1 {
                        Err("boom".into())
                    } else {
                        Ok(())
                    }
                });
            }
            Err(libcni::error::CniError::internal("fail"))
        });
        assert!(r.is_err());
        assert_eq!(*log.borrow(), [2, 1, 0]);
        let log2 = log.clone();
        let ok = guarded("t", move |rb| {
            rb.push("x", move || {
                log2.borrow_mut().push(9);
                Ok(())
            });
            Ok(7)
        });
        assert_eq!(ok.unwrap(), 7);
        assert_eq!(log.borrow().len(), 3);
    }
}
