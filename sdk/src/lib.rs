//! The in-process SDK that activity services link: a reward becomes an encrypted
//! token for the user at once, and an event for the pipeline.
//!
//! - [`token`]: sealing and opening tokens (AES-256-GCM, rotating keys).

pub mod token;
