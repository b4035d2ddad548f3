//! Which decode steps of a session run again from a backend's recording (`Backend::replay`)
//! instead of through the model: one book per KV cache, since a plan is bound to the cache's
//! buffers.
//!
//! Plans are kept per kind of step (what it returns) and per power of two above the KV length
//! after the step: a backend may size scratch by a power of two of the key count, so a plan
//! never outlives the range it was recorded in. Three consecutive steps of a range are
//! recorded; when the backend makes no plan of them, the range tries again, twice at most.

use cyb_backend::Recording;
use std::collections::HashMap;

/// What a step returns (a plan replays the ops that make it).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) enum StepKind {
    LastLogits,
    AllLogits,
    ArgMax,
}

/// Recordings a plan is made of.
const RECORDINGS: usize = 3;
/// Sets of recordings tried per range before it runs through the model for good.
const ATTEMPTS: u32 = 3;

enum Slot {
    /// Recordings of consecutive steps so far (KV length after the last), and failed attempts.
    Recording {
        steps: Vec<(Recording, Vec<Vec<u8>>)>,
        last_len: usize,
        failed: u32,
    },
    /// A plan, and the KV length after its first recorded step.
    Ready { plan: Recording, first_len: usize },
    /// No plan for this range.
    Off,
}

#[derive(Default)]
pub(super) struct ReplayBook {
    /// The model whose steps the plans replay (0: none yet).
    model: u64,
    slots: HashMap<(StepKind, usize), Slot>,
}

impl std::fmt::Debug for ReplayBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ready = self
            .slots
            .values()
            .filter(|s| matches!(s, Slot::Ready { .. }))
            .count();
        write!(
            f,
            "ReplayBook {{ ranges: {}, plans: {ready} }}",
            self.slots.len()
        )
    }
}

/// The range a step ending at KV length `len` belongs to.
fn range(len: usize) -> usize {
    len.next_power_of_two()
}

impl ReplayBook {
    /// Steps of model `model` come next: another model's plans (its weights) are dropped.
    pub(super) fn bind(&mut self, model: u64) {
        if self.model != model {
            self.slots.clear();
            self.model = model;
        }
    }

    /// The plan for a step of `kind` ending at KV length `len`, with the number of steps it
    /// comes after the plan's first recorded one.
    pub(super) fn plan(&self, kind: StepKind, len: usize) -> Option<(&Recording, i64)> {
        match self.slots.get(&(kind, range(len))) {
            Some(Slot::Ready { plan, first_len }) => Some((plan, len as i64 - *first_len as i64)),
            _ => None,
        }
    }

    /// Whether such a step should be recorded.
    pub(super) fn wants(&self, kind: StepKind, len: usize) -> bool {
        match self.slots.get(&(kind, range(len))) {
            None | Some(Slot::Recording { .. }) => true,
            Some(_) => false,
        }
    }

    /// Adds the recording of a step (`None`: the backend could not record it) with its host
    /// inputs; once three consecutive steps are in, `make_plan` turns them into a plan.
    pub(super) fn add(
        &mut self,
        kind: StepKind,
        len: usize,
        rec: Option<(Recording, Vec<Vec<u8>>)>,
        make_plan: impl FnOnce(Vec<(Recording, Vec<Vec<u8>>)>) -> Option<Recording>,
    ) {
        let slot = self
            .slots
            .entry((kind, range(len)))
            .or_insert(Slot::Recording {
                steps: Vec::new(),
                last_len: 0,
                failed: 0,
            });
        let Slot::Recording {
            steps,
            last_len,
            failed,
        } = slot
        else {
            return;
        };
        let Some(rec) = rec else {
            steps.clear();
            *failed += 1;
            if *failed >= ATTEMPTS {
                *slot = Slot::Off;
            }
            return;
        };
        if !steps.is_empty() && len != *last_len + 1 {
            steps.clear();
        }
        steps.push(rec);
        *last_len = len;
        if steps.len() < RECORDINGS {
            return;
        }
        let first_len = len + 1 - RECORDINGS;
        match make_plan(std::mem::take(steps)) {
            Some(plan) => *slot = Slot::Ready { plan, first_len },
            None => {
                *failed += 1;
                if *failed >= ATTEMPTS {
                    *slot = Slot::Off;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tag: u8) -> Option<(Recording, Vec<Vec<u8>>)> {
        Some((Box::new(tag), vec![vec![tag]]))
    }

    #[test]
    fn three_consecutive_steps_make_a_plan_for_their_range() {
        let mut b = ReplayBook::default();
        let k = StepKind::LastLogits;
        // KV lengths 9, 10, 11 are in the range up to 16.
        for len in 9..=11 {
            assert!(b.wants(k, len));
            b.add(k, len, rec(len as u8), |steps| {
                let tags: Vec<u8> = steps.iter().map(|s| s.1[0][0]).collect();
                assert_eq!(tags, [9, 10, 11]);
                Some(Box::new(()))
            });
        }
        assert!(!b.wants(k, 12));
        assert_eq!(b.plan(k, 16).map(|p| p.1), Some(7));
        assert_eq!(b.plan(k, 9).map(|p| p.1), Some(0));
        // Another range, another kind: nothing yet.
        assert!(b.plan(k, 17).is_none());
        assert!(b.plan(StepKind::ArgMax, 12).is_none());
        // The same model again keeps the plans; another drops them.
        b.bind(0);
        assert!(b.plan(k, 12).is_some());
        b.bind(7);
        assert!(b.plan(k, 12).is_none() && b.wants(k, 12));
    }

    #[test]
    fn a_gap_restarts_the_recordings_and_failures_turn_a_range_off() {
        let mut b = ReplayBook::default();
        let k = StepKind::ArgMax;
        let never = |_: Vec<(Recording, Vec<Vec<u8>>)>| -> Option<Recording> {
            panic!("no plan from non-consecutive steps")
        };
        b.add(k, 33, rec(1), never);
        b.add(k, 34, rec(2), never);
        b.add(k, 40, rec(3), never);
        b.add(k, 41, rec(4), never);
        let mut asked = 0;
        b.add(k, 42, rec(5), |_| {
            asked += 1;
            None
        });
        assert_eq!(asked, 1);
        assert!(b.wants(k, 43));
        b.add(k, 43, None, never);
        assert!(b.wants(k, 44));
        b.add(k, 44, None, never);
        assert!(!b.wants(k, 45), "three failed attempts turn the range off");
        assert!(b.plan(k, 45).is_none());
    }
}
