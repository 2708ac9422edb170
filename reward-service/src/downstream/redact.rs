//! URLs as logs and errors may show them.

/// A URL as it may be shown: without user name or password.
pub fn redacted(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    if !shown.username().is_empty() || shown.password().is_some() {
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
    }
    shown.to_string()
}
