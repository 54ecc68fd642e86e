//! Per-request records: what happened to each request (each attempt) on its way through the
//! serving path. The engine emits one [`RequestRecord`] when a request finishes, whatever the
//! outcome; a [`RecordSink`] keeps it ([`RequestLog`], written to `requests.parquet`) or drops it
//! ([`NoRecords`]). The live replay server produces the same records.

/// Marks a time or index a request never reached (for example `queued_ns` of a rejected one).
pub const NONE: u64 = u64::MAX;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RejectReason {
    /// The gateway's token bucket was empty.
    RateLimited,
    /// The gateway already had `max_in_flight` requests.
    MaxInFlight,
    /// The instance queue held `max_queue_size` requests.
    QueueFull,
    /// Continuous batching: the prompt and output need more KV blocks than the instance has.
    KvCapacity,
    /// Continuous batching without chunked prefill: the prompt exceeds
    /// `max_num_batched_tokens`.
    PromptTooLong,
}

impl RejectReason {
    /// The reason's name in outputs.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::RateLimited => "rate_limited",
            RejectReason::MaxInFlight => "max_in_flight",
            RejectReason::QueueFull => "queue_full",
            RejectReason::KvCapacity => "kv_capacity",
            RejectReason::PromptTooLong => "prompt_too_long",
        }
    }

    /// Every reason, in output order.
    pub const ALL: [RejectReason; 5] = [
        RejectReason::RateLimited,
        RejectReason::MaxInFlight,
        RejectReason::QueueFull,
        RejectReason::KvCapacity,
        RejectReason::PromptTooLong,
    ];
}

/// Why a request got no answer. A real server's requests fail for any of these; a simulated
/// one fails only as [`FailReason::Timeout`], when its client gives up (`load.client_timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailReason {
    /// No connection could be made, or it broke before the response began.
    Connect,
    /// No complete response within the client's timeout.
    Timeout,
    /// The server answered with an HTTP status other than success.
    Http(u16),
    /// The response began but was cut off or could not be read.
    Stream,
}

impl FailReason {
    /// The reason's class in summaries: `connect`, `timeout`, `http_4xx`, `http_5xx`,
    /// `http_other` or `stream`.
    pub fn class(self) -> &'static str {
        FailReason::CLASSES[self.class_index()]
    }

    /// Index of [`FailReason::class`] in [`FailReason::CLASSES`].
    pub fn class_index(self) -> usize {
        match self {
            FailReason::Connect => 0,
            FailReason::Timeout => 1,
            FailReason::Http(400..=499) => 2,
            FailReason::Http(500..=599) => 3,
            FailReason::Http(_) => 4,
            FailReason::Stream => 5,
        }
    }

    /// The classes, in output order.
    pub const CLASSES: [&'static str; 6] = [
        "connect",
        "timeout",
        "http_4xx",
        "http_5xx",
        "http_other",
        "stream",
    ];

    /// The reason as `requests.parquet` writes it: the class, or `http_503` with the status.
    pub fn label(self) -> String {
        match self {
            FailReason::Http(status) => format!("http_{status}"),
            other => other.class().to_string(),
        }
    }
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Answered (by a model, or by the cache).
    Completed,
    /// Refused, with the reason.
    Rejected(RejectReason),
    /// Left the instance queue at its timeout (`timeout_action = reject`).
    TimedOut,
    /// Not answered, with the reason: a real server's failure, or (simulated) the client's own
    /// timeout, [`FailReason::Timeout`].
    Failed(FailReason),
}

impl Outcome {
    /// The outcome's name in outputs.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Rejected(_) => "rejected",
            Outcome::TimedOut => "timed_out",
            Outcome::Failed(_) => "failed",
        }
    }
}

