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
//! The scale is measured, not assumed: for the first millisecond the clock
//! reads `Instant`; then it takes a pair (counter, `Instant`) and scales
//! the counter from the rate since it was made. Later pairs, taken by
//! whoever reads the clock when one is due (each time the span has doubled,
//! then every [`RECALIBRATE_NANOS`]), measure the rate again over the whole
//! span, going on from the clock's current reading: the time line has no
//! step back and follows `Instant` (NTP's slewing included) within the
//! error of one reading. Elsewhere (other CPUs, other clock sources) the
//! clock is `Instant`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The clock reads `Instant` until this long after it was made, then
/// scales the counter.
const CALIBRATE_AFTER_NANOS: u64 = 1_000_000;

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
    /// A seqlock over the scale: odd while a writer changes it.
    seq: AtomicU64,
    /// The counter at the last calibration.
    base_ticks: AtomicU64,
    /// The clock's reading at `base_ticks`.
    base_nanos: AtomicU64,
    /// Nanoseconds per tick, `SCALE_BITS` after the point; 0: not yet
    /// measured.
    scale: AtomicU64,
    /// When the next calibration is due (nanoseconds since the epoch).
    due: AtomicU64,
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
            seq: AtomicU64::new(0),
            base_ticks: AtomicU64::new(0),
            base_nanos: AtomicU64::new(0),
            scale: AtomicU64::new(0),
            due: AtomicU64::new(CALIBRATE_AFTER_NANOS),
        })
    }

    #[inline]
    fn now(&self, clock: &Clock) -> u64 {
        let now = ticks();
        let seq = self.seq.load(Ordering::Acquire);
        let (base_ticks, base_nanos, scale) = (
            self.base_ticks.load(Ordering::Relaxed),
            self.base_nanos.load(Ordering::Relaxed),
            self.scale.load(Ordering::Relaxed),
        );
        std::sync::atomic::fence(Ordering::Acquire);
        if seq & 1 == 1 || self.seq.load(Ordering::Relaxed) != seq {
            // A calibration is under way (its thread may be preempted):
            // this reading is `Instant`'s rather than a wait.
            return clock.precise();
        }
        let nanos = (scale != 0).then(|| scaled(base_ticks, base_nanos, scale, now));
        match nanos {
            Some(nanos) if nanos < self.due.load(Ordering::Relaxed) => nanos,
            Some(nanos) => self.calibrate(clock, Some(nanos)),
            None => match clock.precise() {
                early if early < CALIBRATE_AFTER_NANOS => early,
                _ => self.calibrate(clock, None),
            },
        }
    }

    /// Takes a (counter, `Instant`) pair and sets the scale from it, if no
    /// other thread is doing so; returns the clock's reading.
    #[cold]
    fn calibrate(&self, clock: &Clock, scaled_now: Option<u64>) -> u64 {
        let seq = self.seq.load(Ordering::Relaxed);
        if seq & 1 == 1
            || self
                .seq
                .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            // Another thread is at it: read the precise clock this once.
            return clock.precise();
        }
        // The odd sequence is seen before any of the stores below (readers
        // that see one of them then see the sequence change).
        std::sync::atomic::fence(Ordering::Release);
        // A pair read in one go: a thread preempted between the readings
        // would set a wrong rate, so a pair that took over 1 % of the span
        // is not used (the next reading tries again).
        let first = ticks();
        let precise = clock.precise();
        let last = ticks();
        let spent = last.saturating_sub(self.start);
        let mut reading = scaled_now.map_or(precise, |s| s.max(precise));
        if spent > 0 && last.saturating_sub(first) <= spent / 100 {
            // The rate over the whole span since the epoch: its error is
            // one reading's over the span, and shrinks as the span grows.
            let elapsed = precise.saturating_sub(self.start_nanos);
            let rate = (u128::from(elapsed) << SCALE_BITS) / u128::from(spent);
            let (from, rate) = match scaled_now {
                // Ahead of `Instant`: go on from the current reading (no
                // step back), slower, to be back on it within a period.
                Some(scaled) if scaled > precise => {
                    let period = u128::from(RECALIBRATE_NANOS);
                    let ahead = u128::from(scaled - precise).min(period / 2);
                    (scaled, rate * (period - ahead) / period)
                }
                // Behind (or the first measure): step forward to it.
                _ => (precise, rate),
            };
            if let Ok(rate) = u64::try_from(rate) {
                if rate > 0 {
                    reading = from;
                    self.base_ticks.store(last, Ordering::Relaxed);
                    self.base_nanos.store(from, Ordering::Relaxed);
                    self.scale.store(rate, Ordering::Relaxed);
                    // Early on, the rate is measured again each time the
                    // span has doubled (one bad reading weighs less each
                    // time), then every period.
                    let next = elapsed.clamp(CALIBRATE_AFTER_NANOS, RECALIBRATE_NANOS);
                    self.due
                        .store(precise.saturating_add(next), Ordering::Relaxed);
                }
            }
        }
        self.seq.store(seq + 2, Ordering::Release);
        reading
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
    fn the_clock_follows_instant_and_never_steps_back() {
        let clock = Clock::new(Instant::now());
        let mut last = 0;
        let mut checked = 0;
        let until = Instant::now() + std::time::Duration::from_millis(30);
        while Instant::now() < until {
            let before = clock.precise();
            let now = clock.now();
            let after = clock.precise();
            assert!(now >= last, "{now} after {last}");
            last = now;
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
