//! `--shard K/N`: a deterministic 1/N of a suite's cases, for a CI matrix. A case belongs to
//! shard `1 + (h mod N)`, where `h` is the first 8 bytes (big-endian) of the SHA-256 of its
//! id: the N shards partition the suite, a case stays in its shard whatever the `--ops` /
//! `--layouts` filters, and the assignment is the same on every machine and version of
//! bnconf that generates the same case ids.

use crate::suite::family::FamilySuite;
use crate::suite::Suite;
use sha2::{Digest, Sha256};
use std::fmt;
use std::str::FromStr;

/// Shard `k` of `n` (1 ≤ k ≤ n).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// This shard, 1-based.
    pub k: u64,
    /// The number of shards.
    pub n: u64,
}

impl Shard {
    /// `K/N`, checked.
    pub fn new(k: u64, n: u64) -> Result<Shard, String> {
        if n == 0 || k == 0 || k > n {
            return Err(format!("{k}/{n}: need 1 ≤ K ≤ N"));
        }
        Ok(Shard { k, n })
    }

    /// The shard (1-based) of case `id` among `n`.
    pub fn of(id: &str, n: u64) -> u64 {
        let h = Sha256::digest(id.as_bytes());
        let mut b = [0u8; 8];
        b.copy_from_slice(&h[..8]);
        1 + u64::from_be_bytes(b) % n.max(1)
    }

    /// Whether case `id` is in this shard.
    pub fn contains(&self, id: &str) -> bool {
        Shard::of(id, self.n) == self.k
    }

    /// Keep this shard's cases (and exclusions) of a suite, in order.
    pub fn apply(&self, s: &mut Suite) {
        s.cases.retain(|c| self.contains(&c.id));
        s.excluded.retain(|(id, _)| self.contains(id));
    }

    /// Keep this shard's cases (and exclusions) of a family suite, in order (the same
    /// assignment by case id as batch_norm's).
    pub fn apply_family(&self, s: &mut FamilySuite) {
        s.cases.retain(|c| self.contains(&c.id));
        s.excluded.retain(|(id, _)| self.contains(id));
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("{s:?}: expected K/N with 1 ≤ K ≤ N (e.g. 2/3)");
        let (k, n) = s.trim().split_once('/').ok_or_else(bad)?;
        let k: u64 = k.trim().parse().map_err(|_| bad())?;
        let n: u64 = n.trim().parse().map_err(|_| bad())?;
        Shard::new(k, n).map_err(|_| bad())
    }
}

/// The shard a `manifest.json` records (`"shard": "K/N"`), if any.
pub fn from_manifest(m: &serde_json::Value) -> Result<Option<Shard>, crate::error::ConfError> {
    match m.get("shard") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v
            .as_str()
            .and_then(|s| s.parse().ok())
            .map(Some)
            .ok_or_else(|| {
                crate::error::ConfError::field(
                    "manifest.json: shard",
                    "expected \"K/N\", 1 ≤ K ≤ N",
                )
            }),
    }
}

/// The shard recorded in `DIR/manifest.json`, if any.
pub fn from_manifest_dir(dir: &std::path::Path) -> Result<Option<Shard>, crate::error::ConfError> {
    let mpath = dir.join("manifest.json");
    let text = crate::formats::fsafe::read_regular_string(
        &mpath,
        crate::formats::fsafe::MAX_META_BYTES,
        "",
    )?;
    let m: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| crate::error::ConfError::Json {
            path: mpath.display().to_string(),
            msg: e.to_string(),
        })?;
    from_manifest(&m)
}

/// Add `"shard": "K/N"` to the `manifest.json` that `protocol::export` wrote into `dir`
/// (rewritten atomically; the other fields unchanged).
pub fn record_in_manifest(
    dir: &std::path::Path,
    shard: Shard,
) -> Result<(), crate::error::ConfError> {
    let mpath = dir.join("manifest.json");
    let text = crate::formats::fsafe::read_regular_string(
        &mpath,
        crate::formats::fsafe::MAX_META_BYTES,
        "",
    )?;
    let mut m: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| crate::error::ConfError::Json {
            path: mpath.display().to_string(),
            msg: e.to_string(),
        })?;
    m["shard"] = serde_json::json!(shard.to_string());
    let text = serde_json::to_string_pretty(&m).expect("json") + "\n";
    crate::formats::atomic::write_bytes(&mpath, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_partition() {
        assert_eq!("2/3".parse::<Shard>().unwrap(), Shard { k: 2, n: 3 });
        for bad in ["0/3", "4/3", "1/0", "x", "1/", "/2", "-1/2"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        let ids: Vec<String> = (0..300).map(|i| format!("case.{i}")).collect();
        let mut seen = vec![0; ids.len()];
        for k in 1..=3 {
            let s = Shard::new(k, 3).unwrap();
            for (i, id) in ids.iter().enumerate() {
                if s.contains(id) {
                    seen[i] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
    }
}
