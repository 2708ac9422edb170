//! A Rust client of the agent over its Unix socket: what the benches and the tests
//! use, and an example of the contract for any other language's client.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use proto::v1::send_reward_reply::Result as Answer;
//! use proto::v1::{SendRewardRequest, UserInfo};
//!
//! let mut agent = reward_agent::client::unix("/run/reward-agent/agent.sock").await?;
//! let reply = agent
//!     .send_reward(SendRewardRequest {
//!         trade_no: "cny2027:rain:3:u42".into(),
//!         user: Some(UserInfo { user_id: "u42".into(), ..Default::default() }),
//!         activity_id: "cny2027".into(),
//!         scene_id: "rain".into(),
//!         reward_type: "cash".into(),
//!         amount: 888,
//!         ..Default::default()
//!     })
//!     .await?
//!     .into_inner();
//! match reply.result {
//!     Some(Answer::Issued(r)) => println!("token {}", r.token),
//!     Some(Answer::Error(e)) => println!("refused: {:?} {}", e.code(), e.message),
//!     None => println!("in doubt: resend with the same trade number"),
//! }
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use proto::v1::reward_agent_client::RewardAgentClient;
use tonic::transport::{Channel, Endpoint};

/// A client connected to the agent listening on the Unix socket at `path`. The
/// channel reconnects by itself when the agent is restarted.
pub async fn unix(
    path: impl AsRef<Path>,
) -> Result<RewardAgentClient<Channel>, tonic::transport::Error> {
    let path: PathBuf = path.as_ref().to_path_buf();
    // The URI is a placeholder: the connector below dials the socket.
    let channel = Endpoint::from_static("http://reward-agent.local")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await?;
    Ok(RewardAgentClient::new(channel))
}
