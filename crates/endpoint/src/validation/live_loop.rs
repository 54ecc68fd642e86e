//! The loop of `capsim validate` against capsim's own live server (ONNX Runtime in process): at
//! each load, a fraction of the profile's calibrated capacity, the trace scaled to that rate is
//! simulated with the profile's times and served live between two probes of the machine's
//! speed; the records go under `--out`, and the runs are compared ([`figure_rows`]), the live
//! batches set against the profile ([`BatchReport`]) and the simulation run again at the level
//! they ran at ([`Leveled`]).
//!
//! This crate does not load ONNX Runtime: the live server and the speed probe come in through
//! two small traits, [`LiveServer`] and [`MachineSpeed`], that the command implements with
//! `capsim_calibrate`'s types, and a test with fakes.

use std::path::PathBuf;
use std::sync::Arc;

use capsim_sim::output::write_requests_parquet;
use capsim_sim::record::RequestRecord;
use capsim_sim::timing::profile::{Profile, ProfileServiceTime};
use capsim_sim::timing::service::ScaledService;
use capsim_sim::{
    BuiltScenario, RunOptions, Scenario, ServiceTime, Summary, simulate, simulate_with_requests,
};
use capsim_trace::Trace;

use super::live::{BatchReport, FigureRow, Leveled, figure_rows, figures_text};
use super::{CalibratedCapacity, ValidationError, scaled_trace, served_lengths};

/// An error of the live server or the probe, as their implementation gives it (the command
/// takes it back to its own type to report it).
pub type LiveError = Box<dyn std::error::Error + Send + Sync>;

/// What the live server returns for one run.
#[derive(Debug, Clone)]
pub struct LiveRecords {
    /// One record per request, in request order.
    pub records: Vec<RequestRecord>,
    /// The run's summary, in the simulator's terms.
    pub summary: Summary,
    /// Time the model instances waited for a CPU while executing batches, ns (`None` where the
    /// machine does not say).
    pub cpu_wait_ns: Option<u64>,
    /// Summed execution time of all batches, ns.
    pub busy_ns: u64,
}

/// capsim's own live server: serves the scenario's default pool.
pub trait LiveServer {
    /// Serves `requests` (arrivals in ns from the start, input lengths in tokens, already cut to
    /// the served lengths) in their time and returns what it measured.
    fn serve(&mut self, requests: &Trace) -> Result<LiveRecords, LiveError>;
}

/// The batch the probe times, as the machine-speed line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReferenceShape {
    /// Batch size.
    pub batch_size: u32,
    /// Length, when the model has a length dimension.
    pub length: Option<u32>,
}

/// The machine's speed against the calibration's, probed around each live run.
pub trait MachineSpeed {
    /// Times `runs` runs of the reference batch and returns their median over the profile's:
    /// 1.3 means the machine runs the model 30% slower than when it was calibrated.
    fn slowdown(&mut self, runs: u32) -> Result<f64, LiveError>;
    /// The batch it times.
    fn reference(&self) -> ReferenceShape;
}

/// Timed runs of the reference batch before and after each live run.
const PROBE_RUNS: u32 = 30;

/// Beyond this change of the machine's speed since the calibration (either way), the errors of
/// a load say more about the machine than about the simulator.
const SPEED_CHANGE_WARNING: f64 = 0.10;

/// What a live validation starts from, checked and built by the command.
#[derive(Debug)]
pub struct LiveInputs {
    /// The served scenario (one pool, the dynamic batcher, no payloads prefetched).
    pub scenario: Scenario,
    /// It, built.
    pub built: BuiltScenario,
    /// The model's calibration profile: the simulation's times.
    pub profile: Profile,
    /// The calibration's share of execution time spent waiting for a CPU, when recorded.
    pub calibration_cpu_wait: Option<f64>,
    /// The trace, at least 2 requests.
    pub trace: Trace,
    /// Longest input; longer ones are cut to it in every run.
    pub max_length: u32,
    /// How much of the scaled trace each load runs, ns.
    pub duration_ns: u64,
    /// Seed of the simulations.
    pub seed: u64,
    /// Where each load's records go (`DIR/load-30/{simulated,measured}.parquet`), if anywhere.
    pub out: Option<PathBuf>,
}

/// A validation against capsim's own live server: the scenario built, the profile's times, the
/// trace at the served lengths and the capacity the loads are fractions of.
#[derive(Debug)]
pub struct LiveValidation {
    scenario: Scenario,
    built: BuiltScenario,
    service: Arc<ProfileServiceTime>,
    /// The calibration's share of execution time spent waiting for a CPU, as printed.
    calibration_wait: String,
    trace: Trace,
    lengths: Vec<u32>,
    max_length: u32,
    duration_ns: u64,
    seed: u64,
    out: Option<PathBuf>,
    capacity: CalibratedCapacity,
}

