#![doc = include_str!("README.md")]

mod contract;
mod credit;
mod error;
mod http;
mod ledger;
mod redact;
mod system;

pub use self::contract::Contract;
pub use self::credit::{Credit, CreditStatus, Receipt};
pub use self::error::{CreditError, ErrorCode};
pub use self::http::{Http, HttpOptions};
pub use self::ledger::{Account, LEDGER_TIMEOUT, Ledger};
pub use self::redact::redacted;
pub use self::system::{CreditFuture, CreditManyFuture, Downstream, StatusFuture};
