//! The internal KV: small byte values under namespaced byte keys.
//!
//! The runtime keeps its own metadata here (function tables, runtime
//! environments, cluster settings). Values are opaque and stored as given;
//! this is not a place for object data.

use std::collections::BTreeMap;

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::GcsError;
use crate::storage::{Storage, Table};
use crate::Gcs;

/// The KV entries, by namespace then key (sorted, for prefix scans).
#[derive(Debug, Default)]
pub(crate) struct KvTable {
    namespaces: BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>,
}

/// The storage key of an entry: the length-prefixed namespace, then the key,
/// so that no two `(namespace, key)` pairs share a storage key.
fn storage_key(ns: &str, key: &[u8]) -> Vec<u8> {
    let mut e = Encoder::new(1);
    e.str(ns);
    let mut out = e.finish();
    out.extend_from_slice(key);
    out
}

fn split_storage_key(stored: &[u8]) -> Result<(String, Vec<u8>), DecodeError> {
    let mut d = Decoder::new(stored, 1)?;
    let ns = d.string()?;
    Ok((ns, d.rest().to_vec()))
}

impl KvTable {
    /// Rebuilds the table from the `Kv` table of a storage.
    pub(crate) fn recover(storage: &impl Storage) -> Result<Self, GcsError> {
        let mut table = KvTable::default();
        for (stored, value) in storage.scan(Table::Kv) {
            let (ns, key) = split_storage_key(&stored).map_err(|e| GcsError::Corrupt {
                table: Table::Kv,
                reason: e.0,
            })?;
            table.namespaces.entry(ns).or_default().insert(key, value);
        }
        Ok(table)
    }
}

impl<S: Storage> Gcs<S> {
    /// Stores `value` under `key` in namespace `ns`; returns whether the key
    /// was new. An existing value is replaced only if `overwrite` is set.
    pub fn kv_put(&mut self, ns: &str, key: &[u8], value: Vec<u8>, overwrite: bool) -> bool {
        let entries = match self.kv.namespaces.get_mut(ns) {
            Some(entries) => entries,
            None => self.kv.namespaces.entry(ns.to_owned()).or_default(),
        };
        let added = match entries.get_mut(key) {
            Some(_) if !overwrite => return false,
            Some(old) => {
                *old = value;
                false
            }
            None => {
                entries.insert(key.to_vec(), value);
                true
            }
        };
        let stored = entries.get(key).expect("just inserted");
        self.storage.put(Table::Kv, &storage_key(ns, key), stored);
        added
    }

    /// The value under `key` in namespace `ns`.
    pub fn kv_get(&self, ns: &str, key: &[u8]) -> Option<&[u8]> {
        self.kv.namespaces.get(ns)?.get(key).map(Vec::as_slice)
    }

    /// Whether `key` exists in namespace `ns`.
    pub fn kv_exists(&self, ns: &str, key: &[u8]) -> bool {
        self.kv_get(ns, key).is_some()
    }

    /// Removes `key` from namespace `ns`; returns whether it existed.
    pub fn kv_del(&mut self, ns: &str, key: &[u8]) -> bool {
        let Some(entries) = self.kv.namespaces.get_mut(ns) else {
            return false;
        };
        if entries.remove(key).is_none() {
            return false;
        }
        if entries.is_empty() {
            self.kv.namespaces.remove(ns);
        }
        self.storage.delete(Table::Kv, &storage_key(ns, key));
        true
    }

    /// The keys of namespace `ns` that start with `prefix`, in byte order.
    pub fn kv_keys(&self, ns: &str, prefix: &[u8]) -> Vec<Vec<u8>> {
        let Some(entries) = self.kv.namespaces.get(ns) else {
            return Vec::new();
        };
        entries
            .range::<[u8], _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Every `(namespace, key, value)`, sorted; for comparing and dumping.
    pub fn kv_entries(&self) -> impl Iterator<Item = (&str, &[u8], &[u8])> + '_ {
        self.kv.namespaces.iter().flat_map(|(ns, entries)| {
            entries
                .iter()
                .map(move |(k, v)| (ns.as_str(), k.as_slice(), v.as_slice()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStorage;

    #[test]
    fn kv_put_without_overwrite_keeps_the_first_value() {
        let mut gcs = Gcs::in_memory();
        assert!(gcs.kv_put("ns", b"k", b"one".to_vec(), false));
        assert!(!gcs.kv_put("ns", b"k", b"two".to_vec(), false));
        assert_eq!(gcs.kv_get("ns", b"k"), Some(&b"one"[..]));
    }

    #[test]
    fn kv_put_with_overwrite_replaces_and_reports_not_added() {
        let mut gcs = Gcs::in_memory();
        gcs.kv_put("ns", b"k", b"one".to_vec(), true);
        assert!(!gcs.kv_put("ns", b"k", b"two".to_vec(), true));
        assert_eq!(gcs.kv_get("ns", b"k"), Some(&b"two"[..]));
    }

    #[test]
    fn kv_namespaces_are_separate() {
        let mut gcs = Gcs::in_memory();
        gcs.kv_put("a", b"k", b"1".to_vec(), false);
        assert_eq!(gcs.kv_get("b", b"k"), None);
        assert!(!gcs.kv_exists("b", b"k"));
        assert!(gcs.kv_exists("a", b"k"));
    }

    #[test]
    fn kv_del_removes_and_reports_whether_the_key_existed() {
        let mut gcs = Gcs::in_memory();
        gcs.kv_put("ns", b"k", b"v".to_vec(), false);
        assert!(gcs.kv_del("ns", b"k"));
        assert!(!gcs.kv_del("ns", b"k"));
        assert!(!gcs.kv_del("other", b"k"));
        assert_eq!(gcs.kv_get("ns", b"k"), None);
        assert!(gcs.storage().is_empty());
    }

    #[test]
    fn kv_keys_lists_only_the_prefix_in_order() {
        let mut gcs = Gcs::in_memory();
        for key in [&b"fn:b"[..], b"fn:a", b"fo", b"f", b"g", b"fn:\xff"] {
            gcs.kv_put("ns", key, Vec::new(), false);
        }
        gcs.kv_put("other", b"fn:c", Vec::new(), false);
        assert_eq!(
            gcs.kv_keys("ns", b"fn:"),
            vec![b"fn:a".to_vec(), b"fn:b".to_vec(), b"fn:\xff".to_vec()]
        );
        assert_eq!(gcs.kv_keys("ns", b"").len(), 6);
        assert!(gcs.kv_keys("missing", b"").is_empty());
    }

    #[test]
    fn kv_storage_keys_do_not_collide_across_namespaces() {
        // ("a", "bc") and ("ab", "c") must be different rows.
        let mut gcs = Gcs::in_memory();
        gcs.kv_put("a", b"bc", b"1".to_vec(), false);
        gcs.kv_put("ab", b"c", b"2".to_vec(), false);
        let back = Gcs::recover(gcs.storage().clone(), std::time::Duration::ZERO).unwrap();
        assert_eq!(back.kv_get("a", b"bc"), Some(&b"1"[..]));
        assert_eq!(back.kv_get("ab", b"c"), Some(&b"2"[..]));
    }

    #[test]
    fn corrupt_kv_key_is_an_error() {
        let mut storage = MemoryStorage::new();
        storage.put(Table::Kv, &[1, 200, 0, 0, 0, b'x'], b"v");
        assert!(matches!(
            Gcs::recover(storage, std::time::Duration::ZERO),
            Err(GcsError::Corrupt {
                table: Table::Kv,
                ..
            })
        ));
    }
}
