//! The gateway: admission control (token-bucket rate limit, maximum requests in flight) and load
//! balancing across a pool's instances. A refused request is answered at once with its reason.

use rand::RngExt;

use crate::rng::SimRng;
use crate::scenario::{GatewaySpec, LoadBalancing};
use std::collections::HashMap;

use capsim_trace::StringColumn;

use crate::context::{Ctx, InstanceId, LANE_CACHE, LANE_GATEWAY, Place, PoolId, Ticket};
use crate::event::EventKind;
use crate::instance::Fleet;
use crate::record::{RejectReason, RequestRecord};

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
    // Once per request: with a plain `#[inline]` the compiler kept it out of line after the
    // engine's split into stages, and the call cost M/M/4 2% (paired A/B, docs/benchmarks.md).
    #[inline(always)]
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

/// A pool as the gateway sees it: where its instances are, how many are active, and its
/// balancer.
pub(crate) struct PoolRoute {
    /// Index of the pool's first instance in the fleet.
    pub first_instance: u32,
    /// Active instances (a prefix of the pool's instances; the rest are standby).
    pub instances: u32,
    pub standby_left: u32,
    pub activate_at_outstanding: u32,
    pub cold_start_ns: u64,
    pub balancer: Balancer,
    pub rng: SimRng,
}

/// What the gateway did with a request that reached it.
pub(crate) enum Arrived {
    /// Refused at once.
    Refused(RejectReason),
    /// Admitted; an event carries it on (a cache answer, the gateway's overhead).
    Later,
    /// Admitted, and routed now (no overhead).
    Route,
}

/// The gateway: admission, the response cache, its fixed overhead, the routing of each request
/// to a pool (by model, else class) and an instance of it, and the pools' standby instances.
pub(crate) struct Gateway<'a> {
    pub admission: Admission,
    pub overhead_ns: u64,
    pub cache_hit_probability: f64,
    pub cache_latency_ns: u64,
    pub cache_rng: SimRng,
    pub model: Option<&'a StringColumn>,
    pub class: Option<&'a [u32]>,
    pub model_pool: HashMap<String, PoolId>,
    pub class_pool: HashMap<u32, PoolId>,
    pub pools: Vec<PoolRoute>,
}

impl Gateway<'_> {
    /// The request on `ticket` reaches the gateway: refused, answered by the cache, or admitted.
    #[inline(always)]
    pub fn arrive(&mut self, ctx: &mut Ctx, ticket: u32) -> Arrived {
        let now = ctx.now.ns();
        let t = &mut ctx.tickets[ticket];
        t.record.gateway_ns = now;
        t.place = Place::Gateway;
        if let Err(refusal) = self.admission.admit(now) {
            return Arrived::Refused(match refusal {
                Refusal::RateLimited => RejectReason::RateLimited,
                Refusal::MaxInFlight => RejectReason::MaxInFlight,
            });
        }
        t.admitted = true;
        if self.cache_hit_probability > 0.0
            && self.cache_rng.random_bool(self.cache_hit_probability)
        {
            t.record.cache_hit = true;
            t.record.admitted_ns = now;
            ctx.events.push_in_order(
                LANE_CACHE,
                now.saturating_add(self.cache_latency_ns),
                EventKind::CacheAnswered,
                ticket,
                t.generation,
            );
            return Arrived::Later;
        }
        if self.overhead_ns == 0 {
            return Arrived::Route;
        }
        ctx.events.push_in_order(
            LANE_GATEWAY,
            now.saturating_add(self.overhead_ns),
            EventKind::GatewayDone,
            ticket,
            t.generation,
        );
        Arrived::Later
    }

    #[inline(always)]
    fn pool_of(&self, row: usize) -> PoolId {
        if self.pools.len() == 1 {
            return PoolId(0);
        }
        self.routed_pool_of(row)
    }

    /// [`Gateway::pool_of`] where there are several pools.
    #[inline(never)]
    fn routed_pool_of(&self, row: usize) -> PoolId {
        if let Some(model) = self.model
            && let Some(&p) = self.model_pool.get(model.get(row))
        {
            return p;
        }
        if let Some(class) = self.class
            && let Some(&p) = self.class_pool.get(&class[row])
        {
            return p;
        }
        PoolId(0)
    }

    /// Routes an admitted request to an instance of its pool, which counts it as outstanding;
    /// returns the instance's index in the fleet.
    #[inline(always)]
    pub fn route(&mut self, ctx: &mut Ctx, fleet: &mut Fleet, ticket: u32) -> InstanceId {
        let now = ctx.now.ns();
        let row = ctx.tickets[ticket].record.request as usize;
        let p = self.pool_of(row);
        if self.pools[p.index()].standby_left > 0 {
            self.activate_standby_if_needed(ctx, fleet, p);
        }
        let pool = &mut self.pools[p.index()];
        let first = pool.first_instance as usize;
        let instances = &fleet.instances;
        let pick = pool.balancer.pick(
            pool.instances,
            &mut pool.rng,
            |i| instances[first + i as usize].outstanding,
            |i| instances[first + i as usize].waiting(),
        );
        let instance = InstanceId(pool.first_instance + pick);
        let t = &mut ctx.tickets[ticket];
        t.record.pool = p.0;
        t.record.instance = pick;
        t.record.admitted_ns = now;
        fleet.instances[instance.index()].outstanding += 1;
        instance
    }

    /// The fleet's index of the instance a routed request went to.
    #[inline]
    pub fn instance_of(&self, record: &RequestRecord) -> InstanceId {
        InstanceId(self.pools[usize::from(record.pool)].first_instance + record.instance)
    }

    /// Activates the pool's next standby instance when every active one is loaded to the
    /// threshold; its model instances become ready after the cold start.
    fn activate_standby_if_needed(&mut self, ctx: &mut Ctx, fleet: &mut Fleet, p: PoolId) {
        let now = ctx.now.ns();
        let pool = &mut self.pools[p.index()];
        if pool.standby_left == 0 {
            return;
        }
        let first = pool.first_instance as usize;
        let active = &fleet.instances[first..first + pool.instances as usize];
        if active
            .iter()
            .any(|i| i.outstanding < pool.activate_at_outstanding)
        {
            return;
        }
        let index = pool.first_instance + pool.instances;
        pool.instances += 1;
        pool.standby_left -= 1;
        let instance = &mut fleet.instances[index as usize];
        let from = instance.first_model_instance;
        for mi in from..from + instance.model_instances {
            if pool.cold_start_ns == 0 {
                let model_instance = &mut fleet.model_instances[mi as usize];
                model_instance.ready = true;
                model_instance.idle_since = ctx.now;
                instance.free.insert(mi - from);
            } else {
                ctx.events.push(
                    now.saturating_add(pool.cold_start_ns),
                    EventKind::ModelInstanceReady,
                    mi,
                    0,
                );
            }
        }
    }

    /// Post-processing (or the cache) is done: the response leaves the gateway, which frees
    /// the request's place in its admission.
    #[inline(always)]
    pub fn respond(&mut self, ctx: &mut Ctx, ticket: u32) {
        let t = &mut ctx.tickets[ticket];
        t.record.postprocessed_ns = ctx.now.ns();
        self.release(t);
    }

    /// Frees the place an admitted request held in admission (once).
    #[inline(always)]
    pub fn release(&mut self, t: &mut Ticket) {
        if t.admitted {
            t.admitted = false;
            self.admission.release();
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
