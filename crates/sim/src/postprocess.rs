//! Post-processing: a delay per request (`base + per_output_token * output_tokens`) after its
//! batch finishes, run in parallel without a worker limit, before the response goes back.

use crate::scenario::PostprocessSpec;

/// Post-processing time of one request, in nanoseconds.
#[inline]
pub fn time_ns(spec: &PostprocessSpec, output_tokens: u32) -> u64 {
    spec.per_output_token
        .0
        .saturating_mul(u64::from(output_tokens))
        .saturating_add(spec.base.0)
}

/// True when post-processing takes no time (the engine then skips the stage).
pub fn is_instant(spec: &PostprocessSpec) -> bool {
    spec.base.0 == 0 && spec.per_output_token.0 == 0
}
