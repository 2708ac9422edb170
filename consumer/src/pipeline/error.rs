//! Why the pipeline could not start.

/// Why the pipeline could not start.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The service URL.
    #[error("service endpoint: {0}")]
    Endpoint(String),
}
