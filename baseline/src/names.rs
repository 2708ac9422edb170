//! Names no earlier run used.

/// A name no earlier run used, so concurrent and repeated runs never share state.
pub fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{prefix}-{nanos:x}-{:04x}", rand::random::<u16>())
}
