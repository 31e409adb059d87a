//! How each kind of operation ended, for a run's summary.

use std::collections::BTreeMap;

use super::{Answer, Settled};

/// The kinds of operation, in the order the summary lists them
/// (`Request::kind` is an index into it).
pub const KINDS: [&str; 11] = [
    "Credit",
    "Charge",
    "Transfer",
    "Post",
    "Refund of a charge",
    "Refund of a capture",
    "PlaceHold",
    "CaptureHold",
    "VoidHold",
    "SetLimits",
    "Reverse",
];

/// How the keys of one kind of operation ended.
#[derive(Debug, Default)]
pub struct Tally {
    pub acknowledged: u64,
    /// Declines, by reason.
    declined: BTreeMap<String, u64>,
    /// Keys that met a retryable answer (their outcome not known) before the
    /// final one.
    unknown_then_settled: u64,
    /// Of those, the keys whose final answer was a replay: an earlier attempt
    /// (or another copy) had decided it.
    settled_by_replay: u64,
}

impl Tally {
    /// Counts a key by its copies' answers (which agree).
    pub(super) fn add(&mut self, copies: &[Settled]) {
        match &copies[0].answer {
            Answer::Done { .. } => self.acknowledged += 1,
            Answer::Declined { reason, .. } => {
                *self.declined.entry(reason.clone()).or_default() += 1;
            }
        }
        if copies.iter().any(|c| c.unknown) {
            self.unknown_then_settled += 1;
            if copies.iter().any(|c| c.unknown && c.replayed) {
                self.settled_by_replay += 1;
            }
        }
    }
}

/// A line per kind of operation, every kind listed (a kind the run never sent
/// shows its zeros).
pub fn table(tallies: &BTreeMap<usize, Tally>) -> String {
    let none = Tally::default();
    let mut table = Vec::new();
    for (at, kind) in KINDS.iter().enumerate() {
        let t = tallies.get(&at).unwrap_or(&none);
        let declined: u64 = t.declined.values().sum();
        let reasons: Vec<String> = t.declined.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let reasons = if reasons.is_empty() {
            String::new()
        } else {
            format!(": {}", reasons.join(", "))
        };
        table.push(format!(
            "  {kind:<20} {:>6} acknowledged, {:>4} unknown then settled ({} by a replay), \
             {declined} declined{reasons}",
            t.acknowledged, t.unknown_then_settled, t.settled_by_replay,
        ));
    }
    table.join("\n")
}
