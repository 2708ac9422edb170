#![doc = include_str!("README.md")]

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
