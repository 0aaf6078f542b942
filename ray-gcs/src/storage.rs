//! The seam between the GCS tables and where their rows are kept.
//!
//! Every change to a table is written through to a [`Storage`] as an encoded
//! row, so [`Gcs::recover`](crate::Gcs::recover) can rebuild the tables from
//! it after a restart. [`MemoryStorage`] keeps rows in memory; a persistent
//! store implements the same trait.

use std::collections::BTreeMap;
use std::fmt;

/// The tables whose rows go to storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// Node rows, keyed by node id.
    Nodes,
    /// Job rows, keyed by job id.
    Jobs,
    /// Actor rows, keyed by actor id.
    Actors,
    /// Internal KV entries, keyed by namespace and key.
    Kv,
    /// Counters of the GCS itself (the next job and worker ids).
    Meta,
    /// Worker and driver rows, keyed by worker id.
    Workers,
}

impl Table {
    /// Every table, in the order recovery reads them.
    pub const ALL: [Table; 6] = [
        Table::Meta,
        Table::Nodes,
        Table::Jobs,
        Table::Actors,
        Table::Kv,
        Table::Workers,
    ];

    /// A short lowercase name (`"nodes"`), usable as a file or column name.
    pub const fn name(self) -> &'static str {
        match self {
            Table::Nodes => "nodes",
            Table::Jobs => "jobs",
            Table::Actors => "actors",
            Table::Kv => "kv",
            Table::Meta => "meta",
            Table::Workers => "workers",
        }
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the GCS keeps its rows: a key-value store with one keyspace per table.
///
/// Writes are infallible at this seam: an implementation that can fail (disk
/// full) must deal with it itself, for example by stopping the process,
/// because a GCS whose tables and storage disagree cannot recover correctly.
pub trait Storage {
    /// Stores `value` under `key` in `table`, replacing any previous value.
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]);
    /// Removes `key` from `table`; removing a missing key does nothing.
    fn delete(&mut self, table: Table, key: &[u8]);
    /// Every `(key, value)` of `table`, in ascending key order.
    fn scan(&self, table: Table) -> Vec<(Vec<u8>, Vec<u8>)>;
}

/// A [`Storage`] in memory: fast, and gone with the process.
///
/// Cloning it copies every row, which is how tests simulate a restart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryStorage {
    tables: BTreeMap<Table, BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl MemoryStorage {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of rows in `table`.
    pub fn len(&self, table: Table) -> usize {
        self.tables.get(&table).map_or(0, BTreeMap::len)
    }

    /// Whether no table holds any row.
    pub fn is_empty(&self) -> bool {
        self.tables.values().all(BTreeMap::is_empty)
    }
}

impl Storage for MemoryStorage {
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) {
        self.tables
            .entry(table)
            .or_default()
            .insert(key.to_vec(), value.to_vec());
    }

    fn delete(&mut self, table: Table, key: &[u8]) {
        if let Some(rows) = self.tables.get_mut(&table) {
            rows.remove(key);
        }
    }

    fn scan(&self, table: Table) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.tables.get(&table).map_or_else(Vec::new, |rows| {
            rows.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_storage_keeps_tables_apart_and_scans_in_key_order() {
        let mut s = MemoryStorage::new();
        s.put(Table::Kv, b"b", b"2");
        s.put(Table::Kv, b"a", b"1");
        s.put(Table::Jobs, b"a", b"job");
        assert_eq!(
            s.scan(Table::Kv),
            vec![
                (b"a".to_vec(), b"1".to_vec()),
                (b"b".to_vec(), b"2".to_vec())
            ]
        );
        s.delete(Table::Kv, b"a");
        s.delete(Table::Nodes, b"missing");
        assert_eq!(s.len(Table::Kv), 1);
        assert_eq!(s.len(Table::Jobs), 1);
        assert!(s.scan(Table::Nodes).is_empty());
    }

    #[test]
    fn put_replaces_the_previous_value() {
        let mut s = MemoryStorage::new();
        s.put(Table::Meta, b"k", b"old");
        s.put(Table::Meta, b"k", b"new");
        assert_eq!(s.scan(Table::Meta), vec![(b"k".to_vec(), b"new".to_vec())]);
    }
}
