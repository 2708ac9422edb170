//! A downstream reached over HTTP: a JSON `POST` per credit with the trade number as
//! its idempotency key, an optional status route, and answers classified by status code.

use std::time::Duration;

use super::contract::Contract;
use super::credit::{Credit, CreditStatus, Receipt};
use super::error::{CreditError, ErrorCode};
use super::redact::redacted;
use super::system::{CreditFuture, Downstream, StatusFuture};

/// A downstream reached over HTTP: each credit is a `POST` of JSON
/// `{trade_no, user_id, reward_type, amount}` to one URL, with the trade number in the
/// `Idempotency-Key` header.
///
/// | answer | becomes |
/// | --- | --- |
/// | 2xx | credited; the receipt is the body's `ref` field, else (absent or empty) the trade number |
/// | no answer within the timeout, connection reset | [`ErrorCode::Timeout`] / [`ErrorCode::Unavailable`], **in doubt** |
/// | connection refused (nothing sent) | [`ErrorCode::Unavailable`], not credited |
/// | 5xx with body `{"code": "NOT_CREDITED"}` | [`ErrorCode::Unavailable`], not credited |
/// | any other 5xx | [`ErrorCode::Unavailable`], in doubt |
/// | 409 (the key is in use by a request still running) | [`ErrorCode::KeyInUse`], in doubt, retryable |
/// | 429 | [`ErrorCode::RateLimited`], not credited |
/// | 3xx (never followed: a wallet may redirect after crediting) | [`ErrorCode::Unavailable`], in doubt |
/// | 401, 403, 404, 405 | [`ErrorCode::Unavailable`], not credited (a configuration fault: retried, never failed) |
/// | 4xx with body `{"code": "ACCOUNT_CLOSED"}` | [`ErrorCode::AccountClosed`] |
/// | any other 4xx | [`ErrorCode::Invalid`] |
///
/// With a status URL, `GET {status_url}?trade_no=..&user_id=..` must answer 200 with
/// `{"state": "CREDITED", "ref": ...}` or `{"state": "NOT_CREDITED"}`; anything else
/// (a 404 included: it may be a wrong route) leaves the credit in doubt.
///
/// Classification reads the status and the `code`/`state` fields only, never message
/// text. A user name or password in either URL is used but never shown: errors name
/// the URL without them.
#[derive(Debug, Clone)]
pub struct Http {
    client: reqwest::Client,
    url: reqwest::Url,
    status_url: Option<reqwest::Url>,
    honours_key: bool,
    timeout: Duration,
}

/// How an HTTP downstream is reached and what it promises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpOptions {
    /// Per-call timeout.
    pub timeout: Duration,
    /// The downstream credits a repeated `Idempotency-Key` once.
    pub honours_key: bool,
    /// Where to ask whether a trade number was credited.
    pub status_url: Option<String>,
}

fn parse_url(what: &str, url: &str) -> Result<reqwest::Url, String> {
    // The text may hold a password: never echo it.
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{what}: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("{what} {}: not http(s)", redacted(&parsed)));
    }
    Ok(parsed)
}

impl Http {
    /// A downstream at `url`, each call bounded by `timeout`, with no idempotency key
    /// honoured and no status route (the weakest contract).
    pub fn new(url: &str, timeout: Duration) -> Result<Self, String> {
        Self::with_options(
            url,
            &HttpOptions {
                timeout,
                honours_key: false,
                status_url: None,
            },
        )
    }

    /// A downstream at `url` with the given contract.
    pub fn with_options(url: &str, o: &HttpOptions) -> Result<Self, String> {
        let url = parse_url("downstream url", url)?;
        let status_url = match &o.status_url {
            Some(s) => Some(parse_url("downstream status_url", s)?),
            None => None,
        };
        // A redirect would turn the POST into a GET elsewhere: never followed.
        let client = reqwest::Client::builder()
            .timeout(o.timeout)
            .connect_timeout(o.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("http client: {e}"))?;
        Ok(Self {
            client,
            url,
            status_url,
            honours_key: o.honours_key,
            timeout: o.timeout,
        })
    }

