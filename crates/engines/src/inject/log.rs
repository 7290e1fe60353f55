//! The injection log: one JSON line per fault that fired, so that a study can tell afterwards
//! exactly what its file system saw (time, command, block, kind, and the structure the block
//! held once structure-aware targeting classifies blocks).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// One injection, as a line of the log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InjectionRecord {
    /// The runtime's clock when the fault fired (ns; 0 outside a runtime).
    pub time_ns: u64,
    /// read, write, flush or trim.
    pub op: String,
    /// The block the fault acted on (for a misdirected write, the block addressed).
    pub lba: u64,
    /// The fault's kind (`Kind::name`).
    pub kind: String,
    /// The fault's index in the layer's list (its id when armed at run time).
    pub fault: u64,
    /// The file-system structure the block held, when a classifier knows it.
    pub structure: Option<String>,
    /// What the fault did, where the kind leaves a choice (the block a misdirected write
    /// landed on, the bits a corruption flipped).
    pub detail: Option<String>,
}

/// Records kept in memory when the log has no file, at most this many (the oldest are kept,
/// the rest counted as dropped), so that a probability fault cannot fill the memory.
pub const MEMORY_RECORDS: usize = 65_536;

/// Where the records go.
pub struct InjectionLog {
    file: Option<Mutex<BufWriter<File>>>,
    memory: Mutex<Vec<InjectionRecord>>,
    dropped: Mutex<u64>,
}

impl InjectionLog {
    /// Records kept in memory only.
    pub fn in_memory() -> Self {
        InjectionLog { file: None, memory: Mutex::new(Vec::new()), dropped: Mutex::new(0) }
    }

    /// Records appended to `path` (created or truncated), one JSON object per line, and kept
    /// in memory as well.
    pub fn to_file(path: &Path) -> std::io::Result<Self> {
        let f = File::create(path)?;
        Ok(InjectionLog { file: Some(Mutex::new(BufWriter::new(f))), ..Self::in_memory() })
    }

    pub fn record(&self, r: InjectionRecord) {
        if let Some(f) = &self.file {
            let line = serde_json::to_string(&r).expect("a record serialises");
            let mut f = f.lock();
            // The line is flushed at once: the study reads the log after a crash or an oops
            // of the file system above, so a buffered tail would be lost exactly when needed.
            let _ = writeln!(f, "{line}").and_then(|_| f.flush());
        }
        let mut m = self.memory.lock();
        if m.len() < MEMORY_RECORDS {
            m.push(r);
        } else {
            *self.dropped.lock() += 1;
        }
    }

    /// The records kept in memory, oldest first.
    pub fn records(&self) -> Vec<InjectionRecord> {
        self.memory.lock().clone()
    }

    /// Records not kept in memory because [`MEMORY_RECORDS`] were already held.
    pub fn dropped(&self) -> u64 {
        *self.dropped.lock()
    }
}
