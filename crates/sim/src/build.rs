//! The build step: a validated [`Scenario`] (plain data) into what the engine runs, its pools'
//! service- and step-time models built. This is the one place that reads profile files and the
//! model config files a step time names (`[step_time] model = "PATH/config.json"`).
//!
//! [`Profiles`] caches the profiles read, by path, so a sweep reads each file once whatever the
//! number of configurations and loads: [`Profiles::load`] reads what a scenario names and the
//! cache lacks, and [`Profiles::build`] reads nothing, so a loaded cache is shared read-only
//! across threads. [`build`] does both for one scenario.
//!
//! ```
//! use capsim_sim::Scenario;
//! use capsim_sim::build::{Profiles, build};
//! let scenario = Scenario::from_toml_str("[service]\nkind = \"constant\"\ntime = \"5ms\"\n").unwrap();
//! let built = build(&scenario, &mut Profiles::default()).unwrap();
//! assert!(built.pools[0].service.is_some());
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::scenario::{
    Scenario, ScenarioError, ServiceSpec, invalid, kv_blocks_of, residuals_of, size_factors_of,
};
use crate::timing::model_config::ModelConfig;
use crate::timing::operators::{Curve, OperatorStepTime, OperatorTable, read_all_reduce};
use crate::timing::profile::ProfileServiceTime;
use crate::timing::roofline::{Roofline, TensorParallelRoofline};
use crate::timing::service::{
    AffineService, ConstantService, ExponentialService, ScaledService, ServiceTime,
};
use crate::timing::step_profile::ProfileStepTime;
use crate::timing::step_spec::{
    ModelSource, OperatorsSpec, RooflineSpec, StepTimeError, StepTimeSpec,
};
use crate::timing::step_time::{ScaledStepTime, StepTime};

/// A scenario with every pool's time model built: what [`crate::simulate`] runs.
#[derive(Debug, Clone)]
pub struct BuiltScenario {
    /// The scenario as validated.
    pub scenario: Scenario,
    /// The built models of each pool, in the order of [`Scenario::pools`].
    pub pools: Vec<PoolModels>,
}

/// The built time models of one pool (each already scaled by `execution.time_scale`).
#[derive(Debug, Clone)]
pub struct PoolModels {
    /// The batch service time (dynamic batcher; `None` with a continuous batcher).
    pub service: Option<Arc<dyn ServiceTime>>,
    /// The step time (continuous batcher; `None` with a dynamic batcher).
    pub step_time: Option<Arc<dyn StepTime>>,
}

/// Profiles read from disk, by path as resolved against the scenario's folder.
#[derive(Debug, Clone, Default)]
pub struct Profiles {
    services: BTreeMap<PathBuf, Arc<ProfileServiceTime>>,
    steps: BTreeMap<PathBuf, Arc<ProfileStepTime>>,
    models: BTreeMap<PathBuf, Arc<ModelConfig>>,
    /// Operator tables by folder and tensor-parallel degree.
    operator_tables: BTreeMap<(PathBuf, u32), Arc<OperatorTable>>,
    /// Measured all-reduce times by file and number of workers.
    all_reduces: BTreeMap<(PathBuf, u32), Curve>,
    files_read: u64,
}

/// A file a pool names: which key, and the file.
enum ProfileFile {
    Service {
        key: String,
        path: PathBuf,
    },
    Step {
        key: String,
        path: PathBuf,
    },
    Model {
        key: String,
        path: PathBuf,
    },
    Operators {
        key: String,
        path: PathBuf,
        tensor_parallel: u32,
    },
    AllReduce {
        key: String,
        path: PathBuf,
        workers: u32,
    },
}

/// A service profile's file: against the scenario's folder, as written when it has none.
fn service_profile_path(base: Option<&Path>, path: &Path) -> PathBuf {
    base.map_or_else(|| path.to_path_buf(), |dir| dir.join(path))
}

/// A step profile's file: against the scenario's folder, or `.` when it has none.
fn step_profile_path(base: Option<&Path>, path: &Path) -> PathBuf {
    base.unwrap_or_else(|| Path::new(".")).join(path)
}

