// Over 800 lines: one state machine (admission, chunked prefill, preemption, KV and prefix blocks); 360 of them are its tests.
//! The continuous (iteration-level) batcher of one LLM instance, vLLM V1-style.
//!
//! The scheduler is a state machine driven by its instance:
//! 1. [`Scheduler::plan_step`] picks the next step's sequences: first the running ones (each
//!    decodes one token, or continues its chunked prefill), then waiting ones in order, under
//!    `max_num_seqs` and the `max_num_batched_tokens` budget. It allocates the KV blocks the step
//!    writes; when a running sequence needs a block and none is free, the newest running
//!    sequence is preempted (its blocks freed, back to the front of the waiting line, recomputed
//!    later) — and no waiting request is admitted in that step.
//! 2. The instance runs the step for the returned [`Step`]'s duration.
//! 3. [`Scheduler::complete_step`] advances every scheduled sequence; each one whose tokens are
//!    all computed samples one output token, reported to the caller, and a sequence with all its
//!    output tokens leaves, its blocks freed (kept in the prefix cache when registered).
//!
//! Waiting requests come from the instance's queue through a callback, one at a time and only
//! when there is room to consider them; a request taken but not admitted (no blocks, no token
//! budget) waits at the front of the line with the preempted ones.
//!
//! Token accounting follows vLLM: a sequence's tokens are its prompt plus the output tokens
//! sampled so far; the step that computes the last of them samples the next output token. So a
//! request with `n` output tokens takes one prefill (maybe chunked) and `n - 1` decodes.

use std::collections::VecDeque;

use super::kv::{BlockId, KvCache};
use super::prefix::{PrefixKeys, PrefixStats};
use crate::timing::step_time::StepBatch;

/// How the waiting line is ordered (the instance queue does the ordering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheduling {
    /// First come, first served.
    #[default]
    Fcfs,
    /// By the request's class (0 first), FCFS within a class.
    Priority,
}

/// A continuous batcher's settings (vLLM's names).
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    /// Most sequences in a step (and running at once).
    pub max_num_seqs: u32,
    /// Most tokens computed in a step.
    pub max_num_batched_tokens: u32,
    /// Whether a prompt may be split across steps.
    pub enable_chunked_prefill: bool,
    /// Tokens per KV block.
    pub block_size: u32,
    /// KV blocks of the instance.
    pub num_gpu_blocks: u32,
    /// Whether computed prompt blocks are kept and reused across requests.
    pub enable_prefix_caching: bool,
    /// Tokens per trace prefix block (Mooncake: 512), a multiple of `block_size`.
    pub prefix_block_tokens: u32,
    /// CPU time of every step (scheduling, sampling, detokenization), in nanoseconds.
    pub step_overhead_ns: u64,
    /// Additional CPU time per sequence in the step, in nanoseconds.
    pub step_overhead_per_seq_ns: u64,
    /// Admit a waiting sequence only when blocks for all its tokens are free, not only for its
    /// first chunk (vLLM's `scheduler_reserve_full_isl`): a long prompt then never starts a
    /// prefill that the cache cannot finish.
    pub reserve_full_isl: bool,
}

impl SchedulerConfig {
    /// Why a request of `prompt_tokens` and `output_tokens` could never be served by this
    /// instance, or `None` when it can.
    pub fn unservable(&self, prompt_tokens: u32, output_tokens: u32) -> Option<Unservable> {
        let (prompt, output) = effective_sizes(prompt_tokens, output_tokens);
        // The last sampled token is never fed back, so its KV slot is never written.
        let kv_tokens = u64::from(prompt) + u64::from(output) - 1;
        if kv_tokens.div_ceil(u64::from(self.block_size)) > u64::from(self.num_gpu_blocks) {
            return Some(Unservable::KvCapacity);
        }
        if !self.enable_chunked_prefill && prompt > self.max_num_batched_tokens {
            return Some(Unservable::PromptTooLong);
        }
        None
    }
}

/// Why a request can never be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unservable {
    /// Its prompt and output need more KV blocks than the whole cache has.
    KvCapacity,
    /// Chunked prefill is off and its prompt exceeds `max_num_batched_tokens`.
    PromptTooLong,
}

/// A prompt is at least one token and every request samples at least one output token (vLLM's
/// `max_tokens >= 1`).
#[inline]
fn effective_sizes(prompt_tokens: u32, output_tokens: u32) -> (u32, u32) {
    (prompt_tokens.max(1), output_tokens.max(1))
}

/// A request handed to the scheduler from the waiting queue.
#[derive(Debug, Clone, Copy)]
pub struct NewSeq<'a> {
    /// The caller's id for it.
    pub ticket: u32,
    /// Prompt tokens (0 counts as 1).
    pub prompt_tokens: u32,
    /// Output tokens to generate (0 counts as 1).
    pub output_tokens: u32,
    /// The prompt's trace prefix-block ids (empty when unknown).
    pub prefix_ids: &'a [u64],
}

/// A planned step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// What the step computes.
    pub batch: StepBatch,
    /// CPU overhead of the step, in nanoseconds (added to the model's GPU time).
    pub overhead_ns: u64,
}

/// One output token, reported by [`Scheduler::complete_step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    /// The request's ticket.
    pub ticket: u32,
    /// Which output token (0 is the first).
    pub index: u32,
    /// True for the request's last token: it has left the scheduler.
    pub last: bool,
}

