//! `Gcs::recover` on arbitrary stored rows returns `Ok` or `Err`, never panics.
//!
//! The storage a GCS recovers from is outside the process (a disk, another
//! store), so every byte of it is untrusted. The input is a sequence of rows,
//! each `[table][key len: u8][key][value len: u16 LE][value]`; the table byte
//! is taken modulo the number of tables and a truncated last row is dropped.

#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use ray_gcs::{Gcs, MemoryStorage, Storage, Table};

/// Splits `data` into `(table, key, value)` rows.
fn rows(mut data: &[u8]) -> Vec<(Table, &[u8], &[u8])> {
    let mut out = Vec::new();
    while let [table, key_len, rest @ ..] = data {
        let table = Table::ALL[usize::from(*table) % Table::ALL.len()];
        let Some((key, rest)) = rest.split_at_checked(usize::from(*key_len)) else {
            break;
        };
        let [lo, hi, rest @ ..] = rest else { break };
        let value_len = usize::from(u16::from_le_bytes([*lo, *hi]));
        let Some((value, rest)) = rest.split_at_checked(value_len) else {
            break;
        };
        out.push((table, key, value));
        data = rest;
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let mut storage = MemoryStorage::new();
    for (table, key, value) in rows(data) {
        storage.put(table, key, value);
    }
    // Either outcome is fine; a panic (or abort) is the bug.
    let _ = Gcs::recover(storage, Duration::ZERO);
});
