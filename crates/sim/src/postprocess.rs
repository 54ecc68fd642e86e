//! Post-processing: the server's work on a response after execution (detokenization, encoding,
//! streaming), run in parallel without a worker limit, before the response goes back.
//!
//! A whole response (a dynamic batcher's) takes `base + per_output_token * output_tokens` after
//! its batch. A streamed response (a continuous batcher's) sends each token `per_output_token`
//! after the step that sampled it (its detokenization and its chunk of the stream), so after
//! the last token only that token's `per_output_token` is left, then `base` closes the stream
//! (the final chunk, the usage figures). The first token reaches the client one
//! `per_output_token` after its step, which [`crate::record::RequestRecord::ttft_ns`] counts by
//! leaving out `base`, kept in the record's `stream_close_ns`.

use crate::context::{Ctx, LANE_POSTPROCESS, Place};
use crate::event::EventKind;
use crate::scenario::PostprocessSpec;

/// Post-processing time of one request after its execution ends, in nanoseconds: after the
/// batch for a whole response, after the last token for a `streamed` one.
#[inline]
pub fn time_ns(spec: &PostprocessSpec, output_tokens: u32, streamed: bool) -> u64 {
    let tokens_left = if streamed { 1 } else { output_tokens };
    spec.per_output_token
        .0
        .saturating_mul(u64::from(tokens_left))
        .saturating_add(spec.base.0)
}

/// True when post-processing takes no time (the engine then skips the stage).
pub fn is_instant(spec: &PostprocessSpec) -> bool {
    spec.base.0 == 0 && spec.per_output_token.0 == 0
}

/// How a pool's responses are post-processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// It takes no time: the stage is skipped.
    Instant,
    /// A delay, in parallel without a worker limit.
    Delay,
    /// On a core of the instance's host, with the host's work per response (`[host]`,
    /// [`crate::host`]).
    OnHost,
}

/// What became of a response whose execution is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Started {
    /// Nothing to do: it goes on at once.
    Done,
    /// Post-processing ends at an event.
    Later,
    /// Its job goes to the host's cores.
    OnHost,
}

/// The pools' post-processing, by pool.
pub(crate) struct Postprocess {
    pub specs: Vec<PostprocessSpec>,
    /// By pool: how its responses are post-processed.
    pub modes: Vec<Mode>,
    /// By pool: true when it streams its responses token by token (a continuous batcher).
    pub streamed: Vec<bool>,
}

impl Postprocess {
    /// Execution is over for the request on `ticket`: post-processing starts, is skipped
    /// ([`Started::Done`]: it takes no time), or is left to the host's cores.
    #[inline(always)]
    pub fn start(&self, ctx: &mut Ctx, ticket: u32) -> Started {
        let now = ctx.now;
        let t = &mut ctx.tickets[ticket];
        let pool = t.record.pool as usize;
        match self.modes[pool] {
            Mode::Instant => return Started::Done,
            Mode::OnHost => return Started::OnHost,
            Mode::Delay => {}
        }
        t.place = Place::Postprocess;
        let (spec, streamed) = (&self.specs[pool], self.streamed[pool]);
        if streamed {
            t.record.stream_close_ns = spec.base.0;
        }
        let done = now + time_ns(spec, t.record.output_tokens, streamed);
        ctx.events.push_in_order(
            LANE_POSTPROCESS,
            done.ns(),
            EventKind::PostprocessDone,
            ticket,
            t.generation,
        );
        Started::Later
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::DurationNs;

    #[test]
    fn a_streamed_response_pays_one_tokens_detokenization_and_the_base_after_its_last_token() {
        let spec = PostprocessSpec {
            base: DurationNs(5_000),
            per_output_token: DurationNs(300),
        };
        assert_eq!(
            time_ns(&spec, 100, true),
            5_300,
            "streamed: base + one token"
        );
        assert_eq!(
            time_ns(&spec, 100, false),
            35_000,
            "whole response: base + every token"
        );
    }
}
