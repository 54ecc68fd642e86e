//! A dynamic batcher's service time fitted to a server's mean compute time per batch size, as
//! Triton's model statistics hold it: `a + b*size`, `c = 0` (the statistics know no input
//! lengths), no residuals (they hold means only) and no replay (they hold no arrivals).
//!
//! The server's protocol stays with the caller: it reads the statistics, fits the line
//! (weighted by each size's batches) and hands over the sizes ([`SizeMean`]), the line and the
//! time each request spends in the server outside its queue and the model.

use std::path::Path;

use capsim_sim::{Scenario, ScenarioError};

use super::FitError;
use super::dynamic::{AffineFit, with_affine_service};

/// One batch size's measured mean compute time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeMean {
    /// Requests per batch (>= 1).
    pub batch_size: u32,
    /// Batches of this size measured (>= 1).
    pub batches: u64,
    /// Their mean compute time (input, inference, output), in nanoseconds.
    pub mean_ns: f64,
}

/// Why a fit to batch means failed.
#[derive(Debug, thiserror::Error)]
pub enum BatchMeansError {
    /// The scenario is not one a dynamic-batching fit handles.
    #[error(transparent)]
    Fit(#[from] FitError),
    /// The scenario refused the fitted `postprocess.base`.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
}

/// What a fit to batch means found.
#[derive(Debug, Clone)]
pub struct BatchMeansFit {
    /// The input scenario with `[service]` the fitted affine one and, when the overhead is
    /// known, `postprocess.base` that overhead.
    pub scenario: Scenario,
    /// The fitted line (`c_ns` 0, no ratios).
    pub affine: AffineFit,
    /// The server's mean time per request outside its queue and the model, whole nanoseconds;
    /// `None` when unknown (the scenario's `postprocess.base` is kept).
    pub overhead_ns: Option<u64>,
    /// The sizes fitted.
    pub sizes: Vec<SizeMean>,
}

/// Puts the line `a_ns + b_ns*size` fitted to `sizes` into `scenario`'s `[service]`, and the
/// server's time per request outside its queue and the model (`overhead_ns`, nanoseconds) into
/// `postprocess.base`: one constant after the model, since the statistics cannot tell before
/// from after. The scenario must have one pool with a dynamic batcher.
pub fn fit_batch_means(
    scenario: &Scenario,
    sizes: &[SizeMean],
    (a_ns, b_ns): (f64, f64),
    overhead_ns: Option<f64>,
) -> Result<BatchMeansFit, BatchMeansError> {
    let affine = AffineFit {
        a_ns,
        b_ns,
        c_ns: 0.0,
        c_fitted: false,
        ratios: Vec::new(),
    };
    let mut fitted = with_affine_service(scenario, &affine)?;
    let overhead_ns = overhead_ns.map(|ns| ns.round() as u64);
    if let Some(ns) = overhead_ns {
        fitted.set("postprocess.base", &format!("\"{ns}ns\""))?;
    }
    Ok(BatchMeansFit {
        scenario: fitted,
        affine,
        overhead_ns,
        sizes: sizes.to_vec(),
    })
}

impl BatchMeansFit {
    /// Batches over every size.
    pub fn batches(&self) -> u64 {
        self.sizes.iter().map(|t| t.batches).sum()
    }

    /// The fit's text: the coefficients, each size measured against fitted, and the overhead.
    /// `model` names the model and `log` the statistics' file.
    pub fn describe(&self, model: &str, log: &Path) -> String {
        let fit = &self.affine;
        let mut text = format!(
            "fit: Triton's statistics of model {:?} in {}: {} batches of {} sizes; a + b*size by \
             least squares of each size's mean compute time (input, inference, output), weighted by \
             its batches\n  service.a {:>14.1} ns\n  service.b {:>14.1} ns\n  service.c {:>14} \
             (the statistics know no input lengths: b carries the per-token cost at the run's lengths)\n\
             {:<6} {:>9} {:>14} {:>14} {:>8}\n",
            model,
            log.display(),
            self.batches(),
            self.sizes.len(),
            fit.a_ns,
            fit.b_ns,
            "0",
            "size",
            "batches",
            "measured_ms",
            "fitted_ms",
            "error"
        );
        for t in &self.sizes {
            let fitted_ns = fit.mean_ns(t.batch_size, 0);
            text.push_str(&format!(
                "{:<6} {:>9} {:>14.3} {:>14.3} {:>+7.1}%\n",
                t.batch_size,
                t.batches,
                t.mean_ns / 1e6,
                fitted_ns / 1e6,
                (fitted_ns / t.mean_ns - 1.0) * 100.0
            ));
        }
        match self.overhead_ns {
            Some(ns) => text.push_str(&format!(
                "  postprocess.base {:>7.1} us  per request inside the server outside the queue and \
                 the model (mean success time less mean queue and compute)\n",
                ns as f64 / 1e3
            )),
            None => text.push_str(
                "  postprocess.base: kept (the statistics hold no per-request success, queue and \
                 compute times)\n",
            ),
        }
        text.push_str(
            "no residuals (the statistics hold means only) and no replay (they hold no arrivals)\n",
        );
        text
    }

    /// The comment above the fitted scenario: the command that fitted it (`scenario` and `log`
    /// its files) and what each fitted key comes from.
    pub fn toml_header(&self, scenario: &Path, log: &Path) -> String {
        self.toml_header_of(&format!(
            "capsim fit --scenario {} --log {}",
            scenario.display(),
            log.display()
        ))
    }

    /// The comment above the fitted scenario, `command` the command line that fitted it.
    pub fn toml_header_of(&self, command: &str) -> String {
        format!(
            "# Fitted by `{command}`: [service] a and b by least squares of\n\
             # Triton's mean compute time per batch size ({} batches); c = 0, no residuals;\n\
             # [postprocess] base: the server's mean time per request outside queue and model.\n",
            self.batches(),
        )
    }
}
