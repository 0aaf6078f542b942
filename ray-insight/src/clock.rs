//! The recording threads' clock: nanoseconds since a layer's epoch, read
//! in a few nanoseconds.
//!
//! Every record is stamped, so the clock is on every record's path.
//! `Instant::now()` costs about 25 ns on this project's VM (a `clock_gettime`
//! through the vDSO), close to half a compact record's whole cost. Where the
//! kernel itself keeps time with the CPU's time-stamp counter (its clock
//! source is `tsc`, which it picks only when the counter is invariant and
//! synchronized across CPUs), the clock reads that counter (`rdtsc`, about
//! 10 ns) and scales it to nanoseconds.
//!
//! The scale is measured, not assumed. A reading is the clock's start
//! (a (counter, `Instant`) pair taken when it was made) plus the ticks
//! since, at the rate last measured: one atomic value, so a reader never
//! waits and never sees half an update. For the first millisecond the
//! clock reads `Instant`; then the rate is measured over the whole span
//! since the start, again each time the span has doubled, then every
//! [`RECALIBRATE_NANOS`], by whichever reading finds one due. Each
//! measurement puts the clock back on `Instant` (NTP's slewing included),
//! so a reading is off by at most what the rate's error gathered since the
//! last one: a few microseconds. That step can go either way, so the layer
//! keeps each thread's stamps in order itself (a stamp is never below the
//! thread's previous one). A counter found below the start (a counter reset
//! by a suspend) gives `Instant`'s reading. Elsewhere (other CPUs, other
//! clock sources) the clock is `Instant`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// The clock reads `Instant` until this long after it was made, then
/// scales the counter.
const CALIBRATE_AFTER_NANOS: u64 = 1_000_000;

/// How soon a measurement whose pair was loose is tried again.
const RETRY_NANOS: u64 = 100_000;

/// How often the counter's rate is measured again.
pub(crate) const RECALIBRATE_NANOS: u64 = 1_000_000_000;

/// Bits after the point in the scale (nanoseconds per tick).
const SCALE_BITS: u32 = 32;

/// A layer's clock.
#[derive(Debug)]
pub(crate) struct Clock {
    epoch: Instant,
    tsc: Option<Tsc>,
}

impl Clock {
    /// A clock whose zero is `epoch` (now, or very nearly).
    pub(crate) fn new(epoch: Instant) -> Self {
        let mut clock = Clock { epoch, tsc: None };
        clock.tsc = Tsc::start(&clock);
        clock
    }

    /// `Instant`'s reading: nanoseconds since the epoch.
    pub(crate) fn precise(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Nanoseconds since the epoch.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        match &self.tsc {
            Some(tsc) => tsc.now(self),
            None => self.precise(),
        }
    }
}

/// The time-stamp counter and its scale.
#[derive(Debug)]
struct Tsc {
    /// The counter when the clock was made...
    start: u64,
    /// ...and the clock's reading then (the epoch may be a little earlier).
    start_nanos: u64,
    /// Nanoseconds per tick, `SCALE_BITS` after the point; 0: not yet
    /// measured.
    scale: AtomicU64,
    /// When the rate is next measured (nanoseconds since the epoch).
    due: AtomicU64,
    /// Set while a thread measures the rate (the others go on).
    measuring: AtomicBool,
}

impl Tsc {
    /// The counter, if the kernel keeps time with it.
    fn start(clock: &Clock) -> Option<Tsc> {
        if !counter_is_the_clock_source() {
            return None;
        }
        // The tightest of three (counter, `Instant`) pairs: a thread
        // preempted between the readings of one gives a loose pair.
        let (start, start_nanos) = (0..3)
            .map(|_| {
                let first = ticks();
                let nanos = clock.precise();
                (ticks().saturating_sub(first), first, nanos)
            })
            .min()
            .map(|(_, first, nanos)| (first, nanos))?;
        Some(Tsc {
            start,
            start_nanos,
            scale: AtomicU64::new(0),
            due: AtomicU64::new(start_nanos.saturating_add(CALIBRATE_AFTER_NANOS)),
            measuring: AtomicBool::new(false),
        })
    }

