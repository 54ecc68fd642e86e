//! How long execution takes: the models of a dynamic batch's service time and of a continuous
//! batcher's step time, side by side with the profile formats they read and the hardware and
//! model presets of the roofline.
//!
//! A dynamic-batcher pool's batch takes a [`service::ServiceTime`] (constant, exponential,
//! affine, or drawn from a calibrated batch [`profile`]); a continuous-batcher pool's step takes a
//! [`step_time::StepTime`] (linear, the analytic [`roofline`] with [`hardware`] presets, or drawn
//! from a decoder [`step_profile`]), padded to the engine's CUDA graphs and spread by measured
//! factors ([`step_spread`]). The scenario names a model; `crate::build` builds it.

pub mod hardware;
mod least_squares;
pub mod model_config;
pub mod operators;
pub mod profile;
pub mod roofline;
pub mod service;
pub mod slowdown;
pub mod step_profile;
pub mod step_spec;
pub mod step_spread;
pub mod step_time;

pub use least_squares::{least_squares, non_negative_least_squares};