/// The profile files `scenario`'s pools name, resolved.
fn profile_files(scenario: &Scenario) -> Vec<ProfileFile> {
    let base = scenario.base_dir();
    let mut files = Vec::new();
    for (index, pool) in scenario.pools().iter().enumerate() {
        let prefix = scenario.key_prefix(index);
        if let Some(ServiceSpec::Profile { path }) = &pool.service_spec {
            files.push(ProfileFile::Service {
                key: format!("{prefix}service.path"),
                path: service_profile_path(base, path),
            });
        }
        let step_time = pool.llm.as_ref().map(|l| &l.step_time_spec);
        if let Some(StepTimeSpec::Profile { path, .. }) = step_time {
            files.push(ProfileFile::Step {
                key: format!("{prefix}step_time"),
                path: step_profile_path(base, path),
            });
        }
        if let Some(path) = step_time.and_then(StepTimeSpec::model_file) {
            files.push(ProfileFile::Model {
                key: format!("{prefix}step_time.model"),
                path: step_profile_path(base, path),
            });
        }
        if let Some(StepTimeSpec::Roofline(spec)) = step_time
            && let Some(path) = &spec.all_reduce
            && spec.tensor_parallel.unwrap_or(1) > 1
        {
            files.push(ProfileFile::AllReduce {
                key: format!("{prefix}step_time.all_reduce"),
                path: step_profile_path(base, path),
                workers: spec.tensor_parallel.unwrap_or(1),
            });
        }
        if let Some(StepTimeSpec::Operators(spec)) = step_time {
            let tensor_parallel = spec.tensor_parallel();
            files.push(ProfileFile::Operators {
                key: format!("{prefix}step_time.profile"),
                path: step_profile_path(base, &spec.profile),
                tensor_parallel,
            });
            if let Some(path) = &spec.all_reduce {
                files.push(ProfileFile::AllReduce {
                    key: format!("{prefix}step_time.all_reduce"),
                    path: step_profile_path(base, path),
                    workers: tensor_parallel,
                });
            }
        }
    }
    files
}

impl ProfileFile {
    /// The scenario key that holds the file's path, and the path as resolved.
    fn path_key(&self) -> (String, &Path) {
        match self {
            // A step profile's error names its table; its path is the table's `path`.
            ProfileFile::Step { key, path } => (format!("{key}.path"), path),
            ProfileFile::Service { key, path }
            | ProfileFile::Model { key, path }
            | ProfileFile::Operators { key, path, .. }
            | ProfileFile::AllReduce { key, path, .. } => (key.clone(), path),
        }
    }
}

/// `scenario` as TOML ([`Scenario::to_toml_string`]) for a file written in `dir`: every relative
/// path its pools name (service and step profiles, a model's `config.json`, operator and
/// all-reduce tables) is rewritten to lead from `dir` to the same file, so that a scenario
/// `capsim fit` writes elsewhere still finds them. Absolute paths are kept; a path that cannot
/// be made relative (another drive) is written absolute.
pub fn toml_for_folder(scenario: &Scenario, dir: &Path) -> Result<String, ScenarioError> {
    let Some(base) = scenario.base_dir() else {
        return Ok(scenario.to_toml_string());
    };
    let from = absolute(dir);
    // Only the text is used: the copy would resolve the new paths against the old folder.
    let mut moved = scenario.clone();
    let mut seen = BTreeSet::new();
    for file in profile_files(scenario) {
        let (key, resolved) = file.path_key();
        let written = resolved.strip_prefix(base).unwrap_or(resolved);
        if written.is_absolute() || !seen.insert(key.clone()) {
            continue;
        }
        let target = absolute(resolved);
        let path = relative_path(&from, &target).unwrap_or(target);
        let value = toml::Value::String(path.to_string_lossy().into_owned()).to_string();
        moved.set(&key, &value)?;
    }
    Ok(moved.to_toml_string())
}

/// [`toml_for_folder`] for the file at `path`: its folder, the working one when it names none.
pub fn toml_for_file(scenario: &Scenario, path: &Path) -> Result<String, ScenarioError> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    toml_for_folder(scenario, dir.unwrap_or(Path::new(".")))
}

