//! capsim's discrete-event engine and the model of the serving path.

pub mod rng;
pub mod service;
