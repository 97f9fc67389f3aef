//! Slow clients: the idle timeout, minimum transfer rate and deadline of an upload's body.
//!
//! An upload holds one of the `--max-concurrent-uploads` slots (and its spool directory)
//! from its body's first read to its reply. The idle timeout alone restarts with every
//! byte, so a token holder trickling a byte every few seconds would hold a slot forever,
//! and a few of them would starve every other upload. [`Pace`] judges the body as it
//! arrives:
//!
//! - **idle**: nothing at all for `--upload-idle-timeout` (400 `upload_timeout`);
//! - **rate**: fewer than `--upload-min-rate` × `--upload-rate-window` bytes in a window
//!   (408 `upload_too_slow`). Windows count only time spent *waiting for the client*:
//!   the server's own time writing to the spool is left out, so a slow disk or a busy
//!   machine never cuts a client. The first window is the grace period (nothing is judged
//!   before one full window), and a body that ends is never judged on its last, partial
//!   window;
//! - **deadline**: the body not complete `--upload-deadline` after its first read (408
//!   `upload_deadline`), however fast it goes: this bounds how long a client that keeps
//!   the rate can hold a slot. Time queued for a slot is the server's doing and does not
//!   count; unpacking and publishing come after the body and are never cut (a publication
//!   that has begun runs to its end and journals it).
//!
//! [`Pace`] is pure (instants in, a verdict out) so its rules are tested without timers;
//! the spool's `RequestSpool::receive` drives it with the clock.

use super::limits::Limits;
use std::time::{Duration, Instant};

/// Why a body was cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// Nothing arrived for the idle timeout.
    Idle,
    /// A whole window brought `window_bytes`, fewer than the minimum rate asks.
    TooSlow {
        /// Bytes the window brought.
        window_bytes: u64,
    },
    /// The deadline passed before the body ended.
    Deadline,
}

/// The pace of one body: what it received, in which window, and when it must end.
#[derive(Debug, Clone)]
pub(crate) struct Pace {
    idle: Duration,
    min_rate: u64,
    window: Duration,
    deadline_at: Instant,
    idle_waited: Duration,
    window_waited: Duration,
    window_bytes: u64,
    received: u64,
}

/// `now + d`, or a far future when that does not fit an `Instant` (a limit of
/// `u64::MAX` seconds means "never" in practice).
fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 86_400))
}

impl Pace {
    /// A body whose first read starts at `now`.
    pub(crate) fn new(limits: &Limits, now: Instant) -> Pace {
        Pace {
            idle: limits.idle_timeout,
            min_rate: limits.min_rate,
            window: limits.rate_window,
            deadline_at: after(now, limits.deadline),
            idle_waited: Duration::ZERO,
            window_waited: Duration::ZERO,
            window_bytes: 0,
            received: 0,
        }
    }

    /// Bytes received so far.
    pub(crate) fn received(&self) -> u64 {
        self.received
    }

    /// The window's length.
    pub(crate) fn window(&self) -> Duration {
        self.window
    }

    /// Bytes a whole window must bring: `min_rate` × window, in whole bytes.
    pub(crate) fn window_minimum(&self) -> u64 {
        let bytes = u128::from(self.min_rate).saturating_mul(self.window.as_millis()) / 1000;
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }

    /// When a wait for the next piece of the body, begun at `now`, must stop to be
    /// judged: the idle timeout, the end of the current window or the deadline, whichever
    /// comes first.
    pub(crate) fn wake_at(&self, now: Instant) -> Instant {
        let idle = after(now, self.idle.saturating_sub(self.idle_waited));
        let window = after(now, self.window.saturating_sub(self.window_waited));
        idle.min(window).min(self.deadline_at)
    }