/// `path` canonical when it exists, else made absolute against the working folder.
fn absolute(path: &Path) -> PathBuf {
    path.canonicalize()
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

/// The path from the folder `from` to `to`, both absolute: `..` for each of `from`'s
/// components past their common prefix, then the rest of `to`; `None` when they share no root.
fn relative_path(from: &Path, to: &Path) -> Option<PathBuf> {
    let (from, to): (Vec<_>, Vec<_>) = (from.components().collect(), to.components().collect());
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    if common == 0 {
        return None;
    }
    let mut path: PathBuf = from[common..].iter().map(|_| "..").collect();
    path.extend(&to[common..]);
    Some(path)
}

impl Profiles {
    /// Reads every profile `scenario` names that is not cached yet. An unreadable or invalid
    /// file is an error naming the key and the file.
    pub fn load(&mut self, scenario: &Scenario) -> Result<(), ScenarioError> {
        for file in profile_files(scenario) {
            match file {
                ProfileFile::Service { key, path } => {
                    if !self.services.contains_key(&path) {
                        let model = ProfileServiceTime::from_file(&path)
                            .map_err(|e| invalid(&key, e.to_string()))?;
                        self.files_read += 1;
                        self.services.insert(path, Arc::new(model));
                    }
                }
                ProfileFile::Step { key, path } => {
                    if !self.steps.contains_key(&path) {
                        let model = ProfileStepTime::from_file(&path).map_err(|source| {
                            let path = path.clone();
                            invalid(&key, StepTimeError::Profile { path, source }.to_string())
                        })?;
                        self.files_read += 1;
                        self.steps.insert(path, Arc::new(model));
                    }
                }
                ProfileFile::Model { key, path } => {
                    if !self.models.contains_key(&path) {
                        let model =
                            ModelConfig::load(&path).map_err(|e| invalid(&key, e.to_string()))?;
                        self.files_read += 1;
                        self.models.insert(path, Arc::new(model));
                    }
                }
                ProfileFile::Operators {
                    key,
                    path,
                    tensor_parallel,
                } => {
                    let slot = (path, tensor_parallel);
                    if !self.operator_tables.contains_key(&slot) {
                        let table = OperatorTable::load(&slot.0, tensor_parallel)
                            .map_err(|e| invalid(&key, e.to_string()))?;
                        self.files_read += 1;
                        self.operator_tables.insert(slot, Arc::new(table));
                    }
                }
                ProfileFile::AllReduce { key, path, workers } => {
                    let slot = (path, workers);
                    if !self.all_reduces.contains_key(&slot) {
                        let curve = read_all_reduce(&slot.0, workers)
                            .map_err(|e| invalid(&key, e.to_string()))?;
                        self.files_read += 1;
                        self.all_reduces.insert(slot, curve);
                    }
                }
            }
        }
        Ok(())
    }

    /// How many profile and model config files this cache has read.
    pub fn files_read(&self) -> u64 {
        self.files_read
    }

    /// The model config read from `path` (as resolved against the scenario's folder), when
    /// loaded.
    pub fn model_config(&self, path: &Path) -> Option<&Arc<ModelConfig>> {
        self.models.get(path)
    }

    /// Builds `scenario`'s models from this cache, reading nothing: a profile not loaded (see
    /// [`Profiles::load`]) is an error naming its key and file.
    pub fn build(&self, scenario: &Scenario) -> Result<BuiltScenario, ScenarioError> {
        let mut pools = Vec::with_capacity(scenario.pools().len());
        for (index, pool) in scenario.pools().iter().enumerate() {
            let prefix = scenario.key_prefix(index);
            let key = |k: &str| format!("{prefix}{k}");
            let scale = pool.execution.time_scale;
            let service = match &pool.service_spec {
                None => None,
                Some(spec) => {
                    let service = match spec {
                        ServiceSpec::Profile { path } => {
                            let path = service_profile_path(scenario.base_dir(), path);
                            let model = self
                                .services
                                .get(&path)
                                .ok_or_else(|| not_loaded(&key("service.path"), &path))?;
                            Arc::clone(model) as Arc<dyn ServiceTime>
                        }
                        _ => analytic_service(&key, spec)?,
                    };
                    Some(if scale == 1.0 {
                        service
                    } else {
                        let scaled = ScaledService::new(service, scale).ok_or_else(|| {
                            invalid(&key("execution.time_scale"), "must be above 0")
                        })?;
                        Arc::new(scaled) as Arc<dyn ServiceTime>
                    })
                }
            };
            let step_time = match pool.llm.as_ref().map(|l| &l.step_time_spec) {
                None => None,
                Some(spec) => {
                    let model = match spec {
                        StepTimeSpec::Profile { path, .. } => {
                            let path = step_profile_path(scenario.base_dir(), path);
                            let model = self
                                .steps
                                .get(&path)
                                .ok_or_else(|| not_loaded(&key("step_time"), &path))?;
                            spec.check_measured_on(&model.measured_device(), &path)
                                .map_err(|e| invalid(&key("step_time.hardware"), e.to_string()))?;
                            Arc::clone(model) as Arc<dyn StepTime>
                        }
                        StepTimeSpec::Operators(operators) => {
                            self.operator_step_time(scenario, &key, spec, operators)?
                        }
                        StepTimeSpec::Roofline(roofline)
                            if spec.model_file().is_some() || roofline.all_reduce.is_some() =>
                        {
                            let sized = match spec.model_file() {
                                Some(_) => {
                                    roofline.resolve_with(self.model_of(scenario, &key, spec)?)
                                }
                                None => roofline.resolve(),
                            };
                            let sized = sized
                                .and_then(|s| s.fitting())
                                .map_err(|e| invalid(&key("step_time"), e.to_string()))?;
                            self.roofline_step_time(scenario, &key, roofline, sized.roofline)?
                        }
                        _ => spec
                            .analytic()
                            .map_err(|e| invalid(&key("step_time"), e.to_string()))?
                            .ok_or_else(|| invalid(&key("step_time"), "is not analytic"))?,
                    };
                    Some(if scale == 1.0 {
                        model
                    } else {
                        Arc::new(ScaledStepTime::new(model, scale)) as Arc<dyn StepTime>
                    })
                }
            };
            pools.push(PoolModels { service, step_time });
        }
        Ok(BuiltScenario {
            scenario: self.with_kv_blocks(scenario)?,
            pools,
        })
    }

    /// The `kind = "operators"` step time of `spec` from the loaded table, model and all-reduce.
    fn operator_step_time(
        &self,
        scenario: &Scenario,
        key: &dyn Fn(&str) -> String,
        spec: &StepTimeSpec,
        operators: &OperatorsSpec,
    ) -> Result<Arc<dyn StepTime>, ScenarioError> {
        let base = scenario.base_dir();
        let tensor_parallel = operators.tensor_parallel();
        let slot = (step_profile_path(base, &operators.profile), tensor_parallel);
        let table = self
            .operator_tables
            .get(&slot)
            .ok_or_else(|| not_loaded(&key("step_time.profile"), &slot.0))?;
        spec.check_measured_on(&table.gpu, &table.source)
            .map_err(|e| invalid(&key("step_time.hardware"), e.to_string()))?;
        let model = match operators
            .model_source()
            .map_err(|e| invalid(&key("step_time.model"), e.to_string()))?
        {
            ModelSource::Preset(config) => *config,
            ModelSource::File(_) => self.model_of(scenario, key, spec)?.clone(),
        };
        let all_reduce = match &operators.all_reduce {
            None => None,
            Some(path) => {
                let slot = (step_profile_path(base, path), tensor_parallel);
                let curve = self
                    .all_reduces
                    .get(&slot)
                    .ok_or_else(|| not_loaded(&key("step_time.all_reduce"), &slot.0))?;
                Some(curve.clone())
            }
        };
        let model = OperatorStepTime::new(
            Arc::clone(table),
            &model,
            all_reduce,
            operators.expert_parallel.unwrap_or(1),
        )
        .map_err(|e| invalid(&key("step_time"), e.to_string()))?;
        Ok(Arc::new(model))
    }

    /// A roofline's step time: with `tensor_parallel > 1` and an all-reduce table, the
    /// roofline plus its all-reduces from the loaded table; else the roofline alone.
    fn roofline_step_time(
        &self,
        scenario: &Scenario,
        key: &dyn Fn(&str) -> String,
        spec: &RooflineSpec,
        roofline: Roofline,
    ) -> Result<Arc<dyn StepTime>, ScenarioError> {
        let Some(path) = spec
            .all_reduce
            .as_ref()
            .filter(|_| roofline.tensor_parallel > 1)
        else {
            return Ok(Arc::new(roofline));
        };
        let slot = (
            step_profile_path(scenario.base_dir(), path),
            roofline.tensor_parallel,
        );
        let all_reduce = self
            .all_reduces
            .get(&slot)
            .ok_or_else(|| not_loaded(&key("step_time.all_reduce"), &slot.0))?
            .clone();
        Ok(Arc::new(TensorParallelRoofline {
            roofline,
            all_reduce,
        }))
    }

    /// The loaded config of the model file `spec` names, or an error naming the key and file.
    fn model_of(
        &self,
        scenario: &Scenario,
        key: &dyn Fn(&str) -> String,
        spec: &StepTimeSpec,
    ) -> Result<&ModelConfig, ScenarioError> {
        let written = spec
            .model_file()
            .ok_or_else(|| invalid(&key("step_time.model"), "names no config file"))?;
        let path = step_profile_path(scenario.base_dir(), written);
        self.models
            .get(&path)
            .map(|c| c.as_ref())
            .ok_or_else(|| not_loaded(&key("step_time.model"), &path))
    }

    /// `scenario` with the KV blocks of every pool whose count comes from its model config file
    /// filled in (see [`crate::scenario::LlmPool::num_gpu_blocks_from_model`]).
    fn with_kv_blocks(&self, scenario: &Scenario) -> Result<Scenario, ScenarioError> {
        let mut built = scenario.clone();
        for (index, pool) in built.pools_mut().iter_mut().enumerate() {
            let Some(llm) = pool.llm.as_mut().filter(|l| l.num_gpu_blocks_from_model) else {
                continue;
            };
            let prefix = scenario.key_prefix(index);
            let key = |k: &str| format!("{prefix}{k}");
            let StepTimeSpec::Roofline(roofline) = &llm.step_time_spec else {
                return Err(invalid(&key("step_time"), "names no model config file"));
            };
            let config = self.model_of(scenario, &key, &llm.step_time_spec)?;
            let tokens = roofline
                .resolve_with(config)
                .map_err(|e| invalid(&key("step_time"), e.to_string()))?
                .kv_capacity_tokens();
            let blocks = kv_blocks_of(
                &key("kv_cache.num_gpu_blocks"),
                tokens,
                llm.scheduler.block_size,
            )?;
            llm.scheduler.num_gpu_blocks = blocks;
        }
        Ok(built)
    }
}

/// Loads into `profiles` what `scenario` needs, then builds it.
pub fn build(scenario: &Scenario, profiles: &mut Profiles) -> Result<BuiltScenario, ScenarioError> {
    profiles.load(scenario)?;
    profiles.build(scenario)
}

fn not_loaded(key: &str, path: &Path) -> ScenarioError {
    invalid(
        key,
        format!(
            "{} was not loaded before the build (Profiles::load reads it)",
            path.display()
        ),
    )
}

/// A service model that needs no file (`profile` is built from the cache).
fn analytic_service(
    key: &dyn Fn(&str) -> String,
    spec: &ServiceSpec,
) -> Result<Arc<dyn ServiceTime>, ScenarioError> {
    Ok(match spec {
        ServiceSpec::Constant { time, residuals } => Arc::new(ConstantService {
            time_ns: time.0,
            residuals: residuals_of(&key("service.residuals"), residuals)?,
        }),
        ServiceSpec::Exponential { mean } => {
            if mean.0 == 0 {
                return Err(invalid(&key("service.mean"), "must be above 0"));
            }
            Arc::new(ExponentialService {
                mean_ns: mean.0 as f64,
            })
        }
        ServiceSpec::Affine {
            a,
            b,
            c,
            d,
            size_factors,
            residuals,
        } => Arc::new(AffineService {
            a_ns: a.0 as f64,
            b_ns: b.0 as f64,
            c_ns: c.0 as f64,
            d_ns: d.0 as f64,
            size_factors: size_factors_of(&key("service.size_factors"), size_factors)?,
            residuals: residuals_of(&key("service.residuals"), residuals)?,
        }),
        ServiceSpec::Profile { .. } => unreachable!("a profile is built from the cache"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::step_time::StepBatch;

    const STEPS: &str = "[batcher]\nkind = \"continuous\"\n[kv_cache]\nnum_gpu_blocks = 100\n[step_time]\nkind = \"profile\"\npath = \"steps.json\"\n";

    fn steps_scenario(dir: &Path) -> Scenario {
        crate::timing::step_profile::tests::synthetic()
            .write(&dir.join("steps.json"))
            .unwrap();
        std::fs::write(dir.join("s.toml"), STEPS).unwrap();
        Scenario::from_path(&dir.join("s.toml")).unwrap()
    }

    #[test]
    fn a_step_profile_is_read_beside_the_scenario_once_for_every_build() {
        let dir = tempfile::tempdir().unwrap();
        let scenario = steps_scenario(dir.path());
        let mut profiles = Profiles::default();
        let built = build(&scenario, &mut profiles).unwrap();
        let step = StepBatch {
            decode_seqs: 4,
            decode_kv_tokens: 4 * 256,
            ..StepBatch::default()
        };
        let model = built.pools[0].step_time.as_ref().unwrap();
        assert_eq!(model.mean_ns(&step), 2e6 + 4e5 + 1024.0);
        let mut larger = scenario.clone();
        larger.set("instances", "4").unwrap();
        larger.set("batcher.max_num_seqs", "8").unwrap();
        build(&larger, &mut profiles).unwrap();
        profiles.build(&scenario).unwrap();
        assert_eq!(profiles.files_read(), 1, "one file, read once");
    }

    #[test]
    fn a_scenario_written_to_another_folder_leads_there_to_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let away = dir.path().join("fitted").join("run");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&away).unwrap();
        let scenario = steps_scenario(&home);
        let text = toml_for_folder(&scenario, &away).unwrap();
        assert!(text.contains("path = \"../../home/steps.json\""), "{text}");
        std::fs::write(away.join("s.toml"), &text).unwrap();
        let moved = Scenario::from_path(&away.join("s.toml")).unwrap();
        build(&moved, &mut Profiles::default()).expect("the moved scenario finds its profile");
        // From its own folder nothing changes; without a folder there is nothing to rewrite.
        let same = toml_for_folder(&scenario, &home).unwrap();
        assert!(same.contains("path = \"steps.json\""), "{same}");
        let text_only = Scenario::from_toml_str(STEPS).unwrap();
        assert_eq!(
            toml_for_folder(&text_only, &away).unwrap(),
            text_only.to_toml_string()
        );
    }

    #[test]
    fn relative_paths_climb_to_the_common_folder() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            relative_path(&p("/a/b/c"), &p("/a/d/e.json")),
            Some(p("../../d/e.json"))
        );
        assert_eq!(relative_path(&p("/a"), &p("/a/x")), Some(p("x")));
        assert_eq!(relative_path(&p("/"), &p("/x")), Some(p("x")));
    }

    #[test]
    fn a_step_profiles_device_must_be_the_hardware_the_step_time_names() {
        let dir = tempfile::tempdir().unwrap();
        let mut scenario = steps_scenario(dir.path());
        scenario.set("step_time.hardware", "h200").unwrap();
        // The synthetic profile was measured on the CPU.
        let e = build(&scenario, &mut Profiles::default())
            .map(|_| ())
            .unwrap_err()
            .to_string();
        for part in [
            "step_time.hardware",
            "\"h200\"",
            "steps.json",
            "the CPU (test)",
        ] {
            assert!(e.contains(part), "{part:?} not in {e}");
        }
        let mut on_h200 = crate::timing::step_profile::tests::synthetic();
        on_h200.environment.execution_provider = "cuda".into();
        on_h200.environment.device_name = "NVIDIA H200".into();
        on_h200.write(&dir.path().join("steps.json")).unwrap();
        build(&scenario, &mut Profiles::default()).unwrap();
        scenario.set("step_time.hardware", "b200").unwrap();
        let e = build(&scenario, &mut Profiles::default())
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("measured on NVIDIA H200 (the catalogue's \"h200\")"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_step_profile_is_an_error_of_the_build_naming_the_key_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let scenario = steps_scenario(dir.path());
        std::fs::remove_file(dir.path().join("steps.json")).unwrap();
        let e = build(&scenario, &mut Profiles::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`step_time`") && e.contains("step_time.path") && e.contains("steps.json"),
            "{e}"
        );
        let e = Profiles::default()
            .build(&scenario)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not loaded") && e.contains("steps.json"), "{e}");
    }
}

#[cfg(test)]
mod model_file_tests {
    use super::*;
    use crate::timing::step_time::StepBatch;

    const MIXTRAL: &str = "models/mistralai/Mixtral-8x7B-v0.1.json";

    /// A scenario in `dir` whose roofline names `model`, with the shipped Mixtral config copied
    /// to `dir/models/...`.
    fn scenario_in(dir: &Path, model: &str, extra: &str) -> Scenario {
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(MIXTRAL);
        let copy = dir.join(MIXTRAL);
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        std::fs::copy(shipped, copy).unwrap();
        let text = format!(
            "[batcher]\nkind = \"continuous\"\n{extra}[step_time]\nkind = \"roofline\"\n\
             model = \"{model}\"\nhardware = \"h200\"\ntensor_parallel = 2\n"
        );
        std::fs::write(dir.join("s.toml"), text).unwrap();
        Scenario::from_path(&dir.join("s.toml")).unwrap()
    }

    #[test]
    fn a_relative_model_path_is_read_beside_the_scenario_and_sizes_the_kv_cache() {
        let dir = tempfile::tempdir().unwrap();
        let scenario = scenario_in(dir.path(), MIXTRAL, "");
        let llm = scenario.pools()[0].llm.as_ref().unwrap();
        assert!(llm.num_gpu_blocks_from_model);
        let mut profiles = Profiles::default();
        let built = build(&scenario, &mut profiles).unwrap();
        let by_name = Scenario::from_toml_str(
            "[batcher]\nkind = \"continuous\"\n[step_time]\nkind = \"roofline\"\n\
             model = \"mixtral-8x7b\"\nhardware = \"h200\"\ntensor_parallel = 2\n",
        )
        .unwrap();
        let expected = by_name.pools()[0].llm.as_ref().unwrap();
        let got = built.scenario.pools()[0].llm.as_ref().unwrap();
        assert_eq!(
            got.scheduler.num_gpu_blocks,
            expected.scheduler.num_gpu_blocks
        );
        assert!(
            got.scheduler.num_gpu_blocks > 1000,
            "{}",
            got.scheduler.num_gpu_blocks
        );
        let step = StepBatch {
            decode_seqs: 8,
            decode_kv_tokens: 8000,
            ..StepBatch::default()
        };
        let expected_model = build(&by_name, &mut Profiles::default()).unwrap();
        assert_eq!(
            built.pools[0].step_time.as_ref().unwrap().mean_ns(&step),
            expected_model.pools[0]
                .step_time
                .as_ref()
                .unwrap()
                .mean_ns(&step)
        );
        let mut larger = scenario.clone();
        larger.set("step_time.tensor_parallel", "4").unwrap();
        let built4 = build(&larger, &mut profiles).unwrap();
        let blocks4 = built4.scenario.pools()[0]
            .llm
            .as_ref()
            .unwrap()
            .scheduler
            .num_gpu_blocks;
        assert!(blocks4 > 2 * got.scheduler.num_gpu_blocks, "{blocks4}");
        assert_eq!(profiles.files_read(), 1, "one config, read once");
        let given = scenario_in(dir.path(), MIXTRAL, "[kv_cache]\nnum_gpu_blocks = 77\n");
        let built = build(&given, &mut profiles).unwrap();
        assert_eq!(
            built.scenario.pools()[0]
                .llm
                .as_ref()
                .unwrap()
                .scheduler
                .num_gpu_blocks,
            77
        );
    }

    #[test]
    fn a_missing_or_bad_model_config_is_an_error_naming_the_key_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = scenario_in(dir.path(), "models/nowhere.json", "");
        let e = build(&missing, &mut Profiles::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`step_time.model`") && e.contains("nowhere.json"),
            "{e}"
        );
        std::fs::write(dir.path().join("bad.json"), "{\"num_hidden_layers\": 0}").unwrap();
        let bad = scenario_in(dir.path(), "bad.json", "");
        let e = build(&bad, &mut Profiles::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`step_time.model`")
                && e.contains("bad.json")
                && e.contains("\"num_hidden_layers\" = 0"),
            "{e}"
        );
        let e = Profiles::default().build(&bad).unwrap_err().to_string();
        assert!(e.contains("not loaded") && e.contains("bad.json"), "{e}");
        // Too big for its GPUs: an error of the build, with the fix.
        let tp1 = Scenario::from_toml_str(&format!(
            "[batcher]\nkind = \"continuous\"\n[step_time]\nkind = \"roofline\"\n\
             model = \"{}\"\nhardware = \"h100\"\n",
            dir.path().join(MIXTRAL).display()
        ))
        .unwrap();
        let e = build(&tp1, &mut Profiles::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("leave no KV-cache room") && e.contains("tensor_parallel"),
            "{e}"
        );
    }
}

