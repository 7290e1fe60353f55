use serde::{Deserialize, Serialize};

/// Per-reactor accounting.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReactorStats {
    /// CPU time the reactor spent working: charged time in sim, measured busy time in real.
    pub busy_ns: u64,
    /// Task polls run on this reactor.
    pub polls: u64,
    /// Messages delivered to this reactor.
    pub messages: u64,
}

impl ReactorStats {
    /// Fraction of `elapsed_ns` the reactor was busy.
    pub fn utilisation(&self, elapsed_ns: u64) -> f64 {
        if elapsed_ns == 0 {
            0.0
        } else {
            self.busy_ns as f64 / elapsed_ns as f64
        }
    }
}