impl LiveValidation {
    /// The validation of `inputs`; a trace of fewer than 2 requests, or a profile that times a
    /// full batch at 0 ns, is bad input.
    pub fn new(inputs: LiveInputs) -> Result<LiveValidation, ValidationError> {
        if inputs.trace.len() < 2 {
            return Err(ValidationError::BadInput(
                "capsim validate needs a trace of at least 2 requests".into(),
            ));
        }
        let service = Arc::new(ProfileServiceTime::new(&inputs.profile));
        let lengths = served_lengths(&inputs.trace, inputs.max_length);
        // Every model instance running full batches of a typical (mean) length.
        let capacity =
            CalibratedCapacity::of(&inputs.scenario.pools()[0], service.as_ref(), &lengths)
                .ok_or_else(|| {
                    ValidationError::BadInput("the profile times a full batch at 0 ns".into())
                })?;
        let calibration_wait = inputs.calibration_cpu_wait.map_or_else(
            || "not recorded".to_string(),
            |s| format!("{:.1}%", 100.0 * s),
        );
        Ok(LiveValidation {
            scenario: inputs.scenario,
            built: inputs.built,
            service,
            calibration_wait,
            trace: inputs.trace,
            lengths,
            max_length: inputs.max_length,
            duration_ns: inputs.duration_ns,
            seed: inputs.seed,
            out: inputs.out,
            capacity,
        })
    }

    /// The capacity the loads are fractions of.
    pub fn capacity(&self) -> &CalibratedCapacity {
        &self.capacity
    }

    /// The capacity's line.
    pub fn capacity_text(&self) -> String {
        let c = &self.capacity;
        format!(
            "calibrated capacity: {:.1} rps ({} model instances, batches of {} padded to {} tokens on average, inputs {} tokens on average)\n",
            c.rate_rps,
            c.model_instances,
            c.max_batch_size,
            c.padded_input_tokens,
            c.mean_input_tokens
        )
    }

    /// One load: the simulation, the live run on `server` between two probes of the machine's
    /// speed, the records under `--out`, and what they add up to.
    pub fn run_load(
        &self,
        load: f64,
        server: &mut dyn LiveServer,
        probe: &mut dyn MachineSpeed,
    ) -> Result<LiveLoad, ValidationError> {
        // Compress (or stretch) the trace's gaps to the target rate; keep `duration` of it.
        let rate_rps = load * self.capacity.rate_rps;
        let scaled = scaled_trace(
            &self.trace,
            &self.lengths,
            rate_rps,
            self.duration_ns,
            false,
        )?;
        let mut options = RunOptions {
            seed: self.seed,
            service_override: Some(self.service.clone() as Arc<dyn ServiceTime>),
            ..RunOptions::default()
        };
        let (simulated_run, simulated_log) =
            simulate_with_requests(&self.built, &scaled, &options)?;
        let before = probe.slowdown(PROBE_RUNS).map_err(ValidationError::Live)?;
        let live = server.serve(&scaled).map_err(ValidationError::Live)?;
        let after = probe.slowdown(PROBE_RUNS).map_err(ValidationError::Live)?;
        self.write_records(load, simulated_log.records(), &live.records)?;
        let batches = BatchReport::of(&live.records, &self.service, self.max_length);
        let leveled = match batches.level {
            // A diagnostic, not the validation: the simulation again, with the profile's times
            // brought to the level the live batches ran at, leaves the serving model's own error.
            Some(level) => {
                let leveled = ScaledService::new(self.service.clone(), level).ok_or_else(|| {
                    ValidationError::Context {
                        context: "the live batches' level of the profile's times".into(),
                        source: format!("{level} is not a positive factor").into(),
                    }
                })?;
                options.service_override = Some(Arc::new(leveled));
                let summary = simulate(&self.built, &scaled, &options)?;
                Some(Leveled::of(level, &summary, &live.summary))
            }
            None => None,
        };
        Ok(LiveLoad {
            load,
            figures: figure_rows(&simulated_run.summary, &live.summary),
            cpu_wait_pct: live
                .cpu_wait_ns
                .map(|wait_ns| 100.0 * wait_ns as f64 / live.busy_ns.max(1) as f64),
            calibration_wait: self.calibration_wait.clone(),
            batches,
            leveled,
            speed: SpeedChange {
                reference: probe.reference(),
                before,
                after,
            },
        })
    }

