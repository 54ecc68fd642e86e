//! The host CPU of each instance as a resource that queues (`[host]`): the instance's
//! [`WorkerPool`](crate::preprocess::WorkerPool) is then its `cores`, shared first come first
//! served by two jobs of every request. On its way in (after routing, where pre-processing runs
//! without a host) a request's job is `request + request_per_input_token * input_tokens` plus
//! its pre-processing; on its way out (after its batch) its response's job is `response` plus
//! its post-processing. A job that takes no CPU time takes no core and waits for none.
//!
//! With `compute_cores`, each model instance's compute holds that many cores from a batch's
//! dispatch to the end of its compute: a job waiting then starts only on a core neither a job
//! nor compute holds (a job already running finishes; the OS would share the core, but a job is
//! short beside a batch).
//!
//! The way-in job counts as pre-processing time in the records (admission to `queued_ns`), the
//! way-out job as post-processing time (`exec_end_ns` to `postprocessed_ns`). A dynamic
//! batcher's pools only: a continuous batcher's streamed per-token post-processing does not run
//! on the cores.

use crate::postprocess;
use crate::scenario::{HostSpec, PostprocessSpec};

/// The CPU jobs of one pool with `[host]`.
#[derive(Debug, Clone)]
pub(crate) struct HostJobs {
    pub spec: HostSpec,
    /// The pool's post-processing, which runs on the cores with the way-out job.
    pub postprocess: PostprocessSpec,
}

impl HostJobs {
    /// CPU time of the host's work on a request on its way in, in nanoseconds: per request and
    /// per input token (its pre-processing, if any, comes on top, in the same job).
    #[inline]
    pub fn request_ns(&self, input_tokens: u32) -> u64 {
        self.spec
            .request_per_input_token
            .0
            .saturating_mul(u64::from(input_tokens))
            .saturating_add(self.spec.request.0)
    }

    /// CPU time of a whole response's way-out job, in nanoseconds: the host's work per response
    /// plus its post-processing (every output token's).
    #[inline]
    pub fn response_ns(&self, output_tokens: u32) -> u64 {
        postprocess::time_ns(&self.postprocess, output_tokens, false)
            .saturating_add(self.spec.response.0)
    }

    /// True when the host works on a request on its way in.
    pub fn has_request_work(&self) -> bool {
        self.spec.request.0 > 0 || self.spec.request_per_input_token.0 > 0
    }

    /// True when some response's way-out job may take time (the post-processing stage is
    /// modelled).
    pub fn has_response_work(&self) -> bool {
        self.spec.response.0 > 0 || !postprocess::is_instant(&self.postprocess)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::DurationNs;

    #[test]
    fn a_responses_job_adds_the_hosts_work_to_the_post_processing() {
        let jobs = HostJobs {
            spec: HostSpec {
                cores: 2,
                request: DurationNs(60_000),
                request_per_input_token: DurationNs(100),
                response: DurationNs(40_000),
                compute_cores: 0,
            },
            postprocess: PostprocessSpec {
                base: DurationNs(3_000),
                per_output_token: DurationNs(200),
            },
        };
        assert_eq!(
            jobs.request_ns(1_000),
            60_000 + 100_000,
            "request + per token"
        );
        assert_eq!(
            jobs.response_ns(10),
            40_000 + 3_000 + 2_000,
            "response, plus post-processing of every output token"
        );
    }
}
