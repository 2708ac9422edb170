//! The pipeline's parts started in this process for a measurement, each with key
//! prefixes of its own named by the run's tag (the bench families of
//! `reward_tools::clean`), and the signed events they credit.

mod consumer;
mod events;
mod service;

pub use self::consumer::start_consumer;
pub use self::events::produce_events;
pub use self::service::start_service;
