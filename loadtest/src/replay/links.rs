//! The network links of a run: a fault proxy ([`faultproxy::Proxy`]) for each link a
//! plan's network faults name, started before the parts so that each part connects
//! through it from its first command (see [`crate::faults`], "Network links").
//! A link no fault names has no proxy: the part talks to its server directly.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use faultproxy::Proxy;
use reward_stack::env::StackEnv;

use crate::faults::{Fault, Link};

/// The proxies of a run, by link.
#[derive(Default)]
pub(crate) struct Links {
    proxies: BTreeMap<Link, Proxy>,
}

impl Links {
    /// A proxy for every link `faults` name: Redis links in front of the stack's
    /// Redis (refused on a cluster), the wallet link in front of the downstream
    /// double at `wallet`.
    pub(crate) async fn start(
        env: &StackEnv,
        faults: &[Fault],
        wallet: Option<SocketAddr>,
    ) -> anyhow::Result<Self> {
        let mut proxies = BTreeMap::new();
        for link in crate::faults::links(faults) {
            let upstream = if link.to_redis() {
                if env.redis_url.starts_with("redis-cluster://") {
                    anyhow::bail!(
                        "network fault on {}: Redis links need the single Redis (a cluster's clients learn every node's address from the cluster and would go around the proxy)",
                        link.name()
                    );
                }
                let hp = env.redis_host_port()?;
                tokio::net::lookup_host(hp.as_str())
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot resolve Redis at {hp}: {e}"))?
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("Redis at {hp} resolves to nothing"))?
            } else {
                wallet.ok_or_else(|| {
                    anyhow::anyhow!("network fault on {}: no downstream double", link.name())
                })?
            };
            let proxy = Proxy::start(upstream).await?;
            eprintln!(
                "replay: {} through a fault proxy on {}",
                link.name(),
                proxy.addr()
            );
            proxies.insert(link, proxy);
        }
        Ok(Self { proxies })
    }

    /// The proxy of `link`, if the plan named it.
    pub(crate) fn get(&self, link: Link) -> Option<&Proxy> {
        self.proxies.get(&link)
    }

    /// The stack as the part at the near end of `link` sees it: its Redis URL through
    /// the link's proxy when there is one, else unchanged.
    pub(crate) fn env_for(&self, env: &StackEnv, link: Link) -> StackEnv {
        let mut seen = env.clone();
        if let Some(p) = self.proxies.get(&link) {
            seen.redis_url = via(&env.redis_url, p.addr());
        }
        seen
    }

    /// The downstream double's credit and status URLs as the service sees them.
    pub(crate) fn wallet_urls(
        &self,
        double: &reward_standins::downstream::DownstreamDouble,
    ) -> (String, String) {
        match self.proxies.get(&Link::ServiceWallet) {
            Some(p) => (
                via(&double.url(), p.addr()),
                via(&double.status_url(), p.addr()),
            ),
            None => (double.url(), double.status_url()),
        }
    }

    /// Every proxy's counters, by link name (for the report).
    pub(crate) fn stats(&self) -> BTreeMap<String, faultproxy::ProxyStats> {
        self.proxies
            .iter()
            .map(|(l, p)| (l.name().to_string(), p.stats()))
            .collect()
    }
}

/// `url` with its `host:port` replaced by `addr`; scheme, credentials, path and query
/// kept (`redis://:secret@127.0.0.1:16379/0` → `redis://:secret@ADDR/0`).
pub(crate) fn via(url: &str, addr: SocketAddr) -> String {
    let (scheme, userinfo, _, tail) = reward_stack::env::url_parts(url);
    if scheme.is_empty() {
        return url.to_string();
    }
    let userinfo = userinfo.map_or(String::new(), |u| format!("{u}@"));
    format!("{scheme}://{userinfo}{addr}{tail}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::via;

    #[test]
    fn via_replaces_only_the_address() {
        let a = "127.0.0.1:4000".parse().unwrap();
        assert_eq!(via("redis://127.0.0.1:16379", a), "redis://127.0.0.1:4000");
        assert_eq!(
            via("redis://:s3cret@localhost:16379/2", a),
            "redis://:s3cret@127.0.0.1:4000/2"
        );
        assert_eq!(
            via("http://127.0.0.1:9/credit?x=1", a),
            "http://127.0.0.1:4000/credit?x=1"
        );
        assert_eq!(via("not a url", a), "not a url");
    }
}
