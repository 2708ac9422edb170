//! The rewards of killed SDK hosts, as the run's `hosts.tsv` keeps them for
//! reconciliation.

use std::collections::HashMap;
use std::path::Path;

use reward_tools::books::Marked;

/// The file of rewards touched by a killed host (`trade_no \t stored|accepted|in_doubt`:
/// answered once its token was stored, answered before, unanswered), with one line
/// `#bound \t N` per kill: at most N of its rewards can have died before their token
/// write.
pub(crate) const MARKS: &str = "hosts.tsv";

pub(crate) const BOUND: &str = "#bound";

/// The file of rewards the SDK refused because their token write failed for the whole
/// wait (one trade number a line): each may have been stored (its write's answer was
/// lost) and is then credited, or not; in doubt, like a call a killed host held.
pub const STORE_IN_DOUBT: &str = "store-in-doubt.tsv";

/// The rewards of killed SDK hosts, as `hosts.tsv` has them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marks {
    /// Trade number -> how the host left it.
    pub rewards: HashMap<String, Marked>,
    /// At most this many of them can have died before their token write (summed
    /// over the kills).
    pub bound: u64,
}

/// Reads a run's `hosts.tsv` (absent: no host was killed) and `store-in-doubt.tsv`
/// (absent: no write was refused).
pub fn read_marks(dir: &Path) -> anyhow::Result<Marks> {
    let mut marks = read_host_marks(dir)?;
    let path = dir.join(STORE_IN_DOUBT);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            for trade in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
                // A host's mark says more (it may have answered stored); the bound
                // counts each reward once.
                if !marks.rewards.contains_key(trade) {
                    marks.rewards.insert(trade.to_string(), Marked::InDoubt);
                    marks.bound += 1;
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
    }
    Ok(marks)
}

fn read_host_marks(dir: &Path) -> anyhow::Result<Marks> {
    let path = dir.join(MARKS);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Marks::default()),
        Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
    };
    let mut marks = Marks::default();
    for (i, line) in text.lines().enumerate() {
        let bad = |what: &str| anyhow::anyhow!("{} line {}: {what}", path.display(), i + 1);
        let (trade, kind) = line.split_once('\t').ok_or_else(|| bad("malformed"))?;
        if trade == BOUND {
            marks.bound += kind.parse::<u64>().map_err(|_| bad("bad bound"))?;
            continue;
        }
        let answered = match kind {
            "stored" => Marked::Stored,
            "queued" => Marked::Queued,
            "accepted" => Marked::Answered,
            "in_doubt" => Marked::InDoubt,
            _ => return Err(bad(&format!("unknown kind {kind:?}"))),
        };
        let mark = marks.rewards.entry(trade.to_string()).or_insert(answered);
        *mark = mark.stronger(answered);
    }
    Ok(marks)
}
