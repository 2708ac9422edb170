//! The wallet's HTTP/JSON API (axum).
//!
//! | route | body | answer |
//! | --- | --- | --- |
//! | `POST /v1/tokens/validate` | `{user_id, activity_id, tokens[]}` | `{results: [{validity, token?, credited, creditable, reason?}]}` per token, in order (`creditable`: a withdrawal would credit it now) |
//! | `GET /v1/users/{user_id}/rewards?activity_id=` | - | the wallet page (below) |
//! | `POST /v1/users/{user_id}/rewards` | `{activity_id, tokens[]}` | the page, merged with the tokens the client kept |
//! | `POST /v1/withdraw` | `{user_id, activity_id, tokens[]}` | `{items: [{validity, token?, result?}], credited_now_amount}` |
//! | `GET /v1/session` | - | `{caller: "session", user_id, activity_id, expires_at_ms, max_tokens, max_body_bytes}` (or `{caller: "backend", ...}`): who calls, and the request limits |
//! | `POST /v1/sessions` | `{user_id, activity_id, ttl_secs}` | `{session, expires_at_ms}`: a session minted for a wallet backend (wallet credential only) |
//! | `GET /wallet/` | - | the reference wallet page (`reward-service/wallet/`, see [`crate::page`]) |
//! | `GET /healthz` | - | 200 while the process serves |
//! | `GET /readyz` | - | 200 when Redis answers, else 503 |
//! | `GET /metrics` | - | Prometheus metrics (the binary; see `docs/metrics.md`); needs the metrics credential (`REWARD_METRICS_TOKEN`, else the grant credential), never the wallet's: budgets are not for wallet frontends |
//!
//! The page: `{pending[], credited[], unknown[], illegal, unreadable, expired, expired_trade_nos[],
//! refused, refused_trade_nos[], balance: {type: {pending, credited, total}}}`; `balance`
//! is what the page shows the user per reward type: the credited amount plus what is
//! on its way. Each pending entry carries `sealed`, the token's text, which a
//! withdrawal presents. Nothing that can never be credited is pending: expired
//! tokens are counted in `expired`, tokens over their type's ceiling (or another
//! limit) in `refused`.
//!
//! `validity` is `legal`, `unknown`, `expired` or `illegal` (see [`crate::service`]).
//! The validate body requires `activity_id`: a token's AEAD binding includes its
//! activity, so it cannot be opened without one.
//!
//! # Who may call
//! The wallet routes take either the service-wide wallet credential (a backend: any
//! user) or a **session** ([`sdk::session`]): a short-lived pass a wallet backend mints
//! for one user in one activity, which a browser may hold. A session caller may only
//! name its own user and activity, in the path, the query and the body alike.
//!
//! # CORS
//! Requests from an origin in `wallet.cors_origins` get `Access-Control-Allow-Origin`
//! (that origin, never `*`) and `Vary: Origin`, and their preflights (`OPTIONS`) are
//! answered 204 for `GET`/`POST` with the `authorization` and `content-type` headers.
//! A preflight from any other origin gets 403 `origin_not_allowed`; a plain request
//! from one is served without CORS headers, so the browser keeps the answer from the
//! page that asked. No cookies are involved: the credential is always a header.
//!
//! # Errors
//! Every error is JSON `{error, reason}` with a stable `error` code:
//! 401 `unauthorized` (no bearer credential, or one that is neither the wallet
//! credential nor a session; see `reward_service::config`), 401 `session_expired`,
//! 401 `session_invalid` (edited, signed with a key the service does not hold, lives
//! too long, or sessions are off), 401 `session_other_user` / `session_other_activity`
//! (a session naming a user or activity other than the request's), 403 `forbidden` (a
//! session asking to mint sessions), 501 `sessions_off` (minting without session
//! keys), 413 `too_large` (body over
//! `server.max_body_bytes`), 400 `bad_request` (malformed JSON, missing fields, more
//! than `server.max_tokens_per_request` tokens, empty ids), 503 `unavailable` (Redis
//! failed; nothing was half-done that a retry would repeat wrongly: withdrawals are
//! idempotent per trade number).
//!
//! # Where each part lives
//! `routes` (the router), `handlers` (one function a route), `auth` (the credential
//! and session checks), `cors`, `views` (what a token, a check and a page look like in
//! JSON), `error` (`ApiError`), `state` (`HttpState`, what the routes share).

mod auth;
mod cors;
mod error;
mod handlers;
mod routes;
mod state;
#[cfg(test)]
mod tests;
mod views;

pub use self::auth::{Caller, bearer};
pub use self::error::ApiError;
pub use self::routes::router;
pub use self::state::HttpState;
pub use self::views::TokenView;
