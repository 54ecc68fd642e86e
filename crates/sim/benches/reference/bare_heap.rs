//! A bare binary-heap event loop for FCFS M/M/c, timed beside the engine on the same model. The
//! ratio of the two says what the serving model's bookkeeping (tickets, stages, batcher,
//! percentiles, timeseries) costs per customer, whatever the machine's speed. Issue #3 quotes
//! about 9 M customers/s for "a bare binary-heap event loop" on its development machine; this one
//! is leaner (it runs about 26 M/s on the 2-core test VM), so the two are not interchangeable.
//!
//! It does the least an event loop can do for this model: departures in `std`'s `BinaryHeap`,
//! arrivals merged from the sorted slice (as the engine does), waiting customers in a FIFO, and
//! only the sum of the waits kept (no percentiles, no per-stage statistics, no timeseries).
//! Shared by the `engine` benchmark and the `mm4_rate` example.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use capsim_sim::rng::SimRng;
use capsim_sim::round_ns;
use rand_distr::Distribution;

/// Runs FCFS M/M/`servers` over `arrival_ns` (sorted) with exponential service of mean
/// `mean_service_ns`, drawing from `rng`; returns the mean wait in the queue, in nanoseconds.
/// A departure and an arrival at the same instant: the departure goes first.
pub fn mmc_mean_wait_ns(
    arrival_ns: &[u64],
    servers: usize,
    mean_service_ns: f64,
    rng: &mut SimRng,
) -> f64 {
    let mut departures: BinaryHeap<Reverse<u64>> = BinaryHeap::with_capacity(servers);
    let mut waiting: VecDeque<u64> = VecDeque::with_capacity(1024);
    let service_ns = |rng: &mut SimRng| {
        let e: f64 = rand_distr::Exp1.sample(rng);
        round_ns(e * mean_service_ns)
    };
    let mut busy = 0;
    let mut wait_sum_ns = 0u128;
    let mut next = 0;
    loop {
        let next_arrival_ns = arrival_ns.get(next).copied().unwrap_or(u64::MAX);
        match departures.peek() {
            Some(&Reverse(done_ns)) if done_ns <= next_arrival_ns => {
                departures.pop();
                if let Some(arrived_ns) = waiting.pop_front() {
                    wait_sum_ns += u128::from(done_ns - arrived_ns);
                    departures.push(Reverse(done_ns + service_ns(rng)));
                } else {
                    busy -= 1;
                }
            }
            _ if next_arrival_ns != u64::MAX => {
                next += 1;
                if busy < servers {
                    busy += 1;
                    departures.push(Reverse(next_arrival_ns + service_ns(rng)));
                } else {
                    waiting.push_back(next_arrival_ns);
                }
            }
            _ => break,
        }
    }
    assert!(waiting.is_empty() && busy == 0, "the loop drains");
    wait_sum_ns as f64 / arrival_ns.len().max(1) as f64
}
