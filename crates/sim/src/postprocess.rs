//! Post-processing: a delay per request (`base + per_output_token * output_tokens`) after its
//! batch finishes, run in parallel without a worker limit, before the response goes back.

use crate::context::{Ctx, LANE_POSTPROCESS, Place};
use crate::event::EventKind;
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

/// The pools' post-processing, by pool.
pub(crate) struct Postprocess {
    pub specs: Vec<PostprocessSpec>,
    /// By pool: true when its post-processing takes no time (the stage is skipped).
    pub instant: Vec<bool>,
}

impl Postprocess {
    /// Execution is over for the request on `ticket`: post-processing starts; false when it
    /// takes no time (the response goes on at once).
    #[inline(always)]
    pub fn start(&self, ctx: &mut Ctx, ticket: u32) -> bool {
        let now = ctx.now;
        let t = &mut ctx.tickets[ticket];
        let pool = t.record.pool as usize;
        if self.instant[pool] {
            return false;
        }
        t.place = Place::Postprocess;
        let done = now + time_ns(&self.specs[pool], t.record.output_tokens);
        ctx.events.push_in_order(
            LANE_POSTPROCESS,
            done.ns(),
            EventKind::PostprocessDone,
            ticket,
            t.generation,
        );
        true
    }
}
