//! The change trail: every change appended to the sorted set beside the document
//! (`<key>:audit`) and to the local audit file; read back newest first.

use fred::prelude::*;

use super::error::{ControlError, failed};
use super::{AuditEntry, Control};

impl Control {
    pub(super) async fn audit(
        &self,
        key: &str,
        old: Option<String>,
        new: Option<String>,
    ) -> Result<(), ControlError> {
        let e = AuditEntry {
            at_unix_ms: reward_runtime::clock::now_ms(),
            who: self.who.clone(),
            key: key.to_string(),
            old,
            new,
        };
        let line = reward_service::trail::record(&self.client, &self.key, &e)
            .await
            .map_err(failed)?;
        if let Some(path) = &self.audit_file {
            use std::io::Write as _;
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(failed)?;
            }
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| failed(format!("audit log {}: {e}", path.display())))?;
            writeln!(f, "{line}").map_err(failed)?;
        }
        Ok(())
    }

    /// The last `n` audit records, newest first.
    pub async fn audit_log(&self, n: i64) -> Result<Vec<AuditEntry>, ControlError> {
        let lines: Vec<String> = self
            .client
            .zrevrange(format!("{}:audit", self.key), 0, n.max(1) - 1, false)
            .await
            .map_err(failed)?;
        Ok(lines
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }
}
