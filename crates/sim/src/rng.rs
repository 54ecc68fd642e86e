//! Seeded random streams. Every component draws from its own generator, derived from the run's
//! seed and the component's identity, so adding a component never shifts another's draws.

/// The generator every component uses: xoshiro256++, a fixed, documented algorithm, so a seed
/// means the same stream on every platform and rand release.
pub type SimRng = rand::rngs::Xoshiro256PlusPlus;
