//! The clients: they send the trace's requests (open loop at the trace's arrivals, or closed
//! loop, each of `concurrency` clients sending after its previous answer and a think time),
//! give up on an attempt not answered within `load.client_timeout`, retry rejected or
//! timed-out attempts after a backoff, and own the network between them and the gateway (the
//! uplink of each request, the downlink of each response).

use crate::context::{ClientId, Ctx, LANE_CLIENT, LANE_CLIENT_TIMEOUT, NO_LANE, Place, RequestId};
use crate::event::EventKind;
use crate::network::NetworkPath;
use crate::record::{FailReason, Outcome, RequestRecord};
use crate::rng::SimRng;

/// Which requests are excluded from statistics as warm-up (they are still simulated and counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Warmup {
    /// Measure everything. [`crate::steady::run`] reads it as "no warm-up given" and derives
    /// the measurement window from the run.
    #[default]
    None,
    /// Exclude requests sent before this time, in nanoseconds.
    DurationNs(u64),
    /// Exclude the first this-many requests of the trace.
    Count(u64),
    /// Measure only requests sent in `[from_ns, to_ns)`: the steady-state window that
    /// [`crate::steady::run`] derives (warm-up before it, the drain after it).
    Window {
        /// First send time measured, in nanoseconds.
        from_ns: u64,
        /// Send times from here on are not measured, in nanoseconds.
        to_ns: u64,
    },
}

impl Warmup {
    /// Whether trace row `request`, sent at `sent_ns` on the trace's timeline, is measured.
    pub fn measures(self, request: u64, sent_ns: u64) -> bool {
        match self {
            Warmup::None => true,
            Warmup::DurationNs(d) => sent_ns >= d,
            Warmup::Count(n) => request >= n,
            Warmup::Window { from_ns, to_ns } => (from_ns..to_ns).contains(&sent_ns),
        }
    }
}

/// A network path in one direction, with its random stream and its event lane.
pub(crate) struct Link {
    pub path: NetworkPath,
    /// No latency and no transfer time: the stage is run inline.
    pub instant: bool,
    pub rng: SimRng,
    /// Its lane when the delay is constant, else [`NO_LANE`] (the heap).
    pub lane: usize,
}

impl Link {
    pub fn new(path: NetworkPath, rng: SimRng, lane: usize) -> Link {
        Link {
            instant: path.is_instant(),
            lane: if path.is_constant() { lane } else { NO_LANE },
            path,
            rng,
        }
    }
}

/// When and how often a failed attempt is sent again.
pub(crate) struct RetryPolicy {
    pub max_attempts: u32,
    pub backoff_ns: u64,
    pub multiplier: f64,
    pub on_rejected: bool,
    pub on_timed_out: bool,
    /// Retry an attempt that failed at the client's own timeout.
    pub on_client_timeout: bool,
}

/// The clients and the trace they send.
pub(crate) struct Clients<'a> {
    pub arrival_ns: &'a [u64],
    pub input_tokens: &'a [u32],
    pub output_tokens: Option<&'a [u32]>,
    pub class: Option<&'a [u32]>,
    pub warmup: Warmup,
    pub closed_loop: bool,
    pub think_time_ns: u64,
    /// `load.client_timeout`: an attempt not answered this long after its send fails.
    pub timeout_ns: Option<u64>,
    pub retry: RetryPolicy,
    pub uplink: Link,
    pub downlink: Link,
    /// The next trace row to send.
    pub next_request: usize,
    /// Trace rows sent (first attempts).
    pub first_attempts: u64,
    /// Attempts waiting out a retry's backoff (out of the system, still to be sent).
    pub backing_off: u64,
}

impl<'a> Clients<'a> {
    /// Rows of the trace.
    #[inline]
    pub fn rows(&self) -> usize {
        self.arrival_ns.len()
    }

    /// Takes the next trace row to send, if any is left.
    #[inline]
    pub fn next_row(&mut self) -> Option<RequestId> {
        if self.next_request < self.arrival_ns.len() {
            let request = self.next_request;
            self.next_request += 1;
            Some(RequestId(request as u32))
        } else {
            None
        }
    }

    /// `client` sends trace row `request` now: its first attempt gets a ticket.
    #[inline]
    pub fn send(&mut self, ctx: &mut Ctx, request: RequestId, client: ClientId) -> u32 {
        let row = request.0 as usize;
        let now = ctx.now.ns();
        let mut record = RequestRecord::new(request.0, 1, now);
        record.client = client.0;
        record.input_tokens = self.input_tokens[row];
        record.output_tokens = self.output_tokens.map_or(0, |o| o[row]);
        let level = self.class.map_or(0, |c| c[row]);
        let measured = self.warmup.measures(u64::from(request.0), now);
        let ticket = ctx.tickets.take(record, level, measured);
        self.first_attempts += 1;
        ticket
    }

