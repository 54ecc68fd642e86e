//! What two or more commands share, and no command's own logic: the grid flags of `sweep` and
//! `plan` ([`grid`]), the short-trace check ([`steady`]), loading ONNX Runtime ([`runtime`]) and
//! the live-server flags of `replay` and `validate` ([`server`]), and the fit to Triton's
//! statistics of `fit` and `calibrate --endpoint` ([`triton_fit`]). Nothing here imports a command;
//! the commands import from here and from `cmd/mod.rs`, never from each other.

pub mod grid;
pub mod runtime;
pub mod server;
pub mod steady;
pub mod triton_fit;
