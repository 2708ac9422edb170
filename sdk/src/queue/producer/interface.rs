//! What every broker producer implements.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use super::error::ProduceError;
use super::record::OutMsg;

/// A boxed future, for the trait's object safety.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A broker producer.
pub trait Producer: Send + Sync + fmt::Debug {
    /// Its name in the configuration.
    fn name(&self) -> &str;
    /// Sends `msgs` to `topic`; one result per message, in order.
    fn send_batch<'a>(
        &'a self,
        topic: &'a str,
        msgs: &'a [OutMsg],
    ) -> BoxFuture<'a, Vec<Result<(), ProduceError>>>;
    /// Flushes and stops.
    fn close(&self) -> BoxFuture<'_, ()>;
}
