//! A string-keyed map for the few entries a task's or a notice's data holds.
//!
//! Every held change carries such maps (its change-update notice's `kind`, an exec task's
//! `exit-code`), and a thousand changes are held. A `BTreeMap` allocates a whole node of
//! eleven slots for its first entry, about half a kilobyte here; a sorted vector sized to
//! its entries costs what they take. Lookups scan or bisect a handful of entries. It reads
//! and writes as a JSON object, exactly as the `BTreeMap` it replaces, so state files move
//! between the two freely.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Entries sorted by key, without spare capacity.
#[derive(Debug, Clone, PartialEq)]
pub struct SmallMap<V>(Vec<(String, V)>);

impl<V> Default for SmallMap<V> {
    fn default() -> Self {
        SmallMap(Vec::new())
    }
}

impl<V> SmallMap<V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        self.position(key).ok().map(|i| &self.0[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    /// Sets `key` to `value`; returns the value it replaces.
    pub fn insert(&mut self, key: String, value: V) -> Option<V> {
        match self.position(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                // Grown by one, not doubled: these maps are written once or twice and held
                // for the life of their change.
                self.0.reserve_exact(1);
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// The entries as the API's wire types carry them.
    pub fn to_btree(&self) -> BTreeMap<String, V>
    where
        V: Clone,
    {
        self.0.iter().cloned().collect()
    }
}

impl<V> From<BTreeMap<String, V>> for SmallMap<V> {
    fn from(map: BTreeMap<String, V>) -> Self {
        // Already in key order, and collected to its exact length.
        SmallMap(map.into_iter().collect())
    }
}

impl<V> std::ops::Index<&str> for SmallMap<V> {
    type Output = V;

    fn index(&self, key: &str) -> &V {
        self.get(key).expect("no entry for key")
    }
}

impl<V: Serialize> Serialize for SmallMap<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for SmallMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries<V>(PhantomData<V>);

        impl<'de, V: Deserialize<'de>> Visitor<'de> for Entries<V> {
            type Value = SmallMap<V>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut map = SmallMap::new();
                while let Some((key, value)) = access.next_entry::<String, V>()? {
                    map.insert(key, value);
                }
                Ok(map)
            }
        }

        deserializer.deserialize_map(Entries(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_keys_sorted_and_replaces_values() {
        let mut m = SmallMap::new();
        assert_eq!(m.insert("kind".into(), "exec".to_string()), None);
        assert_eq!(m.insert("check-name".into(), "up".to_string()), None);
        assert_eq!(
            m.insert("kind".into(), "start".to_string()),
            Some("exec".to_string())
        );
        let keys: Vec<&String> = m.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["check-name", "kind"]);
        assert_eq!(m["kind"], "start");
        assert!(m.contains_key("check-name") && !m.contains_key("x"));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn reads_and_writes_as_the_btree_map_it_replaces() {
        let tree: BTreeMap<String, serde_json::Value> = BTreeMap::from([
            ("exit-code".to_string(), 3.into()),
            ("a".to_string(), "b".into()),
        ]);
        let small = SmallMap::from(tree.clone());
        let json = serde_json::to_string(&small).unwrap();
        assert_eq!(json, serde_json::to_string(&tree).unwrap());
        // Unsorted input, as another writer might leave it, comes back sorted.
        let back: SmallMap<serde_json::Value> =
            serde_json::from_str(r#"{"exit-code":3,"a":"b"}"#).unwrap();
        assert_eq!(back, small);
        assert_eq!(back.to_btree(), tree);
    }

    #[test]
    fn holds_no_spare_capacity() {
        let mut m = SmallMap::new();
        m.insert("kind".into(), "exec".to_string());
        assert_eq!(m.0.capacity(), 1);
        m.insert("check-name".into(), "up".to_string());
        assert_eq!(m.0.capacity(), 2);
    }
}