/// Run counters of one scheduler.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SchedulerStats {
    /// Steps run.
    pub steps: u64,
    /// Sum over steps of the sequences in the step.
    pub step_seqs: u64,
    /// Sum over steps of the tokens computed.
    pub step_tokens: u64,
    /// Preemptions (a request preempted twice counts twice).
    pub preemptions: u64,
    /// Tokens computed again after a preemption (prefix-cache hits excluded).
    pub recomputed_tokens: u64,
    /// Output tokens sampled.
    pub output_tokens: u64,
    /// Prefix-cache counters.
    pub prefix: PrefixStats,
    /// Integral of KV blocks in use over time, in block-nanoseconds.
    pub kv_in_use_block_ns: u128,
    /// Most KV blocks in use at once.
    pub kv_in_use_max: u32,
}

#[derive(Debug, Clone, Default)]
struct Seq {
    ticket: u32,
    prompt_tokens: u32,
    output_tokens: u32,
    /// Output tokens sampled so far.
    generated: u32,
    /// Tokens whose KV is computed.
    computed: u32,
    /// Tokens computed when last preempted (0 if never).
    lost_tokens: u32,
    /// Blocks held, in token order.
    blocks: Vec<BlockId>,
    /// Leading blocks that are registered in the prefix cache (or taken from it).
    registered: u32,
    keys: PrefixKeys,
    admitted_once: bool,
}

impl Seq {
    /// Prompt plus sampled output tokens.
    #[inline]
    fn tokens(&self) -> u32 {
        self.prompt_tokens + self.generated
    }
}

/// The continuous batcher of one instance.
#[derive(Debug, Clone)]
pub struct Scheduler {
    config: SchedulerConfig,
    kv: KvCache,
    seqs: Vec<Seq>,
    free_slots: Vec<u32>,
    /// Running sequences (slots), oldest admission first.
    running: Vec<u32>,
    /// Taken from the queue but not running (preempted, or not yet fitting), served first.
    held: VecDeque<u32>,
    /// This step's (slot, new tokens).
    scheduled: Vec<(u32, u32)>,
    /// Tickets admitted for the first time in this step.
    admitted: Vec<u32>,
    /// Tickets preempted in this step.
    preempted: Vec<u32>,
    in_step: bool,
    last_ns: u64,
    stats: SchedulerStats,
    /// Sequences taken from the queue so far: each one's own prefix keys are unique by it.
    sequences_taken: u64,
}

impl Scheduler {
    /// An idle scheduler with an empty KV cache of `config.num_gpu_blocks` blocks.
    pub fn new(config: SchedulerConfig) -> Scheduler {
        assert!(
            config.max_num_seqs >= 1
                && config.max_num_batched_tokens >= 1
                && config.block_size >= 1
                && config.prefix_block_tokens >= config.block_size,
            "validated by the scenario"
        );
        let kv = KvCache::new(config.num_gpu_blocks, config.block_size);
        // Grown on demand past this: a server with a large `max_num_seqs` that a run never fills
        // (or a pool of thousands of servers) costs no more than its use.
        let seqs_cap = config.max_num_seqs.min(8) as usize;
        Scheduler {
            kv,
            seqs: Vec::with_capacity(seqs_cap),
            free_slots: Vec::with_capacity(seqs_cap),
            running: Vec::with_capacity(seqs_cap),
            held: VecDeque::with_capacity(16),
            scheduled: Vec::with_capacity(seqs_cap),
            admitted: Vec::with_capacity(seqs_cap),
            preempted: Vec::with_capacity(16),
            in_step: false,
            last_ns: 0,
            stats: SchedulerStats::default(),
            sequences_taken: 0,
            config,
        }
    }

    /// The settings.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Run counters so far.
    pub fn stats(&self) -> &SchedulerStats {
        &self.stats
    }

    /// Sequences running (admitted, not finished, not preempted).
    #[inline]
    pub fn running(&self) -> u32 {
        self.running.len() as u32
    }

    /// Requests taken from the queue that are waiting here (preempted or not yet fitting).
    #[inline]
    pub fn held(&self) -> u32 {
        self.held.len() as u32
    }

    /// KV blocks in use now.
    #[inline]
    pub fn kv_in_use(&self) -> u32 {
        self.kv.in_use()
    }

    /// KV blocks of the instance.
    #[inline]
    pub fn kv_total(&self) -> u32 {
        self.kv.total()
    }

    /// True while a planned step has not completed.
    #[inline]
    pub fn is_busy(&self) -> bool {
        self.in_step
    }

    /// True when nothing is running or held (the queue may still have requests).
    #[inline]
    pub fn is_idle(&self) -> bool {
        !self.in_step && self.running.is_empty() && self.held.is_empty()
    }

    /// Tickets admitted for the first time by the last [`Scheduler::plan_step`].
    pub fn admitted(&self) -> &[u32] {
        &self.admitted
    }

    /// Accounts KV occupancy up to `now_ns` (call before changing it; time never goes back).
    #[inline]
    fn integrate(&mut self, now_ns: u64) {
        debug_assert!(now_ns >= self.last_ns, "time went backwards");
        let dt = u128::from(now_ns.saturating_sub(self.last_ns));
        self.stats.kv_in_use_block_ns += u128::from(self.kv.in_use()) * dt;
        self.last_ns = now_ns;
    }

    /// Closes the KV occupancy integral at the run's end, `now_ns`.
    pub fn finish(&mut self, now_ns: u64) {
        self.integrate(now_ns);
    }

