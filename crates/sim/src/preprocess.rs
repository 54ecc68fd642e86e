//! Pre-processing: a pool of CPU workers per instance (tokenization, decoding, resizing) whose
//! time per request is `base + per_input_token * input_tokens`. Requests wait FIFO for a worker.
//! With `[host]` the workers are the host's cores, which also run each response's way-out job
//! ([`crate::host`]).

use std::collections::VecDeque;

use crate::context::{Ctx, Place, PoolId};
use crate::event::EventKind;
use crate::host::HostJobs;
use crate::scenario::PreprocessSpec;

/// The worker pool of one instance.
///
/// A request whose client gives up while it waits for a worker leaves its entry behind as a
/// tombstone, skipped when it reaches the front (as in the instance queue); one whose client
/// gives up while a worker runs it keeps the worker busy to the end (tokenization is not
/// interruptible), and the worker then takes the next request.
#[derive(Debug, Clone)]
pub struct WorkerPool {
    /// Workers (cores) running no job.
    free: u32,
    /// Cores the model instances' compute holds now (`host.compute_cores` each while a batch
    /// computes): a job starts only while more cores run no job than compute holds.
    held: u32,
    /// Cores one model instance's compute holds while it runs.
    compute_cores: u32,
    /// (ticket, generation) of each waiting request, tombstones included.
    waiting: VecDeque<(u32, u32)>,
    /// Waiting requests, tombstones excluded.
    live_waiting: u32,
}

impl WorkerPool {
    /// `workers` idle workers.
    pub fn new(workers: u32) -> WorkerPool {
        WorkerPool::sharing_with_compute(workers, 0)
    }

    /// A host's `cores`, of which each model instance's compute holds `compute_cores` while it
    /// runs ([`Self::compute_started`]).
    pub fn sharing_with_compute(cores: u32, compute_cores: u32) -> WorkerPool {
        WorkerPool {
            free: cores,
            held: 0,
            compute_cores,
            waiting: VecDeque::new(),
            live_waiting: 0,
        }
    }

