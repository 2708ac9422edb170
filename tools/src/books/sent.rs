//! The expected side of the books: every reward that was sent, one line each.

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::path::Path;

/// One sent reward, as `sent.tsv` has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentReward {
    /// Trade number.
    pub trade_no: String,
    /// User.
    pub user_id: String,
    /// Activity.
    pub activity_id: String,
    /// Scene.
    pub scene_id: String,
    /// Reward type.
    pub reward_type: String,
    /// Amount.
    pub amount: i64,
    /// When `send_reward` was called, Unix ms (the first send, for repeats).
    pub sent_unix_ms: i64,
    /// Whether the token reached the store.
    pub stored: bool,
}

impl SentReward {
    /// The `sent.tsv` line (no newline).
    pub fn line(&self, duplicate: bool) -> String {
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.trade_no,
            self.user_id,
            self.activity_id,
            self.scene_id,
            self.reward_type,
            self.amount,
            self.sent_unix_ms,
            u8::from(self.stored),
            u8::from(duplicate)
        )
    }

    /// Parses a `sent.tsv` line: the reward and whether it was a deliberate repeat.
    pub fn parse(line: &str) -> Option<(Self, bool)> {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 9 {
            return None;
        }
        Some((
            Self {
                trade_no: f[0].to_string(),
                user_id: f[1].to_string(),
                activity_id: f[2].to_string(),
                scene_id: f[3].to_string(),
                reward_type: f[4].to_string(),
                amount: f[5].parse().ok()?,
                sent_unix_ms: f[6].parse().ok()?,
                stored: f[7] == "1",
            },
            f[8] == "1",
        ))
    }
}

/// Reads a sent list (`sent.tsv` lines, tab-separated: trade number, user, activity,
/// scene, type, amount, send time in Unix ms, stored 0/1, repeat 0/1): the distinct
/// trade numbers (first send kept), the repeat count, and the repeats that named
/// another type, amount or user (conflicts). A malformed line is refused with its
/// number.
pub fn read_sent(path: &Path) -> anyhow::Result<(BTreeMap<String, SentReward>, u64, u64)> {
    let f = std::fs::File::open(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let mut sent = BTreeMap::new();
    let mut repeats = 0;
    let mut conflicts = 0;
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line?;
        let (r, _dup) = SentReward::parse(&line)
            .ok_or_else(|| anyhow::anyhow!("{} line {}: malformed", path.display(), i + 1))?;
        match sent.get(&r.trade_no) {
            None => {
                sent.insert(r.trade_no.clone(), r);
            }
            Some(first) => {
                repeats += 1;
                let first: &SentReward = first;
                if first.amount != r.amount
                    || first.reward_type != r.reward_type
                    || first.user_id != r.user_id
                {
                    conflicts += 1;
                }
            }
        }
    }
    Ok((sent, repeats, conflicts))
}
