//! Where the stack's Prometheus keeps what a run needs: its metrics credential (which
//! the run's services are given) and the directory of target lists it discovers.

use std::path::PathBuf;

/// The stack's Prometheus directory, when `ops/stack up` made one.
#[derive(Debug, Clone)]
pub struct StackPrometheus {
    dir: PathBuf,
}

impl StackPrometheus {
    /// `$REWARD_STACK_DIR/prometheus` (default `/var/tmp/reward-stack`) when it holds
    /// a metrics credential and a targets directory.
    pub fn find() -> Option<Self> {
        let stack = std::env::var_os("REWARD_STACK_DIR")
            .map_or_else(|| PathBuf::from("/var/tmp/reward-stack"), PathBuf::from);
        let dir = stack.join("prometheus");
        (dir.join("metrics.token").is_file() && dir.join("targets").is_dir())
            .then_some(Self { dir })
    }

    /// The metrics credential's file (mode 0600).
    pub fn token_file(&self) -> PathBuf {
        self.dir.join("metrics.token")
    }

    /// The metrics credential.
    pub fn token(&self) -> Option<String> {
        std::fs::read_to_string(self.token_file())
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
    }

    pub(super) fn targets(&self) -> PathBuf {
        self.dir.join("targets")
    }
}
