//! Where messages come from.

use tokio::sync::{mpsc, watch};

use crate::pipeline::Item;

/// Where messages come from. Every source feeds the same
/// [`Pipeline`](crate::pipeline::Pipeline) through one channel of [`Item`]s, each
/// carrying the [`Ack`](crate::pipeline::Ack) the pipeline calls once the message is
/// settled; how that becomes a commit is the source's own business (Kafka: the windows
/// and commits of [`crate::kafka`]; RocketMQ: the push consumer's offset store, see
/// [`crate::rocketmq`]).
pub trait Source: Send + Sized + 'static {
    /// Feeds `tx` until `stop` turns true; returns once no more messages will come.
    fn feed(
        &mut self,
        tx: mpsc::Sender<Item>,
        stop: watch::Receiver<bool>,
    ) -> impl std::future::Future<Output = ()> + Send;

    /// Called after the pipeline drained: final commits, leaving the group. Answers
    /// whether it closed cleanly.
    fn finish(self) -> impl std::future::Future<Output = bool> + Send;
}
