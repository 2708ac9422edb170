//! The reference wallet page, served at `/wallet/`: what a user sees of the rewards
//! they won in one activity.
//!
//! Three static files (`reward-service/wallet/`: `index.html`, `wallet.css`,
//! `wallet.js`), plain HTML, CSS and JavaScript with no build step and no library,
//! compiled into the binary. The page reads its session from the URL fragment
//! (`/wallet/#session=rws1....`; a fragment never reaches a server or a log), keeps it
//! for the tab (`sessionStorage`) and removes it from the address bar, then calls the
//! wallet API with it as a bearer:
//!
//! 1. `GET /v1/session`: whose wallet this is (a refused session shows why: expired,
//!    invalid, missing);
//! 2. `POST /v1/users/{user}/rewards` with the tokens the app kept on this device
//!    (`localStorage`, key `reward-wallet:{activity}:{user}`, a JSON array of the
//!    sealed texts `send_reward` returned): the server's list merged with them. Pending
//!    and credited rewards are listed with the balance per type; tokens that do not
//!    open for this user (another user's, edited) and tokens the server has no record
//!    of are counted, never shown as money;
//! 3. `POST /v1/withdraw` with every pending token: the result per token (credited,
//!    already credited, try later, budget spent, in doubt), then the list again.
//!
//! States: loading, empty, error (with a retry), offline (the browser's own signal),
//! unreachable (a request that never reached the service), session refused. Everything is
//! reachable by keyboard, status changes are announced (`aria-live`), and the layout
//! reflows to one column on a phone-width screen.
//!
//! Every answer carries a Content-Security-Policy that allows only these files and
//! calls to this origin: no inline script, no third-party code on a page that holds a
//! session.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

const INDEX: &str = include_str!("../wallet/index.html");
const CSS: &str = include_str!("../wallet/wallet.css");
const JS: &str = include_str!("../wallet/wallet.js");

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn file(body: &'static str, content_type: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// The page's routes (open: the files hold no data; the API behind them checks the
/// session).
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/wallet", get(|| async { Redirect::permanent("/wallet/") }))
        .route(
            "/wallet/",
            get(|| async { file(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            "/wallet/wallet.css",
            get(|| async { file(CSS, "text/css; charset=utf-8") }),
        )
        .route(
            "/wallet/wallet.js",
            get(|| async { file(JS, "text/javascript; charset=utf-8") }),
        )
}
