//! The host's own loop (`sdk-host`): an SDK serving the parent's requests.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;

use super::outcome::{HostStats, refusal};
use super::wire::{FromHost, WireRequest};

/// `sdk-host`: runs an SDK from `config` and serves requests from stdin until
/// stdin ends, then closes the SDK (30 s at most) and reports its counters.
pub async fn serve(config: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(config)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", config.display()))?;
    let cfg = sdk::config::SdkConfig::from_toml_str_with_env(&text)?;
    let sdk = Arc::new(sdk::Sdk::builder(cfg).start().await?);
    let (out, mut lines_out) = mpsc::unbounded_channel::<FromHost>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::BufWriter::new(tokio::io::stdout());
        while let Some(first) = lines_out.recv().await {
            let mut next = Some(first);
            while let Some(m) = next {
                let mut line = serde_json::to_vec(&m)?;
                line.push(b'\n');
                stdout.write_all(&line).await?;
                next = lines_out.try_recv().ok();
            }
            stdout.flush().await?;
        }
        anyhow::Ok(())
    });
    let ticker = {
        let (sdk, out) = (sdk.clone(), out.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let _ = out.send(FromHost::Stats(HostStats::of(&sdk, &sdk.stats(), 0)));
            }
        })
    };
    let mut calls = tokio::task::JoinSet::new();
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = stdin.next_line().await? {
        let wire: WireRequest = serde_json::from_str(&line)
            .map_err(|e| anyhow::anyhow!("sdk-host: malformed request line: {e}"))?;
        let (id, req) = wire.into_request();
        let (sdk, out) = (sdk.clone(), out.clone());
        calls.spawn(async move {
            let (refusal, stored, held_by) = match sdk.send_reward(req).await {
                Ok(t) => (
                    None,
                    t.stored == sdk::Stored::Yes,
                    t.held_by.label().to_string(),
                ),
                Err(e) => (Some(refusal(&e).to_string()), false, String::new()),
            };
            let _ = out.send(FromHost::Answer {
                id,
                refusal,
                stored,
                held_by,
            });
        });
        while calls.try_join_next().is_some() {}
    }
    while calls.join_next().await.is_some() {}
    ticker.abort();
    let close = sdk.close(Duration::from_secs(30)).await;
    let last = HostStats::of(&sdk, &close.stats, close.tokens_left);
    let _ = out.send(FromHost::Closed(last));
    drop(out);
    writer.await??;
    Ok(())
}
