//! Pre-processing: a pool of CPU workers per instance (tokenization, decoding, resizing) whose
//! time per request is `base + per_input_token * input_tokens`. Requests wait FIFO for a worker.

use std::collections::VecDeque;

use crate::context::{Ctx, Place, PoolId};
use crate::event::EventKind;
use crate::scenario::PreprocessSpec;

/// The worker pool of one instance.
///
/// A request whose client gives up while it waits for a worker leaves its entry behind as a
/// tombstone, skipped when it reaches the front (as in the instance queue); one whose client
/// gives up while a worker runs it keeps the worker busy to the end (tokenization is not
/// interruptible), and the worker then takes the next request.
#[derive(Debug, Clone)]
pub struct WorkerPool {
    free: u32,
    /// (ticket, generation) of each waiting request, tombstones included.
    waiting: VecDeque<(u32, u32)>,
    /// Waiting requests, tombstones excluded.
    live_waiting: u32,
}

impl WorkerPool {
    /// `workers` idle workers.
    pub fn new(workers: u32) -> WorkerPool {
        WorkerPool {
            free: workers,
            waiting: VecDeque::new(),
            live_waiting: 0,
        }
    }

    /// Takes a worker for `ticket` (of `generation`) if one is idle (`true`); otherwise queues
    /// it (`false`).
    #[inline]
    pub fn start_or_wait(&mut self, ticket: u32, generation: u32) -> bool {
        if self.free > 0 {
            self.free -= 1;
            true
        } else {
            self.waiting.push_back((ticket, generation));
            self.live_waiting += 1;
            false
        }
    }

    /// A worker finished: returns the next live waiting ticket it now serves (`live` says which
    /// entries still wait), or frees the worker.
    #[inline]
    pub fn finish(&mut self, mut live: impl FnMut(u32, u32) -> bool) -> Option<u32> {
        while let Some((ticket, generation)) = self.waiting.pop_front() {
            if live(ticket, generation) {
                self.live_waiting -= 1;
                return Some(ticket);
            }
        }
        debug_assert_eq!(self.live_waiting, 0, "live waiting requests were skipped");
        self.free += 1;
        None
    }

    /// Records that one waiting request left without a worker (its entry is now a tombstone).
    #[inline]
    pub fn forget_one(&mut self) {
        debug_assert!(self.live_waiting > 0);
        self.live_waiting -= 1;
    }

    /// Requests waiting for a worker.
    #[inline]
    pub fn waiting(&self) -> u32 {
        self.live_waiting
    }
}

/// Pre-processing time of one request, in nanoseconds.
#[inline]
pub fn time_ns(spec: &PreprocessSpec, input_tokens: u32) -> u64 {
    spec.per_input_token
        .0
        .saturating_mul(u64::from(input_tokens))
        .saturating_add(spec.base.0)
}

/// The pools' pre-processing, by pool (`None`: the pool has none).
pub(crate) struct Preprocess {
    pub specs: Vec<Option<PreprocessSpec>>,
}

impl Preprocess {
    /// The request on `ticket`, routed to an instance of `pool` with these `workers`, starts
    /// pre-processing or waits for a worker; false when the pool has no pre-processing (the
    /// request goes on at once).
    #[inline(always)]
    pub fn start(
        &self,
        ctx: &mut Ctx,
        pool: PoolId,
        workers: &mut Option<WorkerPool>,
        ticket: u32,
    ) -> bool {
        // An instance has workers exactly when its pool pre-processes.
        let Some(workers) = workers else {
            return false;
        };
        let spec = self.specs[pool.index()]
            .as_ref()
            .expect("pool with workers has a preprocess spec");
        let now = ctx.now.ns();
        let t = &mut ctx.tickets[ticket];
        if workers.start_or_wait(ticket, t.generation) {
            t.place = Place::Preprocess;
            let done = now.saturating_add(time_ns(spec, t.record.input_tokens));
            ctx.events
                .push(done, EventKind::PreprocessDone, ticket, t.generation);
        } else {
            t.place = Place::PreprocessWaiting;
            ctx.counters.preprocess_waiting += 1;
        }
        true
    }

    /// A worker of an instance of `pool` (with these `workers`) finished a request: it starts
    /// the next waiting one, if any.
    #[inline(always)]
    pub fn finish(&self, ctx: &mut Ctx, pool: PoolId, workers: &mut Option<WorkerPool>) {
        let workers = workers.as_mut().expect("pool with preprocess has workers");
        let tickets = &ctx.tickets;
        let next = workers.finish(|ticket, generation| {
            let t = &tickets[ticket];
            t.generation == generation && t.place == Place::PreprocessWaiting
        });
        if let Some(next) = next {
            ctx.counters.preprocess_waiting -= 1;
            let spec = self.specs[pool.index()]
                .as_ref()
                .expect("pool with workers has a preprocess spec");
            let t = &mut ctx.tickets[next];
            t.place = Place::Preprocess;
            ctx.events.push(
                ctx.now
                    .ns()
                    .saturating_add(time_ns(spec, t.record.input_tokens)),
                EventKind::PreprocessDone,
                next,
                t.generation,
            );
        }
    }

    /// The client of the request on `ticket`, waiting for a worker of these `workers`, gave
    /// up: it no longer waits.
    pub fn abandon_waiting(&self, ctx: &mut Ctx, workers: &mut Option<WorkerPool>) {
        let workers = workers.as_mut().expect("pool with preprocess has workers");
        workers.forget_one();
        ctx.counters.preprocess_waiting -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_wait_fifo_for_a_free_worker() {
        let mut p = WorkerPool::new(1);
        assert!(p.start_or_wait(1, 0));
        assert!(!p.start_or_wait(2, 0));
        assert!(!p.start_or_wait(3, 0));
        assert_eq!(p.waiting(), 2);
        assert_eq!(p.finish(|_, _| true), Some(2));
        assert_eq!(p.finish(|_, _| true), Some(3));
        assert_eq!(p.finish(|_, _| true), None);
        assert!(p.start_or_wait(4, 0));
    }

    #[test]
    fn a_request_abandoned_while_waiting_is_skipped_and_not_counted() {
        let mut p = WorkerPool::new(1);
        assert!(p.start_or_wait(1, 0));
        assert!(!p.start_or_wait(2, 0));
        assert!(!p.start_or_wait(3, 0));
        // Ticket 2's client gives up: its entry stays as a tombstone.
        p.forget_one();
        assert_eq!(p.waiting(), 1);
        assert_eq!(p.finish(|ticket, _| ticket != 2), Some(3));
        assert_eq!(p.waiting(), 0);
        assert_eq!(p.finish(|ticket, _| ticket != 2), None);
        assert!(
            p.start_or_wait(4, 1),
            "the freed worker takes the next request"
        );
    }
}
