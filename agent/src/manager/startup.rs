//! Start-up retries, for any store: an attempt (connect, read the config) is made again on
//! failures worth retrying until the start-up timeout has passed (and not less: the last
//! back-off step is cut to the deadline).

use std::time::Duration;

use tokio::time::{sleep, Instant};

use crate::error::AgentError;
use crate::warn;

/// The outcome of one start-up attempt.
pub enum Attempt<T> {
    Done(T),
    /// Worth another try (the store not reachable yet).
    Retry(AgentError),
    /// Waiting would not help.
    Fatal(AgentError),
}

pub enum Retried {
    Fatal(AgentError),
    /// The deadline passed; `after` is the time actually spent.
    GaveUp {
        after: Duration,
        last: AgentError,
    },
}

/// First back-off step of the start-up retries; it doubles up to [`MAX_STARTUP_BACKOFF`].
const FIRST_STARTUP_BACKOFF: Duration = Duration::from_millis(250);
const MAX_STARTUP_BACKOFF: Duration = Duration::from_secs(2);
/// The least time an attempt gets, even right at the deadline.
const MIN_ATTEMPT: Duration = Duration::from_millis(100);

/// Runs `attempt(time left)` until it succeeds, fails fatally or `timeout` has passed. The
/// last back-off sleep is cut to end at the deadline and one final attempt runs there, so the
/// whole takes `timeout` plus at most [`MIN_ATTEMPT`] (and never gives up early).
/// `store` names the store in the log line of each retry.
pub async fn retry_until<T, F, Fut>(
    store: &str,
    timeout: Duration,
    mut attempt: F,
) -> Result<T, Retried>
where
    F: FnMut(Duration) -> Fut,
    Fut: std::future::Future<Output = Attempt<T>>,
{
    let started = Instant::now();
    let deadline = started + timeout;
    let mut backoff = FIRST_STARTUP_BACKOFF;
    loop {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(MIN_ATTEMPT);
        let e = match attempt(left).await {
            Attempt::Done(v) => return Ok(v),
            Attempt::Fatal(e) => return Err(Retried::Fatal(e)),
            Attempt::Retry(e) => e,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(Retried::GaveUp {
                after: now - started,
                last: e,
            });
        }
        let wait = backoff.min(deadline - now);
        warn!("{store} not reachable yet ({e}); retrying in {wait:?}");
        sleep(wait).await;
        backoff = (backoff * 2).min(MAX_STARTUP_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_error(detail: &str) -> AgentError {
        AgentError::Store {
            failure: crate::error::StoreFailure::Transient,
            source: detail.into(),
        }
    }

    /// With time paused, sleeps complete instantly and `Instant` follows the virtual clock.
    #[tokio::test(start_paused = true)]
    async fn start_up_retries_last_until_the_deadline_and_not_longer() {
        for secs in [1u64, 3, 10] {
            let timeout = Duration::from_secs(secs);
            let started = Instant::now();
            let mut attempts = 0;
            let out: Result<(), Retried> = retry_until("etcd", timeout, |_| {
                attempts += 1;
                async { Attempt::Retry(test_error("refused")) }
            })
            .await;
            let took = Instant::now() - started;
            match out {
                Err(Retried::GaveUp { after, .. }) => assert_eq!(after, took),
                _ => panic!("expected to give up"),
            }
            assert!(
                took >= timeout && took <= timeout + MIN_ATTEMPT,
                "{secs}s: {took:?}"
            );
            assert!(attempts >= 3, "{attempts}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn slow_attempts_are_bounded_by_the_time_left() {
        let started = Instant::now();
        let out: Result<(), Retried> =
            retry_until("etcd", Duration::from_secs(3), |left| async move {
                // An attempt that hangs until its bound (an etcd that accepts but never answers).
                sleep(left).await;
                Attempt::Retry(test_error("no answer in time"))
            })
            .await;
        let took = Instant::now() - started;
        assert!(matches!(out, Err(Retried::GaveUp { .. })));
        assert!(
            took >= Duration::from_secs(3) && took <= Duration::from_secs(3) + MIN_ATTEMPT,
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn fatal_errors_and_success_end_at_once() {
        let out: Result<(), Retried> = retry_until("etcd", Duration::from_secs(5), |_| async {
            Attempt::Fatal(AgentError::Usage("k".into()))
        })
        .await;
        assert!(matches!(out, Err(Retried::Fatal(_))));
        let mut n = 0;
        let out = retry_until("etcd", Duration::from_secs(5), |_| {
            n += 1;
            let v = n;
            async move {
                if v < 3 {
                    Attempt::Retry(test_error("y"))
                } else {
                    Attempt::Done(v)
                }
            }
        })
        .await;
        assert!(matches!(out, Ok(3)));
    }
}