/// The engine's entry points for a scenario that reads no profile, built first: the unit tests
/// of the engine and its stages write scenarios inline and run them as they are.
#[cfg(test)]
pub(crate) mod scenario_runs {
    use capsim_trace::Trace;

    use super::{Profiles, build};
    use crate::record::{RecordSink, RequestLog};
    use crate::{Run, RunOptions, Scenario, SimError, Summary};

    fn built(scenario: &Scenario) -> super::BuiltScenario {
        build(scenario, &mut Profiles::default()).expect("the scenario builds")
    }

    pub(crate) fn simulate(
        scenario: &Scenario,
        trace: &Trace,
        options: &RunOptions,
    ) -> Result<Summary, SimError> {
        crate::simulate(&built(scenario), trace, options)
    }

    pub(crate) fn simulate_with_requests(
        scenario: &Scenario,
        trace: &Trace,
        options: &RunOptions,
    ) -> Result<(Run, RequestLog), SimError> {
        crate::simulate_with_requests(&built(scenario), trace, options)
    }

    pub(crate) fn run_with_sink<S: RecordSink>(
        scenario: &Scenario,
        trace: &Trace,
        options: &RunOptions,
        sink: &mut S,
    ) -> Result<Run, SimError> {
        crate::run_with_sink(&built(scenario), trace, options, sink)
    }
}

