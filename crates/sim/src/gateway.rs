//! The gateway: admission control (token-bucket rate limit, maximum requests in flight) and load
//! balancing across a pool's instances. A refused request is answered at once with its reason.

use rand::RngExt;

use crate::rng::SimRng;
use crate::scenario::{GatewaySpec, LoadBalancing};

/// A token bucket: `rate_rps` tokens a second, at most `burst` banked; each request takes one.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenBucket {
    tokens_per_ns: f64,
    capacity: f64,
    tokens: f64,
    last_ns: u64,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate_rps: f64, burst: u32) -> TokenBucket {
        TokenBucket {
            tokens_per_ns: rate_rps * 1e-9,
            capacity: f64::from(burst),
            tokens: f64::from(burst),
            last_ns: 0,
        }
    }

    /// Takes a token at `now_ns` if one is banked; `false` means rate-limited.
    #[inline]
    pub fn try_take(&mut self, now_ns: u64) -> bool {
        let elapsed_ns = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        self.tokens = (self.tokens + elapsed_ns as f64 * self.tokens_per_ns).min(self.capacity);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Why the gateway refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The token bucket was empty.
    RateLimited,
    /// `max_in_flight` requests were already admitted.
    MaxInFlight,
}

/// Gateway admission state.
#[derive(Debug, Clone)]
pub struct Admission {
    bucket: Option<TokenBucket>,
    max_in_flight: u32,
    in_flight: u32,
}

impl Admission {
    /// Builds the admission controller from the scenario.
    pub fn new(spec: &GatewaySpec) -> Admission {
        Admission {
            bucket: spec.rate_limit.map(|rate| {
                let burst = spec.burst.unwrap_or_else(|| (rate.0.floor() as u32).max(1));
                TokenBucket::new(rate.0, burst)
            }),
            max_in_flight: spec.max_in_flight.unwrap_or(u32::MAX),
            in_flight: 0,
        }
    }

    /// Admits or refuses a request arriving at `now_ns`. An admitted request counts in flight
    /// until [`Admission::release`].
    #[inline]
    pub fn admit(&mut self, now_ns: u64) -> Result<(), Refusal> {
        if self.in_flight >= self.max_in_flight {
            return Err(Refusal::MaxInFlight);
        }
        if let Some(bucket) = &mut self.bucket
            && !bucket.try_take(now_ns)
        {
            return Err(Refusal::RateLimited);
        }
        self.in_flight += 1;
        Ok(())
    }

    /// An admitted request has been answered (or has left with a timeout or rejection).
    #[inline]
    pub fn release(&mut self) {
        debug_assert!(self.in_flight > 0);
        self.in_flight -= 1;
    }
}

/// Picks an instance of a pool for each admitted request.
#[derive(Debug, Clone)]
pub struct Balancer {
    policy: LoadBalancing,
    next: u32,
}

impl Balancer {
    /// A balancer applying `policy`.
    pub fn new(policy: LoadBalancing) -> Balancer {
        Balancer { policy, next: 0 }
    }

    /// Chooses among `count` instances (>= 1). `outstanding(i)` is the number of requests
    /// routed to instance `i` and not finished there; `waiting(i)` those not yet executing.
    /// Ties go to the lowest index.
    #[inline]
    pub fn pick(
        &mut self,
        count: u32,
        rng: &mut SimRng,
        outstanding: impl Fn(u32) -> u32,
        waiting: impl Fn(u32) -> u32,
    ) -> u32 {
        debug_assert!(count >= 1);
        if count == 1 {
            return 0;
        }
        match self.policy {
            LoadBalancing::RoundRobin => {
                let i = self.next % count;
                self.next = (i + 1) % count;
                i
            }
            LoadBalancing::Random => rng.random_range(0..count),
            LoadBalancing::LeastOutstanding => {
                (0..count).min_by_key(|&i| outstanding(i)).unwrap_or(0)
            }
            LoadBalancing::JoinShortestQueue => (0..count).min_by_key(|&i| waiting(i)).unwrap_or(0),
            LoadBalancing::PowerOfTwo => {
                let a = rng.random_range(0..count);
                let b = rng.random_range(0..count - 1);
                let b = if b >= a { b + 1 } else { b };
                if outstanding(b) < outstanding(a) {
                    b
                } else {
                    a
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::RateRps;
    use rand::SeedableRng;

    #[test]
    fn token_bucket_admits_burst_then_paces_at_the_rate() {
        let mut a = Admission::new(&GatewaySpec {
            rate_limit: Some(RateRps(1000.0)),
            burst: Some(2),
            ..GatewaySpec::default()
        });
        assert_eq!(a.admit(0), Ok(()));
        assert_eq!(a.admit(0), Ok(()));
        assert_eq!(a.admit(0), Err(Refusal::RateLimited));
        assert_eq!(a.admit(999_999), Err(Refusal::RateLimited));
        assert_eq!(a.admit(1_000_000), Ok(()));
    }

    #[test]
    fn max_in_flight_refuses_until_released() {
        let mut a = Admission::new(&GatewaySpec {
            max_in_flight: Some(1),
            ..GatewaySpec::default()
        });
        assert_eq!(a.admit(0), Ok(()));
        assert_eq!(a.admit(1), Err(Refusal::MaxInFlight));
        a.release();
        assert_eq!(a.admit(2), Ok(()));
    }

    #[test]
    fn policies_pick_the_documented_instance() {
        let mut rng = SimRng::seed_from_u64(1);
        let load = [3u32, 1, 2];
        let wait = [0u32, 5, 1];
        let mut rr = Balancer::new(LoadBalancing::RoundRobin);
        let picks: Vec<u32> = (0..4)
            .map(|_| rr.pick(3, &mut rng, |i| load[i as usize], |i| wait[i as usize]))
            .collect();
        assert_eq!(picks, vec![0, 1, 2, 0]);
        let mut lo = Balancer::new(LoadBalancing::LeastOutstanding);
        assert_eq!(
            lo.pick(3, &mut rng, |i| load[i as usize], |i| wait[i as usize]),
            1
        );
        let mut jsq = Balancer::new(LoadBalancing::JoinShortestQueue);
        assert_eq!(
            jsq.pick(3, &mut rng, |i| load[i as usize], |i| wait[i as usize]),
            0
        );
        let mut p2 = Balancer::new(LoadBalancing::PowerOfTwo);
        for _ in 0..100 {
            assert_ne!(
                p2.pick(3, &mut rng, |i| load[i as usize], |i| wait[i as usize]),
                0,
                "the most loaded of any pair is never picked"
            );
        }
        let mut random = Balancer::new(LoadBalancing::Random);
        let mut seen = [0u32; 3];
        for _ in 0..300 {
            seen[random.pick(3, &mut rng, |_| 0, |_| 0) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 60), "{seen:?}");
    }
}
