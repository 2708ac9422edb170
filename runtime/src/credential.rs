//! Bearer credentials: read from the environment or a file it names, never printed,
//! compared in constant time.
//!
//! A credential comes from `VAR` or, when that is unset, from the file `VAR_FILE`
//! names (one line; trailing whitespace and newlines are dropped), so a secret need not sit in a
//! process's environment. It must be at least [`MIN_LEN`] bytes with no whitespace
//! or control character. `Debug` shows its length only, and no error names its
//! value, so a credential never reaches a log or a stored record.

/// The shortest credential accepted.
pub const MIN_LEN: usize = 16;

/// Why a credential could not be had; the message names the variable, never a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CredentialError(String);

/// A bearer credential.
#[derive(Clone)]
pub struct Credential(String);

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credential({} bytes)", self.0.len())
    }
}

impl Credential {
    /// Checks `value` and wraps it.
    ///
    /// ```
    /// use reward_runtime::credential::Credential;
    /// assert!(Credential::new("short").is_err());
    /// let c = Credential::new("0123456789abcdef").unwrap();
    /// assert_eq!(format!("{c:?}"), "Credential(16 bytes)");
    /// ```
    pub fn new(value: impl Into<String>) -> Result<Self, CredentialError> {
        let value = value.into();
        if value.len() < MIN_LEN || value.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(CredentialError(format!(
                "a credential must be at least {MIN_LEN} bytes without whitespace or control characters"
            )));
        }
        Ok(Self(value))
    }

    /// The credential in `var`, or in the file `{var}_FILE` names. `env` is the
    /// process environment (or a test's).
    pub fn from_env(env: &[(String, String)], var: &str) -> Result<Self, CredentialError> {
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let file_var = format!("{var}_FILE");
        let value = match (get(var), get(&file_var)) {
            (Some(v), _) => v,
            (None, Some(path)) => std::fs::read_to_string(&path)
                .map_err(|e| CredentialError(format!("{file_var} {path}: {e}")))?
                .trim_end()
                .to_string(),
            (None, None) => return Err(CredentialError(format!("set {var} or {file_var}"))),
        };
        Self::new(value).map_err(|e| CredentialError(format!("{var}: {e}")))
    }

    /// Whether either variable of [`Credential::from_env`] is set.
    pub fn is_set(env: &[(String, String)], var: &str) -> bool {
        let file_var = format!("{var}_FILE");
        env.iter().any(|(k, _)| *k == var || *k == file_var)
    }

    /// The `authorization` header value: `Bearer <credential>`.
    pub fn header(&self) -> String {
        format!("Bearer {}", self.0)
    }

    /// Whether `presented` equals the credential; the time taken does not depend on
    /// where they first differ.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let want = self.0.as_bytes();
        let mut diff = u8::from(want.len() != presented.len());
        for (i, w) in want.iter().enumerate() {
            diff |= w ^ presented.get(i).copied().unwrap_or(0);
        }
        diff == 0
    }

    /// Whether two credentials are the same secret (constant time).
    pub fn same_as(&self, other: &Credential) -> bool {
        self.matches(other.0.as_bytes())
    }
}

/// A gRPC interceptor that lets a call through only with `authorization: Bearer
/// <credential>` (feature `grpc`). The scheme is matched without regard to case, then
/// exactly one space, then the credential, compared in constant time. Built without a
/// credential ([`BearerAuth::optional`] with `None`) it refuses every call: an API
/// whose credential is not configured is closed, never open.
///
/// ```
/// use reward_runtime::credential::{BearerAuth, Credential};
/// use tonic::service::Interceptor as _;
///
/// let mut auth = BearerAuth::new(Credential::new("0123456789abcdef").unwrap());
/// let mut call = tonic::Request::new(());
/// call.metadata_mut().insert("authorization", "bearer 0123456789abcdef".parse().unwrap());
/// assert!(auth.call(call).is_ok());
/// let refused = auth.call(tonic::Request::new(())).unwrap_err();
/// assert_eq!(refused.code(), tonic::Code::Unauthenticated);
/// ```
#[cfg(feature = "grpc")]
#[derive(Debug, Clone)]
pub struct BearerAuth(Option<Credential>);

#[cfg(feature = "grpc")]
impl BearerAuth {
    /// Checks against `credential`.
    pub fn new(credential: Credential) -> Self {
        BearerAuth(Some(credential))
    }

    /// Checks against `credential` when there is one, else refuses everything.
    pub fn optional(credential: Option<Credential>) -> Self {
        BearerAuth(credential)
    }
}

#[cfg(feature = "grpc")]
impl tonic::service::Interceptor for BearerAuth {
    fn call(&mut self, req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let Some(credential) = &self.0 else {
            return Err(tonic::Status::unauthenticated(
                "this API has no credential configured on the server",
            ));
        };
        let ok = req
            .metadata()
            .get("authorization")
            .map(|v| v.as_bytes())
            .and_then(|v| v.split_at_checked(7))
            .is_some_and(|(scheme, t)| {
                scheme.eq_ignore_ascii_case(b"bearer ") && credential.matches(t)
            });
        if ok {
            Ok(req)
        } else {
            Err(tonic::Status::unauthenticated(
                "a valid `authorization: Bearer <credential>` is required",
            ))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn from_the_variable_or_its_file_never_echoed() {
        let c = Credential::from_env(&env(&[("T", "a-long-enough-credential")]), "T").unwrap();
        assert!(c.matches(b"a-long-enough-credential"));
        assert!(!c.matches(b"a-long-enough-credentiaL"));
        assert!(!c.matches(b"a-long-enough-credential-"));
        assert_eq!(c.header(), "Bearer a-long-enough-credential");

        let dir = std::env::temp_dir().join(format!("cred-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("t");
        std::fs::write(&file, "from-a-file-0123456789\n").unwrap();
        let c = Credential::from_env(&env(&[("T_FILE", file.to_str().unwrap())]), "T").unwrap();
        assert!(c.matches(b"from-a-file-0123456789"));
        assert!(Credential::is_set(&env(&[("T_FILE", "x")]), "T"));

        let short = Credential::from_env(&env(&[("T", "secret with space1")]), "T").unwrap_err();
        assert!(!short.to_string().contains("secret"), "{short}");
        let none = Credential::from_env(&env(&[]), "T").unwrap_err();
        assert_eq!(none.to_string(), "set T or T_FILE");
        let c = Credential::new("0123456789abcdef-xyz").unwrap();
        assert!(!format!("{c:?}").contains("0123"));
        assert!(c.same_as(&c.clone()));
    }
}