    /// Both runs' records under `--out`, `DIR/load-30/{simulated,measured}.parquet`.
    fn write_records(
        &self,
        load: f64,
        simulated: &[RequestRecord],
        measured: &[RequestRecord],
    ) -> Result<(), ValidationError> {
        let Some(out) = &self.out else {
            return Ok(());
        };
        let dir = out.join(format!("load-{:.0}", load * 100.0));
        std::fs::create_dir_all(&dir).map_err(|source| ValidationError::OutDir {
            dir: dir.clone(),
            source,
        })?;
        let pools = std::slice::from_ref(&self.scenario.pools()[0].name);
        write_requests_parquet(&dir.join("simulated.parquet"), simulated, pools)?;
        write_requests_parquet(&dir.join("measured.parquet"), measured, pools)?;
        Ok(())
    }
}

/// The machine's speed around one live run, against the calibration's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpeedChange {
    /// The batch the probe timed.
    pub reference: ReferenceShape,
    /// Its median time over the profile's before the live run.
    pub before: f64,
    /// And after.
    pub after: f64,
}

impl SpeedChange {
    /// The probe further from the calibration's speed.
    pub fn worst(&self) -> f64 {
        if (self.before - 1.0).abs() > (self.after - 1.0).abs() {
            self.before
        } else {
            self.after
        }
    }
}

/// One load of a live validation: the figures of both runs, the live CPU wait, the live
/// batches, the leveled simulation and the machine's speed.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveLoad {
    /// The load, a fraction of the calibrated capacity.
    pub load: f64,
    /// The simulated and live figures.
    pub figures: Vec<FigureRow>,
    /// The percentage of the live batches' execution time their threads waited for a CPU.
    pub cpu_wait_pct: Option<f64>,
    /// The calibration's, as printed.
    calibration_wait: String,
    /// The live batches against the profile.
    pub batches: BatchReport,
    /// The simulation at the live batches' level, when they give one.
    pub leveled: Option<Leveled>,
    /// The machine's speed around the live run.
    pub speed: SpeedChange,
}

impl LiveLoad {
    /// The load's lines: the table's rows, the CPU wait, the batches, the leveled errors and
    /// the machine's speed.
    pub fn text(&self) -> String {
        let load_pct = self.load * 100.0;
        let mut text = figures_text(self.load, &self.figures);
        if let Some(wait_pct) = self.cpu_wait_pct {
            text.push_str(&format!(
                "{load_pct:>4.0}% live model instances waited for a CPU (held by other threads or \
                 processes) {wait_pct:.1}% of their execution time; the calibration: {}\n",
                self.calibration_wait
            ));
        }
        text.push_str(&self.batches.text(self.load));
        if let Some(leveled) = &self.leveled {
            text.push_str(&leveled.text(self.load));
        }
        let reference = self.speed.reference;
        let at = match reference.length {
            Some(length) => format!("batch {}, length {length}", reference.batch_size),
            None => format!("batch {}", reference.batch_size),
        };
        text.push_str(&format!(
            "{load_pct:>4.0}% machine speed: the reference batch ({at}) took {:.2}x its \
             calibrated median time before the live run and {:.2}x after\n",
            self.speed.before, self.speed.after
        ));
        text
    }

