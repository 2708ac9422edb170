//! Where permanent failures go besides the archive: the failure topic.

use sdk::Sdk;

/// Where permanent failures go besides the archive: a virtual queue of the SDK
/// (its topic is the failure topic).
#[derive(Debug, Clone)]
pub struct FailureTopic {
    /// The SDK whose queue carries them.
    pub sdk: Sdk,
    /// The virtual queue's name.
    pub queue: String,
}