/// One request attempt, start to finish. Times are nanoseconds since the run's origin; a stage
/// the request never reached holds [`NONE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestRecord {
    /// Row of the trace the request came from.
    pub request: u32,
    /// Attempt number, from 1.
    pub attempt: u16,
    /// Pool index (0 is the default pool), or `u16::MAX` if never routed.
    pub pool: u16,
    /// Instance (server) within the pool, or `u32::MAX`.
    pub instance: u32,
    /// Model instance within the instance, or `u32::MAX`.
    pub model_instance: u32,
    /// Closed-loop client, or `u32::MAX` for open-loop load.
    pub client: u32,
    /// Input tokens (from the trace).
    pub input_tokens: u32,
    /// Output tokens (from the trace, 0 if absent).
    pub output_tokens: u32,
    /// Intended arrival: the client sends the request (latency is measured from here).
    pub arrival_ns: u64,
    /// The request reaches the gateway.
    pub gateway_ns: u64,
    /// The gateway admits and routes it (after its overhead).
    pub admitted_ns: u64,
    /// It enters the instance queue (after pre-processing).
    pub queued_ns: u64,
    /// Its batch is formed.
    pub batch_formed_ns: u64,
    /// Its batch starts executing.
    pub exec_start_ns: u64,
    /// Continuous batching: its first output token is sampled (at the server).
    pub first_token_ns: u64,
    /// Its batch finishes (continuous batching: its last output token is sampled).
    pub exec_end_ns: u64,
    /// Post-processing finishes.
    pub postprocessed_ns: u64,
    /// A streamed response: the part of its post-processing that closes the stream after its
    /// last token was sent (`postprocess.base`), which no token waits for; 0 otherwise.
    pub stream_close_ns: u64,
    /// The response (or the refusal) reaches the client, or the request times out (in the
    /// queue, or at its client's timeout).
    pub response_ns: u64,
    /// Batch number (run-wide, from 0), or [`NONE`].
    pub batch_id: u64,
    /// Requests in its batch (0 if never batched).
    pub batch_size: u32,
    /// How it ended.
    pub outcome: Outcome,
    /// Answered by the result cache.
    pub cache_hit: bool,
    /// Its input was cut to its pool's `max_input_tokens` (`input_tokens` is the cut size).
    pub input_truncated: bool,
    /// Its output was cut to its pool's `max_output_tokens` (`output_tokens` is the cut size).
    pub output_truncated: bool,
}

impl RequestRecord {
    /// A record for a request sent at `arrival_ns`, with every later stage unreached.
    pub fn new(request: u32, attempt: u16, arrival_ns: u64) -> RequestRecord {
        RequestRecord {
            request,
            attempt,
            pool: u16::MAX,
            instance: u32::MAX,
            model_instance: u32::MAX,
            client: u32::MAX,
            input_tokens: 0,
            output_tokens: 0,
            arrival_ns,
            gateway_ns: NONE,
            admitted_ns: NONE,
            queued_ns: NONE,
            batch_formed_ns: NONE,
            exec_start_ns: NONE,
            first_token_ns: NONE,
            exec_end_ns: NONE,
            postprocessed_ns: NONE,
            stream_close_ns: 0,
            response_ns: NONE,
            batch_id: NONE,
            batch_size: 0,
            outcome: Outcome::Completed,
            cache_hit: false,
            input_truncated: false,
            output_truncated: false,
        }
    }

    /// End-to-end latency from the intended arrival, in nanoseconds.
    pub fn latency_ns(&self) -> u64 {
        self.response_ns - self.arrival_ns
    }

    /// Time to first token at the client, in nanoseconds, from the intended arrival (the
    /// client's send, as inference-perf and vLLM's benchmark measure it): the first token's
    /// sampling plus the delay every streamed token has on its way to the client, which is the
    /// last token's (`response_ns - exec_end_ns`) without the stream's close
    /// (`stream_close_ns`). Only for a completed request with a first token.
    pub fn ttft_ns(&self) -> u64 {
        debug_assert!(self.first_token_ns != NONE && self.response_ns != NONE);
        let token_path_ns = self.response_ns - self.exec_end_ns - self.stream_close_ns;
        let ttft_ns = self.first_token_ns + token_path_ns - self.arrival_ns;
        assert!(ttft_ns <= self.latency_ns(), "TTFT exceeds e2e: {self:?}");
        ttft_ns
    }

    /// Time per output token, in nanoseconds: the gap from the first token to the last,
    /// `(e2e - TTFT - stream_close_ns) / (output_tokens - 1)` (every token has the same path to
    /// the client); `None` with fewer than two output tokens.
    pub fn tpot_ns(&self) -> Option<u64> {
        (self.output_tokens >= 2)
            .then(|| (self.exec_end_ns - self.first_token_ns) / u64::from(self.output_tokens - 1))
    }
}

/// Receives every finished request.
pub trait RecordSink {
    /// Called once per request attempt, when it finishes.
    fn record(&mut self, record: &RequestRecord);
}

/// Drops records (summary-only runs; memory stays bounded).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoRecords;

impl RecordSink for NoRecords {
    #[inline]
    fn record(&mut self, _record: &RequestRecord) {}
}

/// Every record, kept in finishing order.
#[derive(Debug, Default, Clone)]
pub struct RequestLog {
    records: Vec<RequestRecord>,
}

impl RequestLog {
    /// An empty log with room for `capacity` records.
    pub fn with_capacity(capacity: usize) -> RequestLog {
        RequestLog {
            records: Vec::with_capacity(capacity),
        }
    }

    /// The records, in finishing order (or by request after [`RequestLog::sort_by_request`]).
    pub fn records(&self) -> &[RequestRecord] {
        &self.records
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Orders records by trace row, then attempt.
    pub fn sort_by_request(&mut self) {
        self.records
            .sort_unstable_by_key(|r| (r.request, r.attempt));
    }
}

impl RecordSink for RequestLog {
    #[inline]
    fn record(&mut self, record: &RequestRecord) {
        self.records.push(*record);
    }
}