    /// Why the load's errors mostly measure the machine: its speed changed by more than 10%
    /// since the calibration.
    pub fn speed_warning(&self) -> Option<String> {
        let worst = self.speed.worst();
        ((worst - 1.0).abs() > SPEED_CHANGE_WARNING).then(|| {
            format!(
                "at {:.0}% load the machine ran the reference batch at {worst:.2}x its \
                 calibrated time, so these errors mostly measure the machine's change of speed: \
                 calibrate and validate on a quiet machine, one right after the other",
                self.load * 100.0
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsim_trace::Columns;

    /// The shipped classifier's CPU profile.
    fn profile() -> Profile {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../traces/profiles/text_classifier.cpu.json"
        );
        Profile::read(std::path::Path::new(path)).expect("the shipped profile reads")
    }

    /// One instance batching up to 4 requests, no payloads prefetched, as `validate` serves it.
    fn scenario() -> (Scenario, BuiltScenario) {
        let mut scenario = Scenario::from_toml_str(
            "instances = 1\n[batcher]\nmax_batch_size = 4\nmax_queue_delay = \"1ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"1ms\"\n",
        )
        .expect("scenario");
        scenario.set("batcher.prefetch", "false").expect("prefetch");
        let built = capsim_sim::build::build(&scenario, &mut capsim_sim::Profiles::default())
            .expect("built");
        (scenario, built)
    }

    /// 2,000 requests 1 ms apart, inputs of 16 to 79 tokens.
    fn trace() -> Trace {
        let n = 2_000u32;
        Trace::from_columns(Columns {
            arrival_ns: (0..u64::from(n)).map(|i| i * 1_000_000).collect(),
            input_tokens: (0..n).map(|i| 16 + i % 64).collect(),
            ..Columns::default()
        })
        .expect("trace")
    }

    fn validation(out: Option<PathBuf>) -> LiveValidation {
        let (scenario, built) = scenario();
        LiveValidation::new(LiveInputs {
            scenario,
            built,
            profile: profile(),
            calibration_cpu_wait: Some(0.01),
            trace: trace(),
            max_length: 64,
            duration_ns: 500_000_000,
            seed: 7,
            out,
        })
        .expect("validation")
    }

    /// A live server that is the simulator: the profile's times slowed by `factor`, the
    /// validation's seed.
    struct Simulating {
        built: BuiltScenario,
        factor: f64,
    }

    impl LiveServer for Simulating {
        fn serve(&mut self, requests: &Trace) -> Result<LiveRecords, LiveError> {
            let service = Arc::new(ProfileServiceTime::new(&profile()));
            let options = RunOptions {
                seed: 7,
                service_override: Some(Arc::new(
                    ScaledService::new(service, self.factor).expect("factor"),
                )),
                ..RunOptions::default()
            };
            let (run, log) = simulate_with_requests(&self.built, requests, &options)?;
            Ok(LiveRecords {
                records: log.records().to_vec(),
                summary: run.summary,
                cpu_wait_ns: Some(1_000_000),
                busy_ns: 100_000_000,
            })
        }
    }

    /// A probe that always finds the machine at `slowdown` times the calibration's time.
    struct Steady(f64);

    impl MachineSpeed for Steady {
        fn slowdown(&mut self, _runs: u32) -> Result<f64, LiveError> {
            Ok(self.0)
        }

        fn reference(&self) -> ReferenceShape {
            ReferenceShape {
                batch_size: 4,
                length: Some(64),
            }
        }
    }

    #[test]
    fn a_live_server_that_runs_as_simulated_gives_no_error_and_its_records_are_written() {
        let out = tempfile::tempdir().expect("tempdir");
        let validation = validation(Some(out.path().to_path_buf()));
        let mut server = Simulating {
            built: scenario().1,
            factor: 1.0,
        };
        let load = validation
            .run_load(0.5, &mut server, &mut Steady(1.0))
            .expect("load");
        for row in &load.figures {
            assert_eq!(
                (row.simulated, row.error()),
                (row.measured, 0.0),
                "{}: simulated vs measured, error",
                row.metric
            );
        }
        assert!(load.figures[0].measured > 0.0, "no throughput: {load:?}");
        assert_eq!(load.speed_warning(), None, "a steady machine");
        let text = load.text();
        assert!(
            text.contains("  50% live model instances waited for a CPU (held by other threads or processes) 1.0% of their execution time; the calibration: 1.0%\n")
                && text.contains("  50% machine speed: the reference batch (batch 4, length 64) took 1.00x its calibrated median time before the live run and 1.00x after\n"),
            "{text}"
        );
        for run in ["simulated", "measured"] {
            let file = out.path().join(format!("load-50/{run}.parquet"));
            assert!(file.is_file(), "{} missing", file.display());
        }
    }

    #[test]
    fn a_slow_live_server_shows_its_level_and_a_slow_machine_is_warned_of() {
        let validation = validation(None);
        let mut server = Simulating {
            built: scenario().1,
            factor: 1.5,
        };
        let load = validation
            .run_load(0.5, &mut server, &mut Steady(1.3))
            .expect("load");
        let e2e_p50 = load
            .figures
            .iter()
            .find(|r| r.metric == "end_to_end p50 ms")
            .expect("an end-to-end p50 row");
        assert!(
            e2e_p50.error() < -0.1,
            "the simulation should be faster than a server 1.5x slower: {e2e_p50:?}"
        );
        let level = load.batches.level.expect("a level");
        assert!(
            (level - 1.5).abs() < 0.05,
            "level: expected 1.5, got {level}"
        );
        let leveled = load.leveled.as_ref().expect("the leveled simulation");
        assert_eq!(leveled.level, level);
        let warning = load.speed_warning().expect("a warning at 1.3x");
        assert!(
            warning.starts_with("at 50% load the machine ran the reference batch at 1.30x"),
            "{warning}"
        );
    }

    #[test]
    fn a_trace_of_one_request_is_bad_input() {
        let (scenario, built) = scenario();
        let one = Trace::from_columns(Columns {
            arrival_ns: vec![0],
            input_tokens: vec![8],
            ..Columns::default()
        })
        .expect("trace");
        let err = LiveValidation::new(LiveInputs {
            scenario,
            built,
            profile: profile(),
            calibration_cpu_wait: None,
            trace: one,
            max_length: 64,
            duration_ns: 1_000_000_000,
            seed: 0,
            out: None,
        })
        .expect_err("one request");
        assert!(
            matches!(&err, ValidationError::BadInput(m) if m.contains("at least 2 requests")),
            "{err}"
        );
    }
}
