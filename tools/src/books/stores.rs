//! Where the books live.

/// Where the books live: one Redis and the prefixes the services were configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stores {
    /// The Redis holding tokens, claim records and budgets.
    pub redis_url: String,
    /// The Redis of the ledger (the stand-in wallet's own, or `redis_url`).
    pub ledger_redis_url: String,
    /// The token store's key prefix (`[sdk.store] key_prefix`).
    pub token_prefix: String,
    /// The claim store's key prefix (`[claims] key_prefix`).
    pub claims_prefix: String,
    /// The claim store's shards per scene (`[claims] shards`).
    pub claims_shards: u32,
    /// The ledger's key prefix (the built-in downstream's).
    pub ledger_prefix: String,
}
