//! Label selectors: which nodes a task or actor may run on, by the labels
//! the nodes were started with (`zone=a`, `accelerator_type=…`).

use std::collections::BTreeMap;

/// The labels a request must find on its node (`hard`) and would rather
/// find (`soft`). Empty: any node.
///
/// A node matches `hard` when it has every pair; among those, nodes that
/// also have every `soft` pair are tried first, the others only when none
/// of them can take the request now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    /// Every pair here must be a label of the node.
    pub hard: BTreeMap<String, String>,
    /// Nodes with every pair here are preferred.
    pub soft: BTreeMap<String, String>,
}

impl LabelSelector {
    /// Whether it selects nothing (every node matches).
    pub fn is_empty(&self) -> bool {
        self.hard.is_empty() && self.soft.is_empty()
    }

    /// Whether a node with `labels` may run the request.
    pub fn allows(&self, labels: &BTreeMap<String, String>) -> bool {
        has_all(labels, &self.hard)
    }

    /// Whether a node with `labels` is preferred.
    pub fn prefers(&self, labels: &BTreeMap<String, String>) -> bool {
        has_all(labels, &self.hard) && has_all(labels, &self.soft)
    }
}

fn has_all(labels: &BTreeMap<String, String>, wanted: &BTreeMap<String, String>) -> bool {
    wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn hard_pairs_must_all_be_there_and_soft_ones_rank() {
        let sel = LabelSelector {
            hard: labels(&[("zone", "a")]),
            soft: labels(&[("disk", "ssd")]),
        };
        assert!(sel.allows(&labels(&[("zone", "a")])));
        assert!(!sel.allows(&labels(&[("zone", "b"), ("disk", "ssd")])));
        assert!(!sel.allows(&labels(&[])));
        assert!(sel.prefers(&labels(&[("zone", "a"), ("disk", "ssd")])));
        assert!(!sel.prefers(&labels(&[("zone", "a")])));
        assert!(LabelSelector::default().allows(&labels(&[])));
    }
}