    #[inline]
    fn now(&self, clock: &Clock) -> u64 {
        let now = ticks();
        let scale = self.scale.load(Ordering::Relaxed);
        if scale == 0 || now < self.start {
            let precise = clock.precise();
            if scale == 0 && precise >= self.due.load(Ordering::Relaxed) {
                self.measure(clock);
            }
            return precise;
        }
        let nanos = scaled(self.start, self.start_nanos, scale, now);
        if nanos >= self.due.load(Ordering::Relaxed) {
            return self.measure(clock).unwrap_or(nanos);
        }
        nanos
    }

    /// Measures the rate over the span since the start, unless another
    /// thread is at it or the pair read was loose (a thread preempted
    /// between its readings: tried again shortly). Returns the precise
    /// reading when it set a rate.
    #[cold]
    fn measure(&self, clock: &Clock) -> Option<u64> {
        if self
            .measuring
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        let first = ticks();
        let precise = clock.precise();
        let last = ticks();
        let spent = last.saturating_sub(self.start);
        let elapsed = precise.saturating_sub(self.start_nanos);
        let mut measured = None;
        if spent > 0 && first >= self.start && last.saturating_sub(first) <= spent / 100 {
            let rate = (u128::from(elapsed) << SCALE_BITS) / u128::from(spent);
            if let Ok(rate @ 1..) = u64::try_from(rate) {
                self.scale.store(rate, Ordering::Relaxed);
                measured = Some(precise);
            }
        }
        // Early on, again each time the span has doubled (a bad pair
        // weighs less each time), then every period; a loose pair is
        // retried after a short while, not by every reading.
        let next = match measured {
            Some(_) => elapsed.clamp(CALIBRATE_AFTER_NANOS, RECALIBRATE_NANOS),
            None => RETRY_NANOS,
        };
        self.due
            .store(precise.saturating_add(next), Ordering::Relaxed);
        self.measuring.store(false, Ordering::Release);
        measured
    }
}

/// `now` ticks as nanoseconds: `base_nanos` plus the ticks since
/// `base_ticks` at `scale` (saturating; a counter read before the base
/// counts as the base).
fn scaled(base_ticks: u64, base_nanos: u64, scale: u64, now: u64) -> u64 {
    let ticks = u128::from(now.saturating_sub(base_ticks));
    let nanos = (ticks * u128::from(scale)) >> SCALE_BITS;
    base_nanos.saturating_add(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Whether the kernel's clock source is the time-stamp counter (so the
/// counter is invariant and synchronized across CPUs: the kernel checks
/// both before it picks it).
fn counter_is_the_clock_source() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|source| source.trim() == "tsc")
}

/// The time-stamp counter (0 where there is none: never used there).
#[inline]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: every x86_64 CPU has `rdtsc`; it reads a counter and
        // touches no memory. Used only when the kernel keeps time with it
        // (see `counter_is_the_clock_source`); about 10 ns where
        // `Instant::now()` costs about 25 (insight bench).
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_adds_the_ticks_since_the_base_at_the_rate() {
        // 0.5 ns per tick.
        let half = 1u64 << (SCALE_BITS - 1);
        assert_eq!(scaled(100, 1_000, half, 300), 1_100);
        assert_eq!(scaled(100, 1_000, half, 50), 1_000, "before the base");
        assert_eq!(scaled(0, u64::MAX - 1, 1 << SCALE_BITS, 10), u64::MAX);
    }

    #[test]
    fn the_clock_follows_instant() {
        let clock = Clock::new(Instant::now());
        let mut checked = 0;
        let until = Instant::now() + std::time::Duration::from_millis(30);
        while Instant::now() < until {
            let before = clock.precise();
            let now = clock.now();
            let after = clock.precise();
            // Within 1 % (and 100 µs) of `Instant`: a reading cannot be
            // early or late by more than the scale's error.
            let slack = after / 100 + 100_000;
            assert!(
                now + slack >= before && now <= after + slack,
                "{before} ≤ {now} ≤ {after} (± {slack})"
            );
            checked += 1;
        }
        assert!(checked > 0);
        if let Some(tsc) = &clock.tsc {
            assert_ne!(
                tsc.scale.load(Ordering::Relaxed),
                0,
                "calibrated after the first millisecond"
            );
        }
    }
}
