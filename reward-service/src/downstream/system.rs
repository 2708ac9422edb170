//! The trait of a system that credits rewards ([`Downstream`]) and its futures.

use std::future::Future;
use std::pin::Pin;

use super::contract::Contract;
use super::credit::{Credit, CreditStatus, Receipt};
use super::error::{CreditError, ErrorCode};

/// A boxed credit future (the trait is used as `dyn`, one per reward type).
pub type CreditFuture<'a> = Pin<Box<dyn Future<Output = Result<Receipt, CreditError>> + Send + 'a>>;

/// A boxed future of many credits' answers, in the order asked.
pub type CreditManyFuture<'a> =
    Pin<Box<dyn Future<Output = Vec<Result<Receipt, CreditError>>> + Send + 'a>>;

/// A boxed status future.
pub type StatusFuture<'a> =
    Pin<Box<dyn Future<Output = Result<CreditStatus, CreditError>> + Send + 'a>>;

/// A system that credits rewards.
pub trait Downstream: Send + Sync + std::fmt::Debug {
    /// Credits `c` once (as far as this downstream is concerned).
    fn credit<'a>(&'a self, c: &'a Credit) -> CreditFuture<'a>;

    /// Credits each of `cs` once, answering for each in order. The default sends
    /// them all at once as single credits; a downstream that can carry many credits
    /// in one round trip (the [`Ledger`](super::Ledger)) overrides it. Either way each credit is its
    /// own operation with its own answer: one failing does not fail the others.
    fn credit_many<'a>(&'a self, cs: &'a [Credit]) -> CreditManyFuture<'a> {
        Box::pin(futures_util::future::join_all(
            cs.iter().map(|c| self.credit(c)),
        ))
    }

    /// What this downstream promises (module doc). The default is the weakest
    /// promise: no key honoured, no status, so an in-doubt credit is held for an
    /// operator rather than ever sent twice.
    fn contract(&self) -> Contract {
        Contract {
            honours_key: false,
            status: false,
            max_call_ms: 0,
        }
    }

    /// Whether `c`'s trade number was credited. Only called when
    /// [`Contract::status`] is true; the default answers an error.
    fn status<'a>(&'a self, c: &'a Credit) -> StatusFuture<'a> {
        let _ = c;
        Box::pin(async {
            Err(CreditError::new(
                ErrorCode::Unavailable,
                "this downstream has no status query",
            ))
        })
    }
}
