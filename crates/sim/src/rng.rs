//! Seeded random streams. Every component draws from its own generator, derived from the run's
//! seed and the component's identity, so adding a component never shifts another's draws.

use rand::SeedableRng;

/// The generator every component uses: xoshiro256++, a fixed, documented algorithm, so a seed
/// means the same stream on every platform and rand release.
pub type SimRng = rand::rngs::Xoshiro256PlusPlus;

/// One step of SplitMix64 (Steele, Lea and Flood): a bijective mixer with good avalanche, used
/// to turn (seed, component) pairs into independent-looking generator seeds.
#[inline]
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Who draws from a stream. Each variant plus its index names one component of the serving
/// model; the numbering is part of the determinism contract, so append new kinds, never reorder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    /// The client-to-gateway network path.
    NetworkUp,
    /// The gateway-to-client network path.
    NetworkDown,
    /// The gateway's load balancer.
    Balancer,
    /// Pre-processing workers of one pool.
    Preprocess,
    /// Model execution on one pool (one stream per pool).
    Execution,
    /// Post-processing of one pool.
    Postprocess,
    /// The result cache.
    Cache,
    /// Client think times and retry backoff.
    Client,
    /// The dynamic batcher's race at a batch's end (the replay input `thread_first_fraction`), one
    /// stream per instance.
    BatcherRace,
    /// The dynamic batcher's dispatch latency draws (the replay input `dispatch_residuals`), one stream
    /// per instance.
    BatcherDispatch,
    /// A continuous batcher's step-time factors (`batcher.step_residuals`), one stream per
    /// instance.
    StepResiduals,
    /// The dynamic batcher's wake-ups slept through at a batch's end
    /// (`batcher.missed_release`), one stream per instance.
    BatcherMissedRelease,
    /// The machine's speed window by window (`execution.speed_levels`), one stream per pool.
    Speed,
}

impl Component {
    fn id(self) -> u64 {
        match self {
            Component::NetworkUp => 1,
            Component::NetworkDown => 2,
            Component::Balancer => 3,
            Component::Preprocess => 4,
            Component::Execution => 5,
            Component::Postprocess => 6,
            Component::Cache => 7,
            Component::Client => 8,
            Component::BatcherRace => 9,
            Component::BatcherDispatch => 10,
            Component::StepResiduals => 11,
            Component::BatcherMissedRelease => 12,
            Component::Speed => 13,
        }
    }
}

/// The generator of `component` number `index` (a pool or instance number) in a run seeded
/// with `seed`. Distinct (component, index) pairs get unrelated streams.
pub fn stream(seed: u64, component: Component, index: u32) -> SimRng {
    let key = splitmix64(splitmix64(seed) ^ component.id().wrapping_mul(0xD6E8_FEB8_6659_FD93))
        ^ u64::from(index).wrapping_mul(0xA076_1D64_78BD_642F);
    SimRng::seed_from_u64(splitmix64(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn streams_are_reproducible_and_distinct_per_component() {
        let a1 = stream(7, Component::Execution, 0).next_u64();
        let a2 = stream(7, Component::Execution, 0).next_u64();
        let b = stream(7, Component::Execution, 1).next_u64();
        let c = stream(7, Component::Preprocess, 0).next_u64();
        let d = stream(8, Component::Execution, 0).next_u64();
        assert_eq!(a1, a2);
        assert!(a1 != b && a1 != c && a1 != d && b != c);
    }
}