#[cfg(test)]
mod operators_tests {
    use super::*;
    use crate::timing::step_time::StepBatch;

    /// The shipped profiles folder, absolute.
    fn profiles() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/profiles")
    }

    /// A continuous-batching scenario whose `[step_time]` is `step_time` (TOML body).
    fn scenario(step_time: &str) -> Scenario {
        Scenario::from_toml_str(&format!(
            "[batcher]\nkind = \"continuous\"\n[kv_cache]\nnum_gpu_blocks = 1000\n\
             [step_time]\nkind = \"operators\"\n{step_time}"
        ))
        .unwrap()
    }

    fn qwen(extra: &str) -> String {
        format!(
            "profile = \"{}\"\nmodel = \"qwen3-32b\"\n{extra}",
            profiles()
                .join("llmservingsim/RTXPRO6000/Qwen/Qwen3-32B/bf16")
                .display()
        )
    }

    fn build_error(step_time: &str) -> String {
        build(&scenario(step_time), &mut Profiles::default())
            .map(|_| ())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_shipped_bundle_builds_a_step_time_and_tp2_adds_its_all_reduces() {
        let all_reduce = profiles().join("rtxpro6000-2gpu-pcie.all_reduce.csv");
        let mut cache = Profiles::default();
        let tp1 = build(&scenario(&qwen("")), &mut cache).unwrap();
        let tp2 = build(
            &scenario(&qwen(&format!(
                "tensor_parallel = 2\nall_reduce = \"{}\"\n",
                all_reduce.display()
            ))),
            &mut cache,
        )
        .unwrap();
        let step = StepBatch {
            decode_seqs: 64,
            decode_kv_tokens: 64 * 1000,
            decode_kv_max: 1000,
            ..StepBatch::default()
        };
        let t1 = tp1.pools[0].step_time.as_ref().unwrap().mean_ns(&step);
        let t2 = tp2.pools[0].step_time.as_ref().unwrap().mean_ns(&step);
        // Qwen3-32B's 64-sequence decode: tens of ms on one card, less per rank on two but not
        // half, the all-reduces of 64 x 5120 x 2 bytes (about 30 us each, 128 of them) added.
        assert!((20e6..80e6).contains(&t1), "tp1 {t1} ns");
        assert!(t2 < t1 && t2 > 0.5 * t1, "tp2 {t2} ns against tp1 {t1} ns");
        assert_eq!(
            cache.files_read(),
            3,
            "two degrees of one bundle and one all-reduce file"
        );
    }

    #[test]
    fn a_bundle_builds_on_the_gpu_it_was_measured_on_and_is_refused_on_another() {
        for name in [
            "rtx-pro-6000",
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        ] {
            let s = scenario(&qwen(&format!("hardware = \"{name}\"\n")));
            build(&s, &mut Profiles::default()).unwrap();
        }
        let e = build_error(&qwen("hardware = \"h100\"\n"));
        for part in [
            "step_time.hardware",
            "\"h100-sxm\" (NVIDIA H100 SXM5 80 GB)",
            "measured on NVIDIA RTX PRO 6000 Blackwell Server Edition (the catalogue's \"rtx-pro-6000\")",
            "Qwen3-32B",
        ] {
            assert!(e.contains(part), "{part:?} not in {e}");
        }
    }

    #[test]
    fn bad_operator_specs_name_the_key_and_what_to_give() {
        let cases = [
            (qwen("tensor_parallel = 2\n"), "step_time.all_reduce"),
            (qwen("tensor_parallel = 4\n"), "tp_degrees: 1, 2"),
            (
                "profile = \"no/such/folder\"\nmodel = \"qwen3-32b\"\n".to_string(),
                "step_time.profile",
            ),
            (qwen("").replace("qwen3-32b", "gpt-9"), "step_time.model"),
        ];
        for (body, expected) in cases {
            let e = if body.contains("gpt-9") {
                Scenario::from_toml_str(&format!(
                    "[batcher]\nkind = \"continuous\"\n[kv_cache]\nnum_gpu_blocks = 1000\n\
                     [step_time]\nkind = \"operators\"\n{body}"
                ))
                .map(|_| ())
                .unwrap_err()
                .to_string()
            } else {
                build_error(&body)
            };
            assert!(
                e.contains(expected),
                "for {body:?}: expected {expected:?} in {e}"
            );
        }
        // A model file does not tell an operator table the GPU memory: the KV blocks are asked for.
        let e = Scenario::from_toml_str(
            "[batcher]\nkind = \"continuous\"\n[step_time]\nkind = \"operators\"\n\
             profile = \"x\"\nmodel = \"models/Qwen/Qwen3-32B.json\"\n",
        )
        .map(|_| ())
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("key `kv_cache.num_gpu_blocks`: is needed"),
            "{e}"
        );
        let e = Scenario::from_toml_str(
            "[batcher]\nkind = \"continuous\"\n[kv_cache]\nnum_gpu_blocks = 10\n\
             [step_time]\nkind = \"operators\"\nprofile = \"x\"\nmodel = \"qwen3-32b\"\ntensor_parallel = 0\n",
        )
        .map(|_| ())
        .unwrap_err()
        .to_string();
        assert!(e.contains("tensor_parallel = 0"), "{e}");
    }
}
