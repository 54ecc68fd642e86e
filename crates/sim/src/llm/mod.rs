//! LLM serving: an iteration-level (continuous) batcher in the vLLM style, its KV cache and
//! prefix cache. The step-time models that say how long one scheduler step takes are in
//! [`crate::timing`].
//!
//! A pool whose batcher is continuous hands admitted requests to an LLM instance instead of the
//! dynamic batcher. Every step the scheduler picks which waiting and running sequences take part
//! (under `max_num_seqs` and `max_num_batched_tokens`), the
//! [`StepTime`](crate::timing::step_time::StepTime) model says how long the step takes from its
//! [`StepBatch`](crate::timing::step_time::StepBatch) composition, and at the step's end each
//! sequence that decoded emits one token.

pub(crate) mod kv;
pub(crate) mod prefix;
pub mod scheduler;