    /// A transport error: in doubt unless the connection never opened.
    fn transport(&self, url: &reqwest::Url, what: &str, e: &reqwest::Error) -> CreditError {
        // reqwest's error text can carry the URL: describe it ourselves.
        let kind = if e.is_timeout() {
            "timed out"
        } else if e.is_connect() {
            "could not connect"
        } else {
            "connection failed"
        };
        let detail = format!("{what} {}: {kind}", redacted(url));
        if e.is_timeout() {
            CreditError::new(ErrorCode::Timeout, detail)
        } else if e.is_connect() && what == "POST" {
            CreditError::not_credited(ErrorCode::Unavailable, detail)
        } else {
            CreditError::new(ErrorCode::Unavailable, detail)
        }
    }

    async fn credit_now(&self, c: &Credit) -> Result<Receipt, CreditError> {
        let body = serde_json::json!({
            "trade_no": c.trade_no,
            "user_id": c.user_id,
            "reward_type": c.reward_type,
            "amount": c.amount,
        });
        let resp = self
            .client
            .post(self.url.clone())
            .header("Idempotency-Key", &c.trade_no)
            .json(&body)
            .send()
            .await
            .map_err(|e| self.transport(&self.url, "POST", &e))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| self.transport(&self.url, "POST (reading the answer)", &e))?;
        let json: Option<serde_json::Value> = serde_json::from_str(&text).ok();
        let field = |name: &str| {
            json.as_ref()
                .and_then(|j| j.get(name))
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        if status.is_success() {
            // An empty `ref` is no receipt: the trade number stands in, as for none.
            return Ok(field("ref")
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| c.trade_no.clone()));
        }
        let mut shown = text;
        shown.truncate(shown.floor_char_boundary(200));
        let detail = format!("POST {} answered {status}: {shown}", redacted(&self.url));
        Err(match status.as_u16() {
            400..=499 if field("code").as_deref() == Some("ACCOUNT_CLOSED") => {
                CreditError::not_credited(ErrorCode::AccountClosed, detail)
            }
            // A redirect is never followed, but a wallet may answer 303 after it has
            // credited (post-redirect-get): in doubt.
            300..=399 => CreditError::new(ErrorCode::Unavailable, detail),
            // A rotated credential or a wrong route: the configuration's fault, not the
            // grant's; nothing was credited, so it waits and retries.
            401 | 403 | 404 | 405 => CreditError::not_credited(ErrorCode::Unavailable, detail),
            429 => CreditError::not_credited(ErrorCode::RateLimited, detail),
            408 => CreditError::new(ErrorCode::Timeout, detail),
            409 => CreditError::new(ErrorCode::KeyInUse, detail),
            400..=499 => CreditError::not_credited(ErrorCode::Invalid, detail),
            _ if field("code").as_deref() == Some("NOT_CREDITED") => {
                CreditError::not_credited(ErrorCode::Unavailable, detail)
            }
            _ => CreditError::new(ErrorCode::Unavailable, detail),
        })
    }

    async fn status_now(&self, c: &Credit) -> Result<CreditStatus, CreditError> {
        let Some(url) = &self.status_url else {
            return Err(CreditError::new(
                ErrorCode::Unavailable,
                "this downstream has no status_url",
            ));
        };
        let mut asked = url.clone();
        asked
            .query_pairs_mut()
            .append_pair("trade_no", &c.trade_no)
            .append_pair("user_id", &c.user_id);
        let resp = self
            .client
            .get(asked)
            .send()
            .await
            .map_err(|e| self.transport(url, "GET", &e))?;
        let status = resp.status();
        let json: Option<serde_json::Value> = resp.json().await.ok();
        let field = |name: &str| {
            json.as_ref()
                .and_then(|j| j.get(name))
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        match (status.as_u16(), field("state").as_deref()) {
            (200, Some("CREDITED")) => Ok(CreditStatus::Credited(
                field("ref")
                    .filter(|r| !r.is_empty())
                    .unwrap_or_else(|| c.trade_no.clone()),
            )),
            (200, Some("NOT_CREDITED")) => Ok(CreditStatus::NotCredited),
            _ => Err(CreditError::new(
                ErrorCode::Unavailable,
                format!("GET {} answered {status} without a state", redacted(url)),
            )),
        }
    }
}

impl Downstream for Http {
    fn credit<'a>(&'a self, c: &'a Credit) -> CreditFuture<'a> {
        Box::pin(self.credit_now(c))
    }

    fn contract(&self) -> Contract {
        Contract {
            honours_key: self.honours_key,
            status: self.status_url.is_some(),
            max_call_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
        }
    }

    fn status<'a>(&'a self, c: &'a Credit) -> StatusFuture<'a> {
        Box::pin(self.status_now(c))
    }
}
