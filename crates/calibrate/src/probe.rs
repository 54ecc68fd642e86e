//! A machine-speed probe: runs a profile's reference batch now and compares its time with the
//! calibration's. Shared machines change speed by tens of percent from one minute to the next
//! (other tenants on the same physical cores, clocks), invisibly to the guest's CPU-wait
//! counters; a simulation driven by a profile measured at another speed then disagrees with a
//! live run for that reason alone. `capsim validate` probes before and after each live run and
//! says when the two differ.

use std::path::Path;

use capsim_sim::rng::SimRng;
use capsim_sim::timing::profile::{Profile, ProfileServiceTime};
use capsim_sim::timing::service::BatchShape;
use rand::SeedableRng;

use crate::runtime::{ProviderChoice, Runtime};
use crate::{CalibrateError, model};

/// The probe's batch: the idle slowdown's largest point when the profile has one, else the
/// grid's middle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReferenceBatch {
    /// Batch size.
    pub batch_size: u32,
    /// Length, when the model has a length dimension.
    pub length: Option<u32>,
}

impl ReferenceBatch {
    /// The reference batch of `profile`.
    pub fn of(profile: &Profile) -> ReferenceBatch {
        match profile.idle_slowdown.as_ref().and_then(|i| i.points.last()) {
            Some(point) => ReferenceBatch {
                batch_size: point.batch_size,
                length: point.length,
            },
            None => {
                let batches = &profile.grid.batch_sizes;
                let lengths = &profile.grid.lengths;
                ReferenceBatch {
                    batch_size: batches[batches.len() / 2],
                    length: (!lengths.is_empty()).then(|| lengths[lengths.len() / 2]),
                }
            }
        }
    }
}

/// A session ready to time the reference batch as the calibration did (same idle wait before
/// each run, same intra-op threads and provider).
pub struct SpeedProbe {
    session: ort::session::Session,
    inputs: Vec<model::InputSpec>,
    plan: model::DimPlan,
    reference: ReferenceBatch,
    idle_gap_ns: u64,
    vocab: u64,
    rng: SimRng,
    /// The profile's median run time of the reference batch, ns.
    calibrated_ns: f64,
}

impl SpeedProbe {
    /// Opens a session of `model` for probing against `profile`.
    pub fn new(
        runtime: &Runtime,
        model_path: &Path,
        provider: ProviderChoice,
        intra_threads: u32,
        profile: &Profile,
    ) -> Result<SpeedProbe, CalibrateError> {
        let (session, _) = runtime.open_session(model_path, provider, intra_threads)?;
        let inputs = model::inputs_of(&session, model_path)?;
        let reference = ReferenceBatch::of(profile);
        let mut dims = std::collections::BTreeMap::new();
        if let (Some(name), Some(length)) = (&profile.grid.length_dim, reference.length) {
            dims.insert(name.clone(), vec![length]);
        }
        for (name, &value) in &profile.grid.fixed_dims {
            dims.insert(name.clone(), vec![u32::try_from(value).unwrap_or(u32::MAX)]);
        }
        let plan = model::DimPlan::resolve(&inputs, &dims, model_path)?;
        let shape = BatchShape {
            size: reference.batch_size,
            max_input_tokens: reference.length.unwrap_or(1),
            total_input_tokens: u64::from(reference.batch_size)
                * u64::from(reference.length.unwrap_or(1)),
            idle_ns: profile.settings.idle_gap_ns,
        };
        let calibrated_ns = ProfileServiceTime::new(profile).quantile_ns(&shape, 0.5);
        Ok(SpeedProbe {
            session,
            inputs,
            plan,
            reference,
            idle_gap_ns: profile.settings.idle_gap_ns,
            vocab: profile.settings.vocab,
            rng: SimRng::seed_from_u64(profile.settings.seed),
            calibrated_ns,
        })
    }

    /// The batch it times.
    pub fn reference(&self) -> ReferenceBatch {
        self.reference
    }

    /// Times `runs` runs of the reference batch (after 3 untimed ones) and returns their median
    /// over the profile's median: 1.3 means the machine runs the model 30% slower than when it
    /// was calibrated.
    pub fn slowdown(&mut self, runs: u32) -> Result<f64, CalibrateError> {
        let ReferenceBatch { batch_size, length } = self.reference;
        let mut times_ns = Vec::with_capacity(runs as usize);
        for i in 0..runs + 3 {
            if self.idle_gap_ns > 0 {
                std::thread::sleep(std::time::Duration::from_nanos(self.idle_gap_ns));
            }
            let (_, ran_ns) = crate::time_run(
                &mut self.session,
                &self.inputs,
                &self.plan,
                (batch_size, length),
                self.vocab,
                &mut self.rng,
            )?;
            if i >= 3 {
                times_ns.push(ran_ns);
            }
        }
        times_ns.sort_unstable();
        let median_ns = crate::measure::quantile(&times_ns, 0.5) as f64;
        Ok(median_ns / self.calibrated_ns.max(1.0))
    }
}
