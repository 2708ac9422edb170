//! SDK configurations the tests of several crates start from.

use std::path::Path;

/// An SDK whose two producers point at a closed port (`127.0.0.1:1`), so no event
/// reaches a broker: each is retried, then spooled (or, with a long
/// `spool.after_ms`, held in memory). One queue, `massive` (topic `unused`), one
/// reward type, `cash`. `store_extra` lines continue the `[store]` section (after
/// `redis_url` and `key_prefix`); `spool_extra` lines continue the `[spool]` section
/// (after `dir`) and may open further sections (`[batch]`, `[retry]`).
///
/// ```
/// let text = reward_testkit::sdk_configs::brokers_down(
///     "redis://127.0.0.1:16379",
///     "rt-example",
///     "write_wait_ms = 5000",
///     std::path::Path::new("/tmp/spool-example"),
///     "after_ms = 300\n[batch]\nsend_timeout_ms = 500",
/// );
/// let cfg = sdk::config::SdkConfig::from_toml_str(&text).unwrap();
/// assert_eq!(cfg.store.write_wait_ms, 5000);
/// ```
pub fn brokers_down(
    redis_url: &str,
    key_prefix: &str,
    store_extra: &str,
    spool_dir: &Path,
    spool_extra: &str,
) -> String {
    format!(
        r#"
        default_queue = "massive"
        [store]
        redis_url = "{redis_url}"
        key_prefix = "{key_prefix}"
        {store_extra}
        [producers.k]
        kind = "kafka"
        brokers = "127.0.0.1:1"
        [producers.r]
        kind = "kafka"
        brokers = "127.0.0.1:1"
        [queues.massive]
        topic = "unused"
        primary = "k"
        backup = "r"
        ratio = 50
        [types.cash]
        [spool]
        dir = "{spool}"
        {spool_extra}
        "#,
        spool = spool_dir.display(),
    )
}
