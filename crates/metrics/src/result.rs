use serde::{Deserialize, Serialize};

use crate::LayerSnapshot;

/// The `format` field of every result file, so tools can tell a flashrig result from other JSON.
pub const RESULT_FORMAT: &str = "flashrig-result";
/// Bumped whenever a field changes meaning or is removed; adding fields keeps the version.
pub const RESULT_VERSION: u32 = 1;

/// A run's result file: what ran (the effective configuration), the workload's summary and the
/// metrics of every layer of the device stack.
///
/// Simulated runs contain no wall-clock readings, so the same configuration and seed produce a
/// byte-identical file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub format: String,
    pub version: u32,
    pub flashrig_version: String,
    pub runtime: String,
    pub seed: u64,
    /// The effective configuration, defaults filled in.
    pub config: serde_json::Value,
    /// Workload results (throughput, latency percentiles, per-reactor CPU use).
    pub workload: serde_json::Value,
    /// The device stack's metrics, top layer first.
    pub layers: LayerSnapshot,
}

impl RunResult {
    pub fn to_json_pretty(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("result serialises");
        s.push('\n');
        s
    }

    /// Parses a result file, rejecting other formats and newer versions with a clear message.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        match v.get("format").and_then(|f| f.as_str()) {
            Some(RESULT_FORMAT) => {}
            _ => {
                return Err(format!(
                    "not a flashrig result file (no \"format\": \"{RESULT_FORMAT}\")"
                ))
            }
        }
        let version = v.get("version").and_then(|x| x.as_u64()).unwrap_or(0);
        if version > RESULT_VERSION as u64 {
            return Err(format!(
                "result file version {version} is newer than this flashrig understands ({RESULT_VERSION})"
            ));
        }
        serde_json::from_value(v).map_err(|e| format!("malformed result file: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects_foreign_json() {
        let r = RunResult {
            format: RESULT_FORMAT.into(),
            version: RESULT_VERSION,
            flashrig_version: "0.1.0".into(),
            runtime: "sim".into(),
            seed: 7,
            config: serde_json::json!({"a": 1}),
            workload: serde_json::json!({"iops": 2.0}),
            layers: LayerSnapshot { name: "ram0".into(), ..Default::default() },
        };
        let text = r.to_json_pretty();
        assert_eq!(RunResult::from_json(&text).unwrap(), r);
        assert!(RunResult::from_json("{\"x\":1}").unwrap_err().contains("not a flashrig result"));
        assert!(RunResult::from_json("nope").unwrap_err().contains("not JSON"));
        let newer = text.replace("\"version\": 1", "\"version\": 99");
        assert!(RunResult::from_json(&newer).unwrap_err().contains("newer"));
    }
}
