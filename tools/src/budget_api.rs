//! The client side of the service's admin API (`reward.v1.BudgetAdmin`), which
//! `reward-ctl budget --service` uses: the admin credential from
//! `REWARD_ADMIN_TOKEN` or the file `REWARD_ADMIN_TOKEN_FILE` names, never from an
//! argument (arguments show in `ps`), never printed.

use proto::v1::budget_admin_client::BudgetAdminClient;
use proto::v1::{BudgetState, GetBudgetRequest, SetBudgetRequest};
use reward_runtime::credential::Credential;
use tonic::transport::Channel;

/// Why a budget call failed.
#[derive(Debug, thiserror::Error)]
pub enum BudgetApiError {
    /// Bad input here (scene, address, credential); nothing was sent.
    #[error("refused: {0}")]
    Input(String),
    /// The service refused the change; nothing was changed.
    #[error("refused by the service ({code:?}): {message}")]
    Refused {
        /// The gRPC status code.
        code: tonic::Code,
        /// Its message.
        message: String,
    },
    /// The service or the network failed; a change may have happened (read the
    /// budget, then send again).
    #[error(
        "failed ({code:?}): {message}; a change may have been made: read the budget before sending it again"
    )]
    Failed {
        /// The gRPC status code.
        code: tonic::Code,
        /// Its message.
        message: String,
    },
}

impl BudgetApiError {
    /// reward-ctl's exit code: 2 refused, 1 failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Input(_) | Self::Refused { .. } => 2,
            Self::Failed { .. } => 1,
        }
    }
}

fn of(s: tonic::Status) -> BudgetApiError {
    use tonic::Code;
    let (code, message) = (s.code(), s.message().to_string());
    match code {
        Code::InvalidArgument
        | Code::FailedPrecondition
        | Code::Unauthenticated
        | Code::PermissionDenied
        | Code::Unimplemented => BudgetApiError::Refused { code, message },
        _ => BudgetApiError::Failed { code, message },
    }
}

/// `activity/scene` split in two.
fn split(scene: &str) -> Result<(String, String), BudgetApiError> {
    scene
        .split_once('/')
        .filter(|(a, s)| !a.is_empty() && !s.is_empty() && !s.contains('/'))
        .map(|(a, s)| (a.to_string(), s.to_string()))
        .ok_or_else(|| BudgetApiError::Input(format!("scene {scene:?} is not activity/scene")))
}

/// A connected admin client.
pub struct Client {
    inner: BudgetAdminClient<Channel>,
    auth: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the credential.
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to `addr` (`http://host:port`) with the admin credential from the
    /// environment.
    pub async fn connect(addr: &str) -> Result<Self, BudgetApiError> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        let credential = Credential::from_env(&env, "REWARD_ADMIN_TOKEN").map_err(|e| {
            BudgetApiError::Input(format!(
                "the admin credential (REWARD_ADMIN_TOKEN or REWARD_ADMIN_TOKEN_FILE): {e}"
            ))
        })?;
        Self::connect_with(addr, &credential).await
    }

    /// Connects to `addr` with `credential`.
    pub async fn connect_with(addr: &str, credential: &Credential) -> Result<Self, BudgetApiError> {
        let endpoint = tonic::transport::Endpoint::from_shared(addr.to_string())
            .map_err(|e| BudgetApiError::Input(format!("service address {addr:?}: {e}")))?
            .connect_timeout(std::time::Duration::from_secs(5))
            .timeout(std::time::Duration::from_secs(30));
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| BudgetApiError::Failed {
                code: tonic::Code::Unavailable,
                message: format!("cannot reach {addr}: {e}"),
            })?;
        let mut auth: tonic::metadata::MetadataValue<tonic::metadata::Ascii> =
            credential.header().parse().map_err(|_| {
                BudgetApiError::Input("the admin credential is not a valid header".into())
            })?;
        auth.set_sensitive(true);
        Ok(Client {
            inner: BudgetAdminClient::new(channel),
            auth,
        })
    }

    fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.metadata_mut().insert("authorization", self.auth.clone());
        r
    }

    /// A scene's budget.
    pub async fn get(&mut self, scene: &str) -> Result<BudgetState, BudgetApiError> {
        let (activity_id, scene_id) = split(scene)?;
        let req = self.request(GetBudgetRequest {
            activity_id,
            scene_id,
        });
        Ok(self.inner.get_budget(req).await.map_err(of)?.into_inner())
    }

    /// Sets a scene's total; answers (before, after).
    pub async fn set(
        &mut self,
        scene: &str,
        total: i64,
        reason: &str,
    ) -> Result<(BudgetState, BudgetState), BudgetApiError> {
        let (activity_id, scene_id) = split(scene)?;
        let req = self.request(SetBudgetRequest {
            activity_id,
            scene_id,
            total,
            reason: reason.to_string(),
        });
        let r = self.inner.set_budget(req).await.map_err(of)?.into_inner();
        match (r.before, r.after) {
            (Some(b), Some(a)) => Ok((b, a)),
            _ => Err(BudgetApiError::Failed {
                code: tonic::Code::Internal,
                message: "the answer lacks the budget before or after".into(),
            }),
        }
    }
}

/// One line for an operator.
pub fn shown(b: &BudgetState) -> String {
    if b.configured {
        format!(
            "budget {}/{}: total {} spent {} remaining {}",
            b.activity_id, b.scene_id, b.total, b.spent, b.remaining
        )
    } else {
        format!(
            "budget {}/{}: not set (its grants answer NO_BUDGET); spent {}",
            b.activity_id, b.scene_id, b.spent
        )
    }
}
