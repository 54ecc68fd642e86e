//! The client network: one-way latency each way plus payload transfer time.

use rand::RngExt;
use rand_distr::Distribution;

use crate::rng::SimRng;
use crate::scenario::{LatencySpec, NetworkSpec};

/// The z-score of the 99th percentile of a standard normal distribution.
const Z_P99: f64 = 2.326_347_874_040_841;

/// A one-way latency distribution.
#[derive(Debug, Clone, PartialEq)]
pub enum Latency {
    /// No latency.
    Zero,
    /// Always this many nanoseconds.
    Constant(u64),
    /// Lognormal: `exp(mu + sigma * z)` nanoseconds.
    Lognormal {
        /// Log of the median in nanoseconds.
        mu: f64,
        /// Log-space standard deviation.
        sigma: f64,
    },
    /// Uniform choice among measured samples (nanoseconds).
    Empirical(Vec<u64>),
}

impl Latency {
    /// Builds the model from the scenario's spec.
    pub fn new(spec: Option<&LatencySpec>) -> Latency {
        match spec {
            None => Latency::Zero,
            Some(LatencySpec::Constant { one_way }) if one_way.0 == 0 => Latency::Zero,
            Some(LatencySpec::Constant { one_way }) => Latency::Constant(one_way.0),
            Some(LatencySpec::Lognormal { median, p99 }) => {
                let mu = (median.0 as f64).ln();
                Latency::Lognormal {
                    mu,
                    sigma: ((p99.0 as f64).ln() - mu) / Z_P99,
                }
            }
            Some(LatencySpec::Empirical { samples }) => {
                Latency::Empirical(samples.iter().map(|d| d.0).collect())
            }
        }
    }

    /// Draws one latency in nanoseconds.
    #[inline]
    pub fn sample_ns(&self, rng: &mut SimRng) -> u64 {
        match self {
            Latency::Zero => 0,
            Latency::Constant(ns) => *ns,
            Latency::Lognormal { mu, sigma } => {
                let z: f64 = rand_distr::StandardNormal.sample(rng);
                crate::time::round_ns((mu + sigma * z).exp())
            }
            Latency::Empirical(samples) => samples[rng.random_range(0..samples.len())],
        }
    }
}

/// One direction of the client network.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkPath {
    latency: Latency,
    ns_per_byte: f64,
    fixed_bytes: u64,
    bytes_per_token: u64,
}

impl NetworkPath {
    /// The client-to-gateway direction (request payload).
    pub fn uplink(spec: &NetworkSpec) -> NetworkPath {
        NetworkPath {
            latency: Latency::new(spec.latency.as_ref()),
            ns_per_byte: spec.bandwidth.map_or(0.0, |b| 1e9 / b.0),
            fixed_bytes: spec.request_bytes.0,
            bytes_per_token: spec.request_bytes_per_input_token,
        }
    }

    /// The gateway-to-client direction (response payload).
    pub fn downlink(spec: &NetworkSpec) -> NetworkPath {
        NetworkPath {
            latency: Latency::new(spec.latency.as_ref()),
            ns_per_byte: spec.bandwidth.map_or(0.0, |b| 1e9 / b.0),
            fixed_bytes: spec.response_bytes.0,
            bytes_per_token: spec.response_bytes_per_output_token,
        }
    }

    /// True when every traversal takes no time (the engine then skips the stage).
    pub fn is_instant(&self) -> bool {
        self.latency == Latency::Zero
            && (self.ns_per_byte == 0.0 || (self.fixed_bytes == 0 && self.bytes_per_token == 0))
    }

    /// True when every traversal takes the same time (constant or no latency, no payload time).
    pub fn is_constant(&self) -> bool {
        matches!(self.latency, Latency::Zero | Latency::Constant(_))
            && (self.ns_per_byte == 0.0 || (self.fixed_bytes == 0 && self.bytes_per_token == 0))
    }

    /// Time for one message carrying `tokens` tokens: latency plus payload / bandwidth.
    #[inline]
    pub fn delay_ns(&self, tokens: u32, rng: &mut SimRng) -> u64 {
        let bytes = self
            .bytes_per_token
            .saturating_mul(u64::from(tokens))
            .saturating_add(self.fixed_bytes);
        let transfer_ns = crate::time::round_ns(bytes as f64 * self.ns_per_byte);
        self.latency.sample_ns(rng).saturating_add(transfer_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::DurationNs;
    use rand::SeedableRng;

    #[test]
    fn lognormal_matches_its_median_and_p99() {
        let l = Latency::new(Some(&LatencySpec::Lognormal {
            median: DurationNs(1_000_000),
            p99: DurationNs(5_000_000),
        }));
        let mut rng = SimRng::seed_from_u64(11);
        let mut v: Vec<u64> = (0..200_000).map(|_| l.sample_ns(&mut rng)).collect();
        v.sort_unstable();
        let p50 = v[v.len() / 2] as f64;
        let p99 = v[v.len() * 99 / 100] as f64;
        assert!((p50 / 1e6 - 1.0).abs() < 0.02, "p50 {p50}");
        assert!((p99 / 5e6 - 1.0).abs() < 0.04, "p99 {p99}");
    }

    #[test]
    fn transfer_time_is_payload_over_bandwidth() {
        let spec = NetworkSpec {
            latency: Some(LatencySpec::Constant {
                one_way: DurationNs(100),
            }),
            bandwidth: Some(crate::quantity::BandwidthBytesPerS(1e9)),
            request_bytes: crate::quantity::SizeBytes(1000),
            request_bytes_per_input_token: 4,
            ..NetworkSpec::default()
        };
        let mut rng = SimRng::seed_from_u64(1);
        assert_eq!(
            NetworkPath::uplink(&spec).delay_ns(250, &mut rng),
            100 + 2000
        );
        assert!(!NetworkPath::uplink(&spec).is_instant());
        assert!(NetworkPath::uplink(&NetworkSpec::default()).is_instant());
    }
}
