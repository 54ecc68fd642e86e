//! The simulator against a real server (`capsim validate`): Triton's statistics, configuration
//! and per-request trace ([`triton`]), the comparison of a measured run with its simulations
//! ([`comparison`], for `--endpoint`), and of capsim's own live server with its simulation
//! ([`live`]).

pub mod comparison;
pub mod live;
pub mod triton;
