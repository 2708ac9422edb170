//! The control command's connection to the Redis holding the dynamic document.

use fred::prelude::*;

use super::Known;
use super::error::{ControlError, failed};

/// The control command's connection and settings.
#[derive(Debug)]
pub struct Control {
    pub(super) client: Client,
    pub(super) redis_url: String,
    pub(super) key: String,
    pub(super) known: Known,
    pub(super) audit_file: Option<std::path::PathBuf>,
    pub(super) who: String,
}

impl Control {
    /// Connects to Redis.
    pub async fn connect(
        redis_url: &str,
        key: &str,
        known: Known,
        audit_file: Option<std::path::PathBuf>,
        who: String,
    ) -> Result<Self, ControlError> {
        let client = Builder::from_config(Config::from_url(redis_url).map_err(failed)?)
            .build()
            .map_err(failed)?;
        client
            .init()
            .await
            .map_err(|e| failed(format!("Redis at {redis_url}: {e} (ops/stack up?)")))?;
        Ok(Self {
            client,
            redis_url: redis_url.to_string(),
            key: key.to_string(),
            known,
            audit_file,
            who,
        })
    }
}
