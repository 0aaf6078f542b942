//! A bounded process-wide string interner: decoded names, targets and field
//! keys become the `&'static str`s a [`Record`](crate::Record) holds.
//!
//! Each distinct string is leaked once and reused afterwards, so decoding the
//! same log twice, or a million batches naming `task.run`, costs no more
//! memory than decoding one. The leak is bounded: at most
//! [`MAX_INTERNED_STRINGS`] strings of at most [`MAX_INTERNED_LEN`] bytes each,
//! [`MAX_INTERNED_BYTES`] in all. Past a bound, [`intern`] returns
//! [`TOO_MANY_NAMES`] (or [`NAME_TOO_LONG`] for one over-long string) and
//! counts the refusal, which [`intern_stats`] reports. The runtime's schema
//! has a few hundred distinct names at most; the bounds are there for hostile
//! or corrupt input, not for normal logs.

use std::collections::HashSet;
use std::sync::OnceLock;

use parking_lot::Mutex;

/// The most distinct strings the interner keeps.
pub const MAX_INTERNED_STRINGS: usize = 65_536;

/// The most bytes the interned strings take in all.
pub const MAX_INTERNED_BYTES: usize = 8 << 20;

/// The longest string the interner keeps, in bytes.
pub const MAX_INTERNED_LEN: usize = 1024;

/// What [`intern`] returns once [`MAX_INTERNED_STRINGS`] or
/// [`MAX_INTERNED_BYTES`] is reached.
pub const TOO_MANY_NAMES: &str = "<too many names>";

/// What [`intern`] returns for a string longer than [`MAX_INTERNED_LEN`].
pub const NAME_TOO_LONG: &str = "<name too long>";

/// What the interner holds and what it refused (see [`intern_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InternStats {
    /// Distinct strings kept.
    pub strings: usize,
    /// Their total length in bytes.
    pub bytes: usize,
    /// Calls answered with [`TOO_MANY_NAMES`] or [`NAME_TOO_LONG`].
    pub refused: u64,
}

#[derive(Default)]
struct Interner {
    strings: HashSet<&'static str>,
    bytes: usize,
    refused: u64,
}

fn interner() -> &'static Mutex<Interner> {
    static INTERNER: OnceLock<Mutex<Interner>> = OnceLock::new();
    INTERNER.get_or_init(|| Mutex::new(Interner::default()))
}

/// The process-wide `&'static str` equal to `s`, leaked on first sight.
///
/// Returns [`NAME_TOO_LONG`] for a string over [`MAX_INTERNED_LEN`] bytes and
/// [`TOO_MANY_NAMES`] once the interner is full (see the module docs); both
/// are counted in [`InternStats::refused`]. Never panics.
pub fn intern(s: &str) -> &'static str {
    if s.is_empty() {
        return "";
    }
    let mut interner = interner().lock();
    if let Some(&kept) = interner.strings.get(s) {
        return kept;
    }
    if s.len() > MAX_INTERNED_LEN {
        interner.refused += 1;
        return NAME_TOO_LONG;
    }
    if interner.strings.len() >= MAX_INTERNED_STRINGS
        || interner.bytes + s.len() > MAX_INTERNED_BYTES
    {
        interner.refused += 1;
        return TOO_MANY_NAMES;
    }
    let kept: &'static str = Box::leak(s.to_owned().into_boxed_str());
    interner.strings.insert(kept);
    interner.bytes += kept.len();
    kept
}

/// How many strings the interner holds, their bytes, and how many calls it refused.
pub fn intern_stats() -> InternStats {
    let interner = interner().lock();
    InternStats {
        strings: interner.strings.len(),
        bytes: interner.bytes,
        refused: interner.refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_intern_to_the_same_pointer() {
        let owned = String::from("intern.test.same");
        let a = intern(&owned);
        let b = intern("intern.test.same");
        assert_eq!(a, "intern.test.same");
        assert!(std::ptr::eq(a, b));
        assert_eq!(intern(""), "");
    }

    #[test]
    fn an_over_long_string_becomes_the_placeholder_and_is_counted() {
        let before = intern_stats().refused;
        let long = "x".repeat(MAX_INTERNED_LEN + 1);
        assert_eq!(intern(&long), NAME_TOO_LONG);
        assert!(intern_stats().refused > before);
    }
}