    /// Takes a worker for `ticket` (of `generation`) if one is idle (`true`); otherwise queues
    /// it (`false`).
    #[inline]
    pub fn start_or_wait(&mut self, ticket: u32, generation: u32) -> bool {
        if self.free > self.held {
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
    pub fn finish(&mut self, live: impl FnMut(u32, u32) -> bool) -> Option<u32> {
        self.free += 1;
        self.next(live)
    }

    /// The next live waiting ticket (`live` says which entries still wait), taking a worker for
    /// it, when a worker is free beyond those compute holds; `None` otherwise.
    #[inline]
    pub fn next(&mut self, mut live: impl FnMut(u32, u32) -> bool) -> Option<u32> {
        if self.free <= self.held {
            return None;
        }
        while let Some((ticket, generation)) = self.waiting.pop_front() {
            if live(ticket, generation) {
                self.live_waiting -= 1;
                self.free -= 1;
                return Some(ticket);
            }
        }
        debug_assert_eq!(self.live_waiting, 0, "live waiting requests were skipped");
        None
    }

    /// A model instance started computing a batch: its compute holds its cores until
    /// [`Self::compute_ended`]. Jobs already running finish (the OS shares the cores; a
    /// job's time is short), and no new one starts while compute holds every free core.
    #[inline]
    pub fn compute_started(&mut self) {
        self.held += self.compute_cores;
    }

    /// A model instance's batch computed: its cores are free for jobs again (start the waiting
    /// ones with [`Self::next`]); false when its compute held none, and nothing changed.
    #[inline]
    pub fn compute_ended(&mut self) -> bool {
        debug_assert!(self.held >= self.compute_cores);
        self.held -= self.compute_cores;
        self.compute_cores > 0
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

/// Which way a job takes a request: in (pre-processing, and the host's work on a request) or
/// out (the host's work on a response).
#[derive(Debug, Clone, Copy)]
enum Way {
    In,
    Out,
}

/// The job of `job_ns` on `ticket` starts on a free worker of `workers` (its end an event) or
/// waits for one; true when it started.
#[inline(always)]
fn run_or_wait(
    ctx: &mut Ctx,
    workers: &mut WorkerPool,
    ticket: u32,
    job_ns: u64,
    way: Way,
) -> bool {
    let now = ctx.now.ns();
    let t = &mut ctx.tickets[ticket];
    let (running, waiting, done) = match way {
        Way::In => (
            Place::Preprocess,
            Place::PreprocessWaiting,
            EventKind::PreprocessDone,
        ),
        Way::Out => (
            Place::HostResponse,
            Place::HostResponseWaiting,
            EventKind::HostResponseDone,
        ),
    };
    if workers.start_or_wait(ticket, t.generation) {
        t.place = running;
        ctx.events
            .push(now.saturating_add(job_ns), done, ticket, t.generation);
        true
    } else {
        t.place = waiting;
        false
    }
}

/// The pools' pre-processing, and their hosts' cores (`[host]`), by pool.
pub(crate) struct Preprocess {
    /// By pool: its pre-processing (`None`: none).
    pub specs: Vec<Option<PreprocessSpec>>,
    /// By pool: its host's jobs, when its instances' workers are their host's cores
    /// (`[host]`); they then run each request's job on its way in and its response's on the
    /// way out (see [`crate::host`]).
    pub hosts: Vec<Option<HostJobs>>,
}

impl Preprocess {
    /// CPU time of the way-in job of a request of pool `p` with `input_tokens`, in nanoseconds:
    /// its pre-processing, plus the host's work with `[host]`.
    #[inline(always)]
    fn request_ns(&self, p: usize, input_tokens: u32) -> u64 {
        let spec = self.specs[p].as_ref();
        match &self.hosts[p] {
            None => time_ns(
                spec.expect("pool with workers has a preprocess spec or a host"),
                input_tokens,
            ),
            Some(host) => host
                .request_ns(input_tokens)
                .saturating_add(spec.map_or(0, |pre| time_ns(pre, input_tokens))),
        }
    }

    /// The request on `ticket`, routed to an instance of `pool` with these `workers`, starts
    /// pre-processing or waits for a worker; false when the pool has no pre-processing (the
    /// request goes on at once), and with `[host]` when its way-in job takes no CPU time.
    #[inline(always)]
    pub fn start(
        &self,
        ctx: &mut Ctx,
        pool: PoolId,
        workers: &mut Option<WorkerPool>,
        ticket: u32,
    ) -> bool {
        // An instance has workers exactly when its pool pre-processes or has a host.
        let Some(workers) = workers else {
            return false;
        };
        let p = pool.index();
        let job_ns = self.request_ns(p, ctx.tickets[ticket].record.input_tokens);
        if job_ns == 0 && self.hosts[p].is_some() {
            // No CPU work: a host's job that takes no time takes no core.
            return false;
        }
        if !run_or_wait(ctx, workers, ticket, job_ns, Way::In) {
            ctx.counters.preprocess_waiting += 1;
        }
        true
    }

    /// The response of the request on `ticket`, executed at an instance of `pool` (which has
    /// `[host]`) with these cores, starts its way-out job on a core or waits for one; false when
    /// the job takes no CPU time (the response goes on at once).
    #[inline]
    pub fn start_response(
        &self,
        ctx: &mut Ctx,
        pool: PoolId,
        workers: &mut Option<WorkerPool>,
        ticket: u32,
    ) -> bool {
        let host = self.hosts[pool.index()]
            .as_ref()
            .expect("a response runs on the cores of a pool with a host");
        let workers = workers.as_mut().expect("an instance with a host has cores");
        let job_ns = host.response_ns(ctx.tickets[ticket].record.output_tokens);
        if job_ns == 0 {
            return false;
        }
        run_or_wait(ctx, workers, ticket, job_ns, Way::Out);
        true
    }

    /// A worker (or core) of an instance of `pool` (with these `workers`) finished a job: it
    /// starts the next waiting one, a request's way in or (with a host) a response's way out,
    /// if any.
    #[inline(always)]
    pub fn finish(&self, ctx: &mut Ctx, pool: PoolId, workers: &mut Option<WorkerPool>) {
        let workers = workers.as_mut().expect("pool with preprocess has workers");
        let tickets = &ctx.tickets;
        let next = workers.finish(|ticket, generation| waits(tickets, ticket, generation));
        if let Some(next) = next {
            self.start_waiting(ctx, pool, next);
        }
    }

    /// A model instance of an instance of `pool` (with these host `workers`, if any) finished
    /// computing: the cores its compute held take the waiting jobs.
    #[inline]
    pub fn compute_ended(&self, ctx: &mut Ctx, pool: PoolId, workers: &mut Option<WorkerPool>) {
        let Some(workers) = workers.as_mut() else {
            return;
        };
        if !workers.compute_ended() {
            return;
        }
        while let Some(next) = {
            let tickets = &ctx.tickets;
            workers.next(|ticket, generation| waits(tickets, ticket, generation))
        } {
            self.start_waiting(ctx, pool, next);
        }
    }

    /// The waiting job of `next` (which has taken a worker) starts: its way in or its
    /// response's way out.
    fn start_waiting(&self, ctx: &mut Ctx, pool: PoolId, next: u32) {
        let now = ctx.now.ns();
        let t = &mut ctx.tickets[next];
        if t.place == Place::PreprocessWaiting {
            ctx.counters.preprocess_waiting -= 1;
            t.place = Place::Preprocess;
            ctx.events.push(
                now.saturating_add(self.request_ns(pool.index(), t.record.input_tokens)),
                EventKind::PreprocessDone,
                next,
                t.generation,
            );
        } else {
            let host = self.hosts[pool.index()]
                .as_ref()
                .expect("a response waits for the cores of a pool with a host");
            t.place = Place::HostResponse;
            ctx.events.push(
                now.saturating_add(host.response_ns(t.record.output_tokens)),
                EventKind::HostResponseDone,
                next,
                t.generation,
            );
        }
    }

    /// The client of the request on `ticket`, waiting for a worker of these `workers` on its
    /// way in, gave up: it no longer waits.
    pub fn abandon_waiting(&self, ctx: &mut Ctx, workers: &mut Option<WorkerPool>) {
        let workers = workers.as_mut().expect("pool with preprocess has workers");
        workers.forget_one();
        ctx.counters.preprocess_waiting -= 1;
    }

    /// The client of a request whose response waits for one of these cores gave up: the
    /// response no longer waits.
    pub fn abandon_waiting_response(&self, workers: &mut Option<WorkerPool>) {
        workers
            .as_mut()
            .expect("an instance with a host has cores")
            .forget_one();
    }
}

/// Whether the entry (`ticket`, `generation`) of a worker pool's line still waits (its client
/// has not given up).
fn waits(tickets: &crate::context::Tickets, ticket: u32, generation: u32) -> bool {
    let t = &tickets[ticket];
    t.generation == generation
        && (t.place == Place::PreprocessWaiting || t.place == Place::HostResponseWaiting)
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
