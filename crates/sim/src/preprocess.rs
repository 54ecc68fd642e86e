//! Pre-processing: a pool of CPU workers per instance (tokenization, decoding, resizing) whose
//! time per request is `base + per_input_token * input_tokens`. Requests wait FIFO for a worker.

use std::collections::VecDeque;

use crate::context::{Ctx, Place, PoolId};
use crate::event::EventKind;
use crate::scenario::PreprocessSpec;

/// The worker pool of one instance.
#[derive(Debug, Clone)]
pub struct WorkerPool {
    free: u32,
    waiting: VecDeque<u32>,
}

impl WorkerPool {
    /// `workers` idle workers.
    pub fn new(workers: u32) -> WorkerPool {
        WorkerPool {
            free: workers,
            waiting: VecDeque::new(),
        }
    }

    /// Takes a worker for `ticket` if one is idle (`true`); otherwise queues it (`false`).
    #[inline]
    pub fn start_or_wait(&mut self, ticket: u32) -> bool {
        if self.free > 0 {
            self.free -= 1;
            true
        } else {
            self.waiting.push_back(ticket);
            false
        }
    }

    /// A worker finished: returns the next waiting ticket it now serves, or frees the worker.
    #[inline]
    pub fn finish(&mut self) -> Option<u32> {
        match self.waiting.pop_front() {
            Some(t) => Some(t),
            None => {
                self.free += 1;
                None
            }
        }
    }

    /// Requests waiting for a worker.
    #[inline]
    pub fn waiting(&self) -> u32 {
        self.waiting.len() as u32
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
        t.place = Place::Preprocess;
        if workers.start_or_wait(ticket) {
            let done = now.saturating_add(time_ns(spec, t.record.input_tokens));
            ctx.events.push(done, EventKind::PreprocessDone, ticket, 0);
        } else {
            ctx.counters.preprocess_waiting += 1;
        }
        true
    }

    /// A worker of an instance of `pool` (with these `workers`) finished a request: it starts
    /// the next waiting one, if any.
    #[inline(always)]
    pub fn finish(&self, ctx: &mut Ctx, pool: PoolId, workers: &mut Option<WorkerPool>) {
        let workers = workers.as_mut().expect("pool with preprocess has workers");
        if let Some(next) = workers.finish() {
            ctx.counters.preprocess_waiting -= 1;
            let spec = self.specs[pool.index()]
                .as_ref()
                .expect("pool with workers has a preprocess spec");
            let tokens = ctx.tickets[next].record.input_tokens;
            ctx.events.push(
                ctx.now.ns().saturating_add(time_ns(spec, tokens)),
                EventKind::PreprocessDone,
                next,
                0,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_wait_fifo_for_a_free_worker() {
        let mut p = WorkerPool::new(1);
        assert!(p.start_or_wait(1));
        assert!(!p.start_or_wait(2));
        assert!(!p.start_or_wait(3));
        assert_eq!(p.waiting(), 2);
        assert_eq!(p.finish(), Some(2));
        assert_eq!(p.finish(), Some(3));
        assert_eq!(p.finish(), None);
        assert!(p.start_or_wait(4));
    }
}