    /// Records a wait from `from` to `now` that brought `bytes` (`None`: it was stopped at
    /// [`Self::wake_at`] with nothing), and judges the body so far.
    pub(crate) fn record(
        &mut self,
        from: Instant,
        now: Instant,
        bytes: Option<u64>,
    ) -> Result<(), Cut> {
        let waited = now.saturating_duration_since(from);
        self.window_waited += waited;
        self.idle_waited += waited;
        if let Some(n) = bytes {
            self.idle_waited = Duration::ZERO;
            self.received = self.received.saturating_add(n);
            self.window_bytes = self.window_bytes.saturating_add(n);
        }
        if now >= self.deadline_at {
            return Err(Cut::Deadline);
        }
        if self.idle_waited >= self.idle {
            return Err(Cut::Idle);
        }
        if self.window_waited >= self.window {
            if self.window_bytes < self.window_minimum() {
                return Err(Cut::TooSlow {
                    window_bytes: self.window_bytes,
                });
            }
            self.window_waited = Duration::ZERO;
            self.window_bytes = 0;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(idle: u64, rate: u64, window: u64, deadline: u64) -> Limits {
        Limits {
            idle_timeout: Duration::from_secs(idle),
            min_rate: rate,
            rate_window: Duration::from_secs(window),
            deadline: Duration::from_secs(deadline),
            ..Limits::default()
        }
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn a_trickle_is_cut_at_the_end_of_the_first_window() {
        let t0 = Instant::now();
        let mut p = Pace::new(&limits(60, 1024, 30, 1800), t0);
        // One byte every 2 s: the idle timeout never fires, the first window judges it.
        let mut t = t0;
        for _ in 0..14 {
            assert_eq!(p.wake_at(t), t0 + secs(30.0));
            let next = t + secs(2.0);
            assert_eq!(p.record(t, next, Some(1)), Ok(()));
            t = next;
        }
        assert_eq!(p.wake_at(t), t0 + secs(30.0));
        let next = t + secs(2.0);
        assert_eq!(
            p.record(t, next, None),
            Err(Cut::TooSlow { window_bytes: 14 })
        );
        assert_eq!(p.received(), 14);
    }

    #[test]
    fn a_body_at_the_rate_goes_on_window_after_window() {
        let t0 = Instant::now();
        let mut p = Pace::new(&limits(60, 1024, 1, 1800), t0);
        let mut t = t0;
        for _ in 0..100 {
            let next = t + secs(0.25);
            assert_eq!(p.record(t, next, Some(256)), Ok(()));
            t = next;
        }
        assert_eq!(p.received(), 25_600);
    }

    #[test]
    fn time_spent_writing_to_the_spool_is_not_counted() {
        let t0 = Instant::now();
        let mut p = Pace::new(&limits(60, 1024, 1, 1800), t0);
        // 600 bytes after 0.5 s of waiting, then the server spends 10 s on its disk, then
        // another 600 bytes after 0.5 s: 1200 bytes in one second of waiting.
        assert_eq!(p.record(t0, t0 + secs(0.5), Some(600)), Ok(()));
        let t = t0 + secs(10.5);
        assert_eq!(p.wake_at(t), t + secs(0.5));
        assert_eq!(p.record(t, t + secs(0.5), Some(600)), Ok(()));
    }

    #[test]
    fn idle_comes_before_the_rate_when_it_is_shorter() {
        let t0 = Instant::now();
        let mut p = Pace::new(&limits(1, 1024, 30, 1800), t0);
        assert_eq!(p.wake_at(t0), t0 + secs(1.0));
        assert_eq!(p.record(t0, t0 + secs(1.0), None), Err(Cut::Idle));
    }

    #[test]
    fn the_idle_timeout_runs_from_the_last_data_across_window_ends() {
        let t0 = Instant::now();
        let mut p = Pace::new(&limits(10, 1, 30, 1800), t0);
        assert_eq!(p.record(t0, t0 + secs(25.0), Some(100)), Ok(()));
        // The window ends at 30 s (and is fine); the idle timeout still ends at 35 s.
        let t = t0 + secs(25.0);
        assert_eq!(p.wake_at(t), t0 + secs(30.0));
        assert_eq!(p.record(t, t0 + secs(30.0), None), Ok(()));
        let t = t0 + secs(30.0);
        assert_eq!(p.wake_at(t), t0 + secs(35.0));
        assert_eq!(p.record(t, t0 + secs(35.0), None), Err(Cut::Idle));
    }

    #[test]
    fn the_deadline_cuts_a_body_that_keeps_the_rate() {
        let t0 = Instant::now();
        let mut p = Pace::new(&limits(60, 100, 1, 3), t0);
        let mut t = t0;
        let verdict = loop {
            let next = p.wake_at(t).min(t + secs(0.1));
            if let Err(cut) = p.record(t, next, Some(1024)) {
                break cut;
            }
            t = next;
        };
        assert_eq!(verdict, Cut::Deadline);
        assert!(t + secs(0.1) >= t0 + secs(3.0));
    }

    #[test]
    fn huge_limits_do_not_overflow() {
        let t0 = Instant::now();
        let mut p = Pace::new(&limits(u64::MAX, u64::MAX, u64::MAX, u64::MAX), t0);
        assert!(p.wake_at(t0) > t0 + secs(86_400.0 * 365.0));
        assert_eq!(p.window_minimum(), u64::MAX);
        assert_eq!(p.record(t0, t0 + secs(1.0), Some(u64::MAX)), Ok(()));
        assert_eq!(p.record(t0, t0 + secs(1.0), Some(u64::MAX)), Ok(()));
    }
}