    /// The attempt on `ticket` leaves for the gateway, its client's timeout counting from now;
    /// true when it is there at once (the uplink takes no time).
    #[inline(always)]
    pub fn launch(&mut self, ctx: &mut Ctx, ticket: u32) -> bool {
        let now = ctx.now.ns();
        ctx.counters.sent += 1;
        ctx.counters.in_system += 1;
        ctx.interval.arrivals += 1;
        let t = &ctx.tickets[ticket];
        let (tokens, generation) = (t.record.input_tokens, t.generation);
        if let Some(timeout_ns) = self.timeout_ns {
            // Every attempt waits the same time from its send: the lane stays in time order.
            ctx.events.push_in_order(
                LANE_CLIENT_TIMEOUT,
                now.saturating_add(timeout_ns),
                EventKind::ClientTimeout,
                ticket,
                generation,
            );
        }
        if self.uplink.instant {
            return true;
        }
        let delay_ns = self.uplink.path.delay_ns(tokens, &mut self.uplink.rng);
        ctx.events.push_in_order(
            self.uplink.lane,
            now.saturating_add(delay_ns),
            EventKind::GatewayArrival,
            ticket,
            generation,
        );
        false
    }

    /// The client makes attempt `attempt + 1` of the request whose last attempt failed on
    /// `ticket` (to be launched).
    pub fn retry(&mut self, ctx: &mut Ctx, ticket: u32) {
        let now = ctx.now.ns();
        let t = &mut ctx.tickets[ticket];
        debug_assert_eq!(t.place, Place::Backoff);
        self.backing_off -= 1;
        let last = t.record;
        let mut record = RequestRecord::new(last.request, last.attempt + 1, now);
        record.client = last.client;
        // The trace's sizes: the last attempt's may have been truncated by its pool.
        let row = last.request as usize;
        record.input_tokens = self.input_tokens[row];
        record.output_tokens = self.output_tokens.map_or(0, |o| o[row]);
        t.record = record;
        t.place = Place::NetworkIn;
        t.admitted = false;
    }

    /// The response on `ticket` leaves the gateway for its client; true when it is there at
    /// once (the downlink takes no time).
    #[inline(always)]
    pub fn respond(&mut self, ctx: &mut Ctx, ticket: u32) -> bool {
        if self.downlink.instant {
            return true;
        }
        let now = ctx.now.ns();
        let t = &mut ctx.tickets[ticket];
        t.place = Place::NetworkOut;
        let delay_ns = self
            .downlink
            .path
            .delay_ns(t.record.output_tokens, &mut self.downlink.rng);
        ctx.events.push_in_order(
            self.downlink.lane,
            now.saturating_add(delay_ns),
            EventKind::ResponseDelivered,
            ticket,
            t.generation,
        );
        false
    }

    /// Whether an attempt that ended with `outcome` is sent again.
    #[inline]
    pub fn retries(&self, outcome: Outcome, attempt: u16) -> bool {
        (match outcome {
            Outcome::Completed => false,
            Outcome::Rejected(_) => self.retry.on_rejected,
            Outcome::TimedOut => self.retry.on_timed_out,
            Outcome::Failed(FailReason::Timeout) => self.retry.on_client_timeout,
            // The engine fails a request only at its client's timeout: the other reasons are a
            // real server's.
            Outcome::Failed(_) => false,
        }) && u32::from(attempt) < self.retry.max_attempts
    }

    /// The attempt on `ticket` (attempt `attempt`, of `client`) has ended: it is retried after
    /// its backoff, or the ticket is freed and a closed-loop client thinks, then sends again.
    #[inline(always)]
    pub fn ended(
        &mut self,
        ctx: &mut Ctx,
        ticket: u32,
        retry: bool,
        attempt: u16,
        client: ClientId,
    ) {
        let now = ctx.now.ns();
        if retry {
            ctx.tickets[ticket].place = Place::Backoff;
            self.backing_off += 1;
            let backoff_ns =
                self.retry.backoff_ns as f64 * self.retry.multiplier.powi(i32::from(attempt) - 1);
            ctx.events.push(
                now.saturating_add(backoff_ns.round() as u64),
                EventKind::RetrySend,
                ticket,
                0,
            );
            return;
        }
        ctx.tickets.release(ticket);
        if self.closed_loop && client != ClientId::OPEN_LOOP {
            ctx.events.push_in_order(
                LANE_CLIENT,
                now.saturating_add(self.think_time_ns),
                EventKind::ClientSend,
                client.0,
                0,
            );
        }
    }
}
