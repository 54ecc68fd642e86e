//! Service-time models: how long one batch takes on a model instance.
//!
//! The engine asks a [`ServiceTime`] for the execution time of every batch it starts. Analytic
//! models live here; the calibrated, profile-driven model lives in [`crate::profile`].

use crate::rng::SimRng;

/// What a batch looks like to a service-time model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchShape {
    /// Requests in the batch (>= 1).
    pub size: u32,
    /// Longest input of the batch in tokens: inputs are padded to it.
    pub max_input_tokens: u32,
    /// Sum of the batch's input tokens, before padding.
    pub total_input_tokens: u64,
}

/// A model of batch execution time. Implementations are immutable and shared between instances;
/// all randomness comes from the caller's generator so runs stay deterministic.
pub trait ServiceTime: Send + Sync + std::fmt::Debug {
    /// Draws the execution time of one batch, in nanoseconds.
    fn sample_ns(&self, batch: &BatchShape, rng: &mut SimRng) -> u64;

    /// The mean execution time of a batch of this shape, in nanoseconds (for capacity estimates
    /// and reports; the engine itself only samples).
    fn mean_ns(&self, batch: &BatchShape) -> f64;
}
