//! The change trail: who changed which budget or knob, when, from what to what. One
//! sorted set in Redis (`{base}:audit`, scored by time, the newest 10 000 kept), written
//! by the service's `BudgetAdmin` API and by `reward-ctl`, read by `reward-ctl changes`.

use fred::interfaces::SortedSetsInterface;

/// One change.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TrailEntry {
    /// When, Unix ms.
    pub at_unix_ms: i64,
    /// Who (`reward-ctl`'s `--who` or the OS user; `api <peer>` for the admin API).
    pub who: String,
    /// What (`budget:<activity/scene>` for budgets, else the knob).
    pub key: String,
    /// The value before (None: not set).
    pub old: Option<String>,
    /// The value after (None: unset).
    pub new: Option<String>,
}

/// Entries kept.
const KEEP: i64 = 10_000;

/// Adds `e` to the trail under `base`; answers its JSON line.
pub async fn record(
    client: &fred::clients::Client,
    base: &str,
    e: &TrailEntry,
) -> Result<String, fred::error::Error> {
    let line = serde_json::to_string(e)
        .map_err(|err| fred::error::Error::new(fred::error::ErrorKind::Parse, err.to_string()))?;
    let list = format!("{base}:audit");
    // Members are unique: each line carries its time, who and key.
    let _: i64 = client
        .zadd(
            &list,
            None,
            None,
            false,
            false,
            (e.at_unix_ms as f64, line.as_str()),
        )
        .await?;
    // The entry is written; a failed trim only leaves the list longer for a while.
    if let Err(err) = client
        .zremrangebyrank::<i64, _>(&list, 0, -(KEEP + 1))
        .await
    {
        tracing::warn!(error = %err, "the change trail was not trimmed");
    }
    Ok(line)
}
