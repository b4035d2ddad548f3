//! The memory plan: when each computed value dies, and which buffer slot holds it. A value's
//! lifetime runs from the node that computes it to the last node that reads it (graph outputs
//! live to the end); values whose lifetimes do not overlap share a slot, so the executor holds
//! at most `slots` intermediate tensors at once and frees each as soon as it is dead.

use crate::graph::{Graph, ValueId};
use std::collections::{BTreeSet, HashMap};

/// Slot of each computed value.
pub type SlotAssignment = HashMap<ValueId, usize>;

#[derive(Clone, Debug, Default)]
pub struct MemoryPlan {
    /// `free_after[i]`: values whose last reader is node `i` (freed once it ran).
    pub free_after: Vec<Vec<ValueId>>,
    pub slot_of: SlotAssignment,
    /// Number of slots (the most intermediate values alive at once).
    pub slots: usize,
    /// With all dims known: the largest sum of live intermediate bytes at any node.
    pub peak_bytes: Option<usize>,
}

impl MemoryPlan {
    pub fn new(g: &Graph) -> MemoryPlan {
        let n = g.nodes.len();
        let mut last: HashMap<ValueId, usize> = HashMap::new();
        for (i, node) in g.nodes.iter().enumerate() {
            for &v in node.inputs.iter().flatten() {
                last.insert(v, i);
            }
        }
        let pinned: BTreeSet<ValueId> = g.outputs.iter().copied().collect();
        let mut free_after = vec![Vec::new(); n];
        let mut slot_of = HashMap::new();
        let mut free: BTreeSet<usize> = BTreeSet::new();
        let mut slots = 0;
        let size = |v: ValueId| -> Option<usize> {
            let t = g.values.get(v)?.ty.as_ref()?;
            t.dtype.bytes_for(t.fixed_dims()?.iter().product())
        };
        let (mut live_bytes, mut peak) = (Some(0usize), Some(0usize));
        for (i, node) in g.nodes.iter().enumerate() {
            for &o in &node.outputs {
                let s = free.pop_first().unwrap_or_else(|| {
                    slots += 1;
                    slots - 1
                });
                slot_of.insert(o, s);
                live_bytes = live_bytes.zip(size(o)).map(|(a, b)| a + b);
            }
            peak = peak.zip(live_bytes).map(|(p, l)| p.max(l));
            // Outputs nobody reads die right away; values whose last reader is this node too.
            let dying: Vec<ValueId> = node
                .outputs
                .iter()
                .copied()
                .filter(|o| !last.contains_key(o))
                .chain(
                    node.inputs
                        .iter()
                        .flatten()
                        .copied()
                        .filter(|v| last.get(v) == Some(&i)),
                )
                .filter(|v| !pinned.contains(v) && slot_of.contains_key(v))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            for &v in &dying {
                if let Some(&s) = slot_of.get(&v) {
                    free.insert(s);
                }
                live_bytes = live_bytes.zip(size(v)).map(|(a, b)| a.saturating_sub(b));
            }
            free_after[i] = dying;
        }
        MemoryPlan {
            free_after,
            slot_of,
            slots,
            peak_bytes: peak,
        }
    }
}