    /// Plans the next step at `now_ns`, pulling waiting requests from `next_waiting` when there
    /// is room. `None` when there is nothing to run. Must not be called during a step.
    pub fn plan_step<'a>(
        &mut self,
        now_ns: u64,
        mut next_waiting: impl FnMut() -> Option<NewSeq<'a>>,
    ) -> Option<Step> {
        assert!(!self.in_step, "a step is already running");
        self.integrate(now_ns);
        self.scheduled.clear();
        self.admitted.clear();
        self.preempted.clear();
        let mut budget = self.config.max_num_batched_tokens;
        let mut batch = StepBatch::default();

        // Running sequences first, oldest first; the newest are preempted when blocks run out.
        let mut index = 0;
        while index < self.running.len() && budget > 0 {
            let slot = self.running[index];
            let seq = &self.seqs[slot as usize];
            let new_tokens = (seq.tokens() - seq.computed).min(budget);
            debug_assert!(
                new_tokens > 0,
                "a running sequence always has a token to compute"
            );
            let need = self.blocks_short(slot, new_tokens);
            let mut scheduled = true;
            while need > self.kv.available() {
                let victim = *self.running.last().expect("index < running.len()");
                self.preempt_newest();
                if victim == slot {
                    scheduled = false;
                    break;
                }
            }
            if !scheduled {
                break;
            }
            self.grow(slot, new_tokens);
            self.schedule(slot, new_tokens, &mut batch);
            budget -= new_tokens;
            index += 1;
        }

        // Waiting requests, in order, while nothing was preempted and there is room.
        if self.preempted.is_empty() {
            while budget > 0 && (self.running.len() as u32) < self.config.max_num_seqs {
                let slot = match self.held.front() {
                    Some(&slot) => slot,
                    None => match next_waiting() {
                        Some(new) => {
                            let slot = self.take_slot(new);
                            self.held.push_back(slot);
                            slot
                        }
                        None => break,
                    },
                };
                let Some(new_tokens) = self.try_admit(slot, budget) else {
                    break;
                };
                self.held.pop_front();
                self.running.push(slot);
                self.schedule(slot, new_tokens, &mut batch);
                budget -= new_tokens;
            }
        }

        if self.scheduled.is_empty() {
            assert!(
                self.running.is_empty(),
                "running sequences but none could be scheduled"
            );
            return None;
        }
        let seqs = batch.seqs();
        assert!(
            seqs <= self.config.max_num_seqs,
            "step of {seqs} sequences exceeds max_num_seqs {}",
            self.config.max_num_seqs
        );
        assert!(
            batch.batched_tokens() <= u64::from(self.config.max_num_batched_tokens),
            "step of {} tokens exceeds max_num_batched_tokens {}",
            batch.batched_tokens(),
            self.config.max_num_batched_tokens
        );
        assert!(self.kv.in_use() <= self.kv.total());
        self.in_step = true;
        self.stats.steps += 1;
        self.stats.step_seqs += u64::from(seqs);
        self.stats.step_tokens += batch.batched_tokens();
        self.stats.kv_in_use_max = self.stats.kv_in_use_max.max(self.kv.in_use());
        Some(Step {
            batch,
            overhead_ns: self.config.step_overhead_ns
                + self.config.step_overhead_per_seq_ns * u64::from(seqs),
        })
    }

    /// Ends the running step at `now_ns`: every scheduled sequence advances, and those whose
    /// tokens are all computed sample a token, reported through `on_token` in step order.
    pub fn complete_step(&mut self, now_ns: u64, mut on_token: impl FnMut(Token)) {
        assert!(self.in_step, "no step is running");
        self.in_step = false;
        self.integrate(now_ns);
        let mut finished_any = false;
        for i in 0..self.scheduled.len() {
            let (slot, new_tokens) = self.scheduled[i];
            let seq = &mut self.seqs[slot as usize];
            seq.computed += new_tokens;
            debug_assert!(seq.computed <= seq.tokens());
            if self.config.enable_prefix_caching {
                let full = (seq.computed / self.config.block_size).min(seq.keys.cacheable_blocks());
                while seq.registered < full {
                    let b = seq.registered;
                    self.kv.register(seq.blocks[b as usize], seq.keys.key(b));
                    seq.registered += 1;
                }
            }
            if seq.computed < seq.tokens() {
                continue;
            }
            let index = seq.generated;
            seq.generated += 1;
            self.stats.output_tokens += 1;
            assert!(
                seq.generated <= seq.output_tokens,
                "request {} sampled more than its {} output tokens",
                seq.ticket,
                seq.output_tokens
            );
            let last = seq.generated == seq.output_tokens;
            let ticket = seq.ticket;
            if last {
                self.release_blocks(slot);
                self.free_slots.push(slot);
                finished_any = true;
            }
            on_token(Token {
                ticket,
                index,
                last,
            });
        }
        if finished_any {
            let seqs = &self.seqs;
            self.running
                .retain(|&slot| seqs[slot as usize].generated < seqs[slot as usize].output_tokens);
        }
    }

    /// Drops the sequence of `ticket` at `now_ns`, as vLLM aborts a request whose client went
    /// away: it leaves the running or the waiting line, and its KV blocks are freed now
    /// (registered prefix blocks stay cached, as on a normal finish). If the step running now
    /// includes it, the step still runs to its end (its time was drawn with it) but samples no
    /// token for it. Returns the output tokens it had sampled, or `None` when the scheduler
    /// does not hold `ticket`.
    pub fn abort(&mut self, now_ns: u64, ticket: u32) -> Option<u32> {
        let seqs = &self.seqs;
        let holds = |slot: &u32| seqs[*slot as usize].ticket == ticket;
        let slot = if let Some(i) = self.running.iter().position(holds) {
            self.running.remove(i)
        } else if let Some(i) = self.held.iter().position(holds) {
            self.held.remove(i).expect("position is within the line")
        } else {
            return None;
        };
        self.integrate(now_ns);
        self.release_blocks(slot);
        self.scheduled.retain(|&(scheduled, _)| scheduled != slot);
        self.free_slots.push(slot);
        Some(self.seqs[slot as usize].generated)
    }

    fn take_slot(&mut self, new: NewSeq<'_>) -> u32 {
        let (prompt_tokens, output_tokens) = effective_sizes(new.prompt_tokens, new.output_tokens);
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.seqs.push(Seq::default());
                (self.seqs.len() - 1) as u32
            }
        };
        let seq = &mut self.seqs[slot as usize];
        seq.ticket = new.ticket;
        seq.prompt_tokens = prompt_tokens;
        seq.output_tokens = output_tokens;
        seq.generated = 0;
        seq.computed = 0;
        seq.lost_tokens = 0;
        seq.registered = 0;
        seq.admitted_once = false;
        debug_assert!(seq.blocks.is_empty());
        if self.config.enable_prefix_caching && !new.prefix_ids.is_empty() {
            seq.keys.fill(
                new.prefix_ids,
                prompt_tokens,
                self.config.block_size,
                self.config.prefix_block_tokens / self.config.block_size,
            );
        } else if self.config.enable_prefix_caching {
            self.sequences_taken += 1;
            let tokens = prompt_tokens.saturating_add(output_tokens);
            seq.keys
                .fill_own(self.sequences_taken, tokens, self.config.block_size);
        } else {
            seq.keys.clear();
        }
        slot
    }

    /// Blocks `slot` lacks to hold `new_tokens` more tokens.
    #[inline]
    fn blocks_short(&self, slot: u32, new_tokens: u32) -> u32 {
        let seq = &self.seqs[slot as usize];
        let need = self
            .kv
            .blocks_for(u64::from(seq.computed) + u64::from(new_tokens));
        need.saturating_sub(seq.blocks.len() as u64) as u32
    }

    /// Allocates the blocks `slot` lacks for `new_tokens` (the caller checked availability).
    fn grow(&mut self, slot: u32, new_tokens: u32) {
        let short = self.blocks_short(slot, new_tokens);
        for _ in 0..short {
            let block = self
                .kv
                .allocate()
                .expect("availability was checked before growing");
            self.seqs[slot as usize].blocks.push(block);
        }
    }

    fn schedule(&mut self, slot: u32, new_tokens: u32, batch: &mut StepBatch) {
        let seq = &self.seqs[slot as usize];
        let decode = seq.computed >= seq.prompt_tokens && seq.computed + 1 == seq.tokens();
        if decode {
            let context = u64::from(seq.computed) + 1;
            batch.decode_seqs += 1;
            batch.decode_kv_tokens += context;
            batch.decode_kv_max = batch.decode_kv_max.max(context);
        } else {
            let end = u64::from(seq.computed) + u64::from(new_tokens);
            batch.prefill_seqs += 1;
            batch.prefill_tokens += u64::from(new_tokens);
            batch.prefill_history_tokens += u64::from(seq.computed);
            batch.prefill_attention_tokens2 += u64::from(new_tokens) * end;
        }
        self.scheduled.push((slot, new_tokens));
    }

    /// Admits held sequence `slot` if its prefix hits plus its first chunk fit in the blocks and
    /// the `budget`; returns the tokens it computes this step.
    fn try_admit(&mut self, slot: u32, budget: u32) -> Option<u32> {
        let block_size = self.config.block_size;
        let seq = &self.seqs[slot as usize];
        debug_assert!(seq.blocks.is_empty() && seq.computed == 0);
        let tokens = seq.tokens();
        // Leading cached blocks; at least one token is always computed, to sample from.
        let max_hits = (tokens - 1) / block_size;
        let mut hits = 0;
        let mut hits_cached = 0;
        while hits < seq.keys.cacheable_blocks().min(max_hits) {
            match self.kv.lookup(seq.keys.key(hits)) {
                Some(block) => {
                    hits_cached += u32::from(self.kv.is_cached(block));
                    hits += 1;
                }
                None => break,
            }
        }
        let cached_tokens = hits * block_size;
        let remaining = tokens - cached_tokens;
        // Without chunked prefill a first prompt must fit whole; a recompute may be chunked.
        if !self.config.enable_chunked_prefill && !seq.admitted_once && remaining > budget {
            return None;
        }
        let new_tokens = remaining.min(budget);
        let blocks =
            self.kv
                .blocks_for(u64::from(cached_tokens) + u64::from(new_tokens)) as u32;
        let fresh = blocks - hits;
        let reserved = if self.config.reserve_full_isl {
            self.kv.blocks_for(u64::from(tokens)) as u32 - hits
        } else {
            fresh
        };
        if u64::from(reserved) + u64::from(hits_cached) > u64::from(self.kv.available()) {
            return None;
        }
        let seq = &mut self.seqs[slot as usize];
        for b in 0..hits {
            let block = self
                .kv
                .lookup(seq.keys.key(b))
                .expect("looked up just above");
            self.kv.acquire(block);
            seq.blocks.push(block);
        }
        for _ in 0..fresh {
            let block = self.kv.allocate().expect("availability checked above");
            seq.blocks.push(block);
        }
        seq.computed = cached_tokens;
        seq.registered = hits;
        if seq.admitted_once {
            self.stats.recomputed_tokens +=
                u64::from(seq.lost_tokens.saturating_sub(cached_tokens));
        } else {
            seq.admitted_once = true;
            self.stats.prefix.prompt_tokens += u64::from(seq.prompt_tokens);
            self.stats.prefix.cached_prompt_tokens += u64::from(cached_tokens);
            self.admitted.push(seq.ticket);
        }
        Some(new_tokens)
    }

    /// Preempts the newest running sequence: frees its blocks and puts it at the front of the
    /// waiting line, to be recomputed.
    fn preempt_newest(&mut self) {
        let slot = self
            .running
            .pop()
            .expect("caller checked running is non-empty");
        self.release_blocks(slot);
        let seq = &mut self.seqs[slot as usize];
        seq.lost_tokens = seq.computed;
        seq.computed = 0;
        seq.registered = 0;
        self.preempted.push(seq.ticket);
        self.stats.preemptions += 1;
        self.held.push_front(slot);
    }

    /// Frees a sequence's blocks, last first, so its tail is evicted before its shared prefix.
    fn release_blocks(&mut self, slot: u32) {
        let seq = &mut self.seqs[slot as usize];
        while let Some(block) = seq.blocks.pop() {
            self.kv.release(block);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SchedulerConfig {
        SchedulerConfig {
            max_num_seqs: 256,
            max_num_batched_tokens: 8192,
            enable_chunked_prefill: true,
            block_size: 16,
            num_gpu_blocks: 1000,
            enable_prefix_caching: false,
            prefix_block_tokens: 512,
            step_overhead_ns: 0,
            step_overhead_per_seq_ns: 0,
            reserve_full_isl: false,
        }
    }

    /// A request arriving at `at_ns`.
    #[derive(Debug, Clone)]
    struct Req {
        at_ns: u64,
        prompt: u32,
        output: u32,
        ids: Vec<u64>,
    }

    fn req(at_ns: u64, prompt: u32, output: u32) -> Req {
        Req {
            at_ns,
            prompt,
            output,
            ids: Vec::new(),
        }
    }

    /// What a driven run produced per request: first-token and last-token times.
    #[derive(Debug, Default, Clone, PartialEq)]
    struct Timing {
        first_ns: Vec<u64>,
        last_ns: Vec<u64>,
        tokens: Vec<u32>,
        admitted_ns: Vec<u64>,
    }

    /// Drives one scheduler over `reqs` (sorted by arrival) with step time `step_ns(batch)`,
    /// checking token order and the step bounds.
    fn drive(
        config: SchedulerConfig,
        reqs: &[Req],
        step_ns: impl Fn(&StepBatch) -> u64,
    ) -> (Timing, SchedulerStats, Vec<StepBatch>) {
        let n = reqs.len();
        let mut s = Scheduler::new(config.clone());
        let mut timing = Timing {
            first_ns: vec![u64::MAX; n],
            last_ns: vec![u64::MAX; n],
            tokens: vec![0; n],
            admitted_ns: vec![u64::MAX; n],
        };
        let mut queue: VecDeque<usize> = VecDeque::new();
        let mut next = 0;
        let mut now = 0u64;
        let mut steps = Vec::new();
        let mut step_end: Option<u64> = None;
        loop {
            // Arrivals up to now join the queue.
            while next < n && reqs[next].at_ns <= now {
                queue.push_back(next);
                next += 1;
            }
            if let Some(end) = step_end
                && end <= now
            {
                s.complete_step(end, |t| {
                    let r = t.ticket as usize;
                    assert_eq!(t.index, timing.tokens[r], "tokens of {r} come in order");
                    timing.tokens[r] += 1;
                    if t.index == 0 {
                        timing.first_ns[r] = end;
                    }
                    if t.last {
                        timing.last_ns[r] = end;
                    }
                });
                step_end = None;
            }
            if step_end.is_none() {
                let planned = s.plan_step(now, || {
                    queue.pop_front().map(|r| NewSeq {
                        ticket: r as u32,
                        prompt_tokens: reqs[r].prompt,
                        output_tokens: reqs[r].output,
                        prefix_ids: &reqs[r].ids,
                    })
                });
                for &t in s.admitted() {
                    timing.admitted_ns[t as usize] = now;
                }
                if let Some(step) = planned {
                    assert!(step.batch.seqs() <= config.max_num_seqs);
                    assert!(
                        step.batch.batched_tokens() <= u64::from(config.max_num_batched_tokens)
                    );
                    assert!(s.kv_in_use() <= config.num_gpu_blocks);
                    steps.push(step.batch);
                    step_end = Some(now + step_ns(&step.batch) + step.overhead_ns);
                }
            }
            let next_arrival = reqs.get(next).map_or(u64::MAX, |r| r.at_ns);
            let next_time = step_end.unwrap_or(u64::MAX).min(next_arrival);
            if next_time == u64::MAX {
                break;
            }
            now = next_time;
        }
        s.finish(now);
        assert!(s.is_idle());
        assert_eq!(s.kv_in_use(), 0, "every block is released at the end");
        (timing, *s.stats(), steps)
    }

    /// The golden timeline. GPU time is 10 ms for a step with a prefill and 5 ms for a
    /// decode-only step, plus 1 ms of CPU overhead per step. Budget 100 tokens, chunked prefill
    /// on, KV plentiful.
    ///
    /// Requests: A at 0 (prompt 50, 3 tokens), B at 2 ms (prompt 150, 2 tokens),
    /// C at 12 ms (prompt 30, 2 tokens).
    ///
    /// | step | start | seqs (new tokens)          | kind     | time  | end | tokens out |
    /// |------|-------|----------------------------|----------|-------|-----|------------|
    /// | 1    | 0     | A prefill 50               | prefill  | 11 ms | 11  | A#0        |
    /// | 2    | 11    | A dec 1, B chunk 99        | prefill  | 11 ms | 22  | A#1        |
    /// | 3    | 22    | A dec 1, B chunk 51, C 30  | prefill  | 11 ms | 33  | A#2 (last), B#0, C#0 |
    /// | 4    | 33    | B dec 1, C dec 1           | decode   | 6 ms  | 39  | B#1 (last), C#1 (last) |
    ///
    /// So TTFT (from arrival) A = 11, B = 33 - 2 = 31, C = 33 - 12 = 21 ms; e2e A = 33, B = 37,
    /// C = 27 ms; TPOT = (e2e - TTFT) / (out - 1): A = 11, B = 6, C = 6 ms.
    #[test]
    fn golden_three_requests_have_hand_worked_ttft_and_tpot() {
        let cfg = SchedulerConfig {
            max_num_batched_tokens: 100,
            step_overhead_ns: 1_000_000,
            ..config()
        };
        let reqs = [
            req(0, 50, 3),
            req(2_000_000, 150, 2),
            req(12_000_000, 30, 2),
        ];
        let (t, stats, steps) = drive(cfg, &reqs, |b| {
            if b.prefill_seqs > 0 {
                10_000_000
            } else {
                5_000_000
            }
        });
        let ms = |ns: u64| ns / 1_000_000;
        let ttft: Vec<u64> = (0..3).map(|i| ms(t.first_ns[i] - reqs[i].at_ns)).collect();
        let e2e: Vec<u64> = (0..3).map(|i| ms(t.last_ns[i] - reqs[i].at_ns)).collect();
        let tpot: Vec<u64> = (0..3)
            .map(|i| (e2e[i] - ttft[i]) / u64::from(reqs[i].output - 1))
            .collect();
        assert_eq!(ttft, vec![11, 31, 21], "TTFT ms");
        assert_eq!(e2e, vec![33, 37, 27], "e2e ms");
        assert_eq!(tpot, vec![11, 6, 6], "TPOT ms");
        assert_eq!(t.tokens, vec![3, 2, 2]);
        assert_eq!(steps.len(), 4);
        assert_eq!(
            steps[1],
            StepBatch {
                prefill_tokens: 99,
                prefill_attention_tokens2: 99 * 99,
                prefill_history_tokens: 0,
                prefill_seqs: 1,
                decode_seqs: 1,
                decode_kv_tokens: 51,
                decode_kv_max: 51,
                padding_tokens: 0,
            }
        );
        assert_eq!(
            steps[2],
            StepBatch {
                prefill_tokens: 81,
                prefill_attention_tokens2: 51 * 150 + 30 * 30,
                prefill_history_tokens: 99,
                prefill_seqs: 2,
                decode_seqs: 1,
                decode_kv_tokens: 52,
                decode_kv_max: 52,
                padding_tokens: 0,
            }
        );
        assert_eq!(stats.output_tokens, 7);
        assert_eq!(stats.steps, 4);
        assert_eq!(stats.preemptions, 0);
    }

    #[test]
    fn without_chunked_prefill_a_prompt_waits_for_a_step_it_fits_whole() {
        let cfg = SchedulerConfig {
            max_num_batched_tokens: 100,
            enable_chunked_prefill: false,
            ..config()
        };
        let reqs = [req(0, 60, 3), req(0, 60, 1)];
        let (t, _, steps) = drive(cfg, &reqs, |_| 1_000);
        // Step 1: A's 60 tokens; B (60) does not fit in the 40 left. Step 2: A decodes, B fits.
        assert_eq!(steps[0].prefill_tokens, 60);
        assert_eq!(steps[0].seqs(), 1);
        assert_eq!(steps[1].prefill_tokens, 60);
        assert_eq!(steps[1].decode_seqs, 1);
        assert_eq!(t.first_ns, vec![1_000, 2_000]);
    }

    #[test]
    fn running_requests_are_capped_by_max_num_seqs() {
        let cfg = SchedulerConfig {
            max_num_seqs: 3,
            ..config()
        };
        let reqs: Vec<Req> = (0..10).map(|i| req(i, 20, 5)).collect();
        let (t, stats, steps) = drive(cfg, &reqs, |_| 1_000);
        assert!(steps.iter().all(|b| b.seqs() <= 3));
        assert_eq!(t.tokens, vec![5; 10]);
        assert_eq!(stats.output_tokens, 50);
    }

    /// Two requests each needing 3 blocks at the end share a 4-block cache: the newer one is
    /// preempted when the older one needs its third block, then recomputed.
    #[test]
    fn newest_running_request_is_preempted_and_recomputed_when_blocks_run_out() {
        let cfg = SchedulerConfig {
            block_size: 4,
            num_gpu_blocks: 4,
            ..config()
        };
        // A: prompt 4 + 8 outputs -> 11 KV tokens, 3 blocks. B likewise.
        let reqs = [req(0, 4, 8), req(0, 4, 8)];
        let (t, stats, _) = drive(cfg, &reqs, |_| 1_000);
        assert_eq!(t.tokens, vec![8, 8], "every token exactly once");
        assert!(stats.preemptions >= 1, "{stats:?}");
        assert!(stats.recomputed_tokens > 0, "{stats:?}");
        assert!(t.last_ns[0] < t.last_ns[1], "the older request goes on");
        assert_eq!(stats.kv_in_use_max, 4);
    }

    /// With prefix caching, the blocks a preempted request frees keep their keys until reused,
    /// so its recompute starts from what is left of them (vLLM keeps freed blocks' hashes).
    #[test]
    fn with_prefix_caching_a_preempted_request_recomputes_only_what_was_reused() {
        let prefill_computed = |caching: bool| {
            let cfg = SchedulerConfig {
                block_size: 4,
                num_gpu_blocks: 6,
                enable_prefix_caching: caching,
                ..config()
            };
            let reqs = [req(0, 8, 8), req(0, 8, 8)];
            let (t, stats, steps) = drive(cfg, &reqs, |_| 1_000);
            assert_eq!(t.tokens, vec![8, 8], "every token exactly once");
            assert!(stats.preemptions >= 1, "{stats:?}");
            steps.iter().map(|b| b.prefill_tokens).sum::<u64>()
        };
        let (off, on) = (prefill_computed(false), prefill_computed(true));
        assert!(
            on < off,
            "prefill tokens computed: {on} with caching, {off} without"
        );
    }

    /// vLLM's scheduler_reserve_full_isl: a prompt is admitted only when blocks for all of it are
    /// free, not when its first chunk fits.
    #[test]
    fn reserving_the_full_prompt_admits_it_only_when_all_its_blocks_are_free() {
        let admitted = |reserve: bool| {
            let cfg = SchedulerConfig {
                block_size: 4,
                num_gpu_blocks: 4,
                max_num_batched_tokens: 4,
                reserve_full_isl: reserve,
                ..config()
            };
            // A fills a block and grows into a second; B's 12-token prompt needs 3 blocks.
            let reqs = [req(0, 4, 4), req(0, 12, 1)];
            let (t, _, _) = drive(cfg, &reqs, |_| 1_000);
            assert_eq!(t.tokens, vec![4, 1]);
            (t.admitted_ns[1], t.last_ns[0])
        };
        let (early, _) = admitted(false);
        let (late, a_done) = admitted(true);
        assert!(early < a_done, "without the reservation B starts beside A");
        assert!(
            late >= a_done,
            "with it B waits for A's blocks: admitted at {late}, A done at {a_done}"
        );
    }

    #[test]
    fn request_larger_than_the_cache_is_unservable() {
        let cfg = SchedulerConfig {
            block_size: 16,
            num_gpu_blocks: 10,
            ..config()
        };
        assert_eq!(cfg.unservable(150, 11), None, "160 KV tokens fit 10 blocks");
        assert_eq!(cfg.unservable(150, 12), Some(Unservable::KvCapacity));
        let no_chunk = SchedulerConfig {
            enable_chunked_prefill: false,
            max_num_batched_tokens: 100,
            ..config()
        };
        assert_eq!(no_chunk.unservable(101, 1), Some(Unservable::PromptTooLong));
    }

    #[test]
    fn shared_prefix_is_not_recomputed_with_prefix_caching() {
        let run = |caching: bool| {
            let cfg = SchedulerConfig {
                enable_prefix_caching: caching,
                ..config()
            };
            let mut a = req(0, 1100, 2);
            a.ids = vec![1, 2, 3];
            let mut b = req(1_000_000_000, 1100, 2);
            b.ids = vec![1, 2, 4];
            drive(cfg, &[a, b], |batch| 1_000 * (1 + batch.prefill_tokens))
        };
        let (t_off, off, _) = run(false);
        let (t_on, on, steps_on) = run(true);
        assert_eq!(off.prefix.cached_prompt_tokens, 0);
        // B shares ids 1 and 2: 1024 tokens, 64 blocks.
        assert_eq!(on.prefix.cached_prompt_tokens, 1024);
        assert_eq!(on.prefix.prompt_tokens, 2200);
        assert_eq!(steps_on[2].prefill_tokens, 1100 - 1024);
        let ttft_b = |t: &Timing| t.first_ns[1] - 1_000_000_000;
        assert!(
            ttft_b(&t_on) < ttft_b(&t_off),
            "{} vs {}",
            ttft_b(&t_on),
            ttft_b(&t_off)
        );
    }

    #[test]
    fn fully_cached_prompt_still_computes_its_last_token() {
        let cfg = SchedulerConfig {
            enable_prefix_caching: true,
            ..config()
        };
        let mut a = req(0, 512, 1);
        a.ids = vec![9];
        let mut b = a.clone();
        b.at_ns = 1_000_000;
        let (_, stats, steps) = drive(cfg, &[a, b], |_| 1_000);
        assert_eq!(stats.prefix.cached_prompt_tokens, 496);
        assert_eq!(steps[1].prefill_tokens, 16);
    }

    fn new_seq(ticket: u32, prompt_tokens: u32, output_tokens: u32) -> NewSeq<'static> {
        NewSeq {
            ticket,
            prompt_tokens,
            output_tokens,
            prefix_ids: &[],
        }
    }

    /// Runs steps of 10 ns from `now_ns`, with nothing more arriving, until the scheduler is
    /// idle; the tokens go to `tokens`.
    fn drain(s: &mut Scheduler, mut now_ns: u64, tokens: &mut Vec<Token>) {
        while s.plan_step(now_ns, || None).is_some() {
            now_ns += 10;
            s.complete_step(now_ns, |t| tokens.push(t));
        }
        assert!(s.is_idle());
    }

    /// vLLM's abort of a running sequence while a step runs: its blocks come back at once, the
    /// step runs to its end, no token is sampled for it then or later, and the other goes on.
    #[test]
    fn aborting_a_running_sequence_mid_step_frees_its_blocks_and_samples_no_token_for_it() {
        let mut s = Scheduler::new(SchedulerConfig {
            block_size: 4,
            num_gpu_blocks: 8,
            ..config()
        });
        let mut queue: VecDeque<NewSeq> = [new_seq(0, 8, 5), new_seq(1, 4, 5)].into();
        s.plan_step(0, || queue.pop_front()).unwrap();
        s.complete_step(10, |_| {});
        // Both decode: ticket 0 holds 3 blocks (9 tokens), ticket 1 holds 2 (5 tokens).
        s.plan_step(10, || None).unwrap();
        assert_eq!(s.kv_in_use(), 5);
        assert_eq!(s.abort(15, 0), Some(1), "ticket 0 had sampled one token");
        assert_eq!((s.kv_in_use(), s.running()), (2, 1));
        let mut tokens = Vec::new();
        s.complete_step(20, |t| tokens.push(t));
        assert_eq!(
            tokens,
            vec![Token {
                ticket: 1,
                index: 1,
                last: false
            }],
            "the step ends with a token for ticket 1 only"
        );
        assert_eq!(s.abort(21, 0), None, "an aborted sequence is gone");
        drain(&mut s, 20, &mut tokens);
        assert!(tokens.iter().all(|t| t.ticket == 1));
        assert_eq!(tokens.len(), 4, "ticket 1's tokens 1 to 4");
        assert_eq!(s.kv_in_use(), 0, "every block came back, none twice");
        assert_eq!(s.stats().output_tokens, 1 + 5);
    }

    /// Aborting a request taken from the queue and waiting for blocks takes it out of the
    /// line: the next request is admitted in its place, and it never gets a token.
    #[test]
    fn aborting_a_waiting_sequence_takes_it_out_of_the_line() {
        let mut s = Scheduler::new(SchedulerConfig {
            block_size: 4,
            num_gpu_blocks: 2,
            ..config()
        });
        // Ticket 0 fills both blocks; ticket 1 is taken and waits; ticket 2 stays queued.
        let mut queue: VecDeque<NewSeq> =
            [new_seq(0, 8, 1), new_seq(1, 4, 1), new_seq(2, 4, 1)].into();
        s.plan_step(0, || queue.pop_front()).unwrap();
        assert_eq!((s.running(), s.held(), queue.len()), (1, 1, 1));
        assert_eq!(s.abort(5, 1), Some(0));
        assert_eq!((s.held(), s.kv_in_use()), (0, 2));
        let mut tokens = Vec::new();
        s.complete_step(10, |t| tokens.push(t));
        s.plan_step(10, || queue.pop_front()).unwrap();
        assert_eq!(s.admitted(), &[2], "ticket 2 takes the aborted one's place");
        s.complete_step(20, |t| tokens.push(t));
        let tickets: Vec<u32> = tokens.iter().map(|t| t.ticket).collect();
        assert_eq!(tickets, vec![0, 2]);
        assert!(s.is_idle() && s.kv_in_use() == 0);
    }

    /// An aborted sequence's registered prompt blocks stay in the prefix cache, as on a normal
    /// finish: the next request with the same prefix reuses them.
    #[test]
    fn aborting_keeps_the_registered_prefix_blocks_cached() {
        let mut s = Scheduler::new(SchedulerConfig {
            enable_prefix_caching: true,
            ..config()
        });
        let (a_ids, b_ids) = ([1, 2, 3], [1, 2, 4]);
        let a = NewSeq {
            prefix_ids: &a_ids,
            ..new_seq(0, 1100, 10)
        };
        let mut queue: VecDeque<NewSeq> = [a].into();
        s.plan_step(0, || queue.pop_front()).unwrap();
        s.complete_step(10, |_| {});
        s.plan_step(10, || None).unwrap();
        assert!(s.abort(15, 0).is_some());
        s.complete_step(20, |_| {});
        assert_eq!(s.kv_in_use(), 0);
        let b = NewSeq {
            prefix_ids: &b_ids,
            ..new_seq(1, 1100, 2)
        };
        let mut queue: VecDeque<NewSeq> = [b].into();
        s.plan_step(20, || queue.pop_front()).unwrap();
        // B shares ids 1 and 2 with A: 1024 tokens.
        assert_eq!(s.stats().prefix.cached_prompt_tokens, 1024);
    }

    /// A seeded random workload under a tight cache: bounds hold every step (checked in
    /// `drive`), every request gets exactly its tokens, and all blocks come back.
    #[test]
    fn random_workload_under_pressure_keeps_every_invariant() {
        use rand::{RngExt, SeedableRng};
        let mut rng = crate::rng::SimRng::seed_from_u64(42);
        for caching in [false, true] {
            let cfg = SchedulerConfig {
                max_num_seqs: 8,
                max_num_batched_tokens: 256,
                block_size: 16,
                num_gpu_blocks: 64,
                enable_prefix_caching: caching,
                prefix_block_tokens: 64,
                ..config()
            };
            let mut at = 0u64;
            let reqs: Vec<Req> = (0..300)
                .map(|_| {
                    at += rng.random_range(0..3_000u64);
                    let prompt = rng.random_range(1..400u32);
                    let output = rng.random_range(1..200u32);
                    let ids = (0..prompt.div_ceil(64))
                        .map(|j| {
                            if j < 2 {
                                rng.random_range(0..3u64)
                            } else {
                                rng.random()
                            }
                        })
                        .collect();
                    Req {
                        at_ns: at,
                        prompt,
                        output,
                        ids,
                    }
                })
                .filter(|r| cfg.unservable(r.prompt, r.output).is_none())
                .collect();
            let (t, stats, _) = drive(cfg, &reqs, |b| 500 + 3 * b.batched_tokens());
            let expected: Vec<u32> = reqs.iter().map(|r| r.output).collect();
            assert_eq!(t.tokens, expected, "caching {caching}");
            assert_eq!(
                stats.output_tokens,
                expected.iter().map(|&o| u64::from(o)).sum::<u64>()
            );
            for i in 0..reqs.len() {
                assert!(t.first_ns[i] <= t.last_ns[i]);
            }
            assert!(
                stats.preemptions > 0,
                "the cache is tight enough to preempt"
            );
            if caching {
                assert!(stats.prefix.cached_prompt_tokens > 0);
            }
        }
    }
}
