//! Scenarios: the serving system to simulate, written in TOML.
//!
//! A scenario describes the path of a request (client network, gateway, pre-processing, instance
//! queue, dynamic batcher, model execution, post-processing) and how load is offered. Durations,
//! rates, bandwidths and sizes are human strings with units (`"5ms"`, `"120rps"`, `"10Gbps"`,
//! `"4KiB"`), parsed once when the scenario is read. Every key, its unit and its default is
//! documented in `docs/scenario.md`.
//!
//! A scenario is plain data: the file as written (with `set` overrides) and its validated
//! tables. It reads no profile and builds no model; [`crate::build`] does both.
//!
//! ```
//! use capsim_sim::Scenario;
//! let mut s = Scenario::from_toml_str(r#"
//!     instances = 2
//!     [batcher]
//!     max_batch_size = 8
//!     max_queue_delay = "2ms"
//!     [service]
//!     kind = "constant"
//!     time = "5ms"
//! "#).unwrap();
//! s.set("batcher.max_batch_size", "16").unwrap();
//! assert_eq!(s.pools()[0].batcher.max_batch_size, 16);
//! ```

mod file;
mod pool;
mod replay;
mod suggest;

use std::path::{Path, PathBuf};

pub use file::{
    BatcherKind, BatcherSpec, CacheSpec, ContinuousKeys, ExecutionSpec, GatewaySpec, HostSpec,
    KvCacheSpec, LatencySpec, LoadBalancing, LoadMode, LoadSpec, NetworkSpec, PauseSpec, PoolFile,
    PostprocessSpec, PreprocessSpec, QueueSpec, RetryOn, RetrySpec, ServiceSpec, SloSpec,
    SlowdownSpec, StandbySpec, TimeoutAction, TimeseriesSpec,
};
pub use pool::{LlmPool, MAX_MODEL_INSTANCES, MAX_SERVERS, Pool};
pub use replay::{REPLAY_KEYS, ReplayInputs};

use crate::quantity::DurationNs;
use crate::timeseries::MAX_ROWS_LIMIT;
use file::ScenarioFile;
use pool::{check_size, validate_pool};
pub(crate) use pool::{kv_blocks_of, residuals_of, size_factors_of};

/// Why a scenario could not be read or changed. Messages name the file or key and quote the value.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The TOML is malformed, has an unknown key, or a value of the wrong type or unit.
    #[error("invalid scenario{}: {message}", origin.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    Parse {
        /// The file, when read from one.
        origin: Option<PathBuf>,
        /// The TOML parser's message, which shows the line and key.
        message: String,
    },
    /// A value parsed but is out of range or inconsistent with another.
    #[error("invalid scenario: key `{key}`: {message}")]
    Invalid {
        /// Dotted path of the offending key.
        key: String,
        /// What is wrong and what would fix it.
        message: String,
    },
    /// An override (`key=value`) could not be applied.
    #[error("cannot set `{key}` to {value:?}: {message}")]
    Override {
        /// Dotted path given.
        key: String,
        /// Value given.
        value: String,
        /// What is wrong.
        message: String,
    },
}

/// A validated scenario. Build with [`Scenario::from_toml_str`] or [`Scenario::from_path`]; change
/// one key with [`Scenario::set`].
#[derive(Debug, Clone)]
pub struct Scenario {
    raw: toml::Table,
    origin: Option<PathBuf>,
    /// Scenario name (the file stem when not given).
    pub name: String,
    /// Free text.
    pub description: Option<String>,
    /// How load is offered.
    pub load: LoadSpec,
    /// Client network.
    pub network: NetworkSpec,
    /// Gateway.
    pub gateway: GatewaySpec,
    /// Result cache.
    pub cache: CacheSpec,
    /// Client retries.
    pub retry: RetrySpec,
    /// Service-level objective.
    pub slo: Option<SloSpec>,
    /// Timeseries sampling.
    pub timeseries: TimeseriesSpec,
    pools: Vec<Pool>,
    notes: Vec<String>,
}

impl Scenario {
    /// Parses and validates a scenario from TOML text.
    pub fn from_toml_str(text: &str) -> Result<Scenario, ScenarioError> {
        let raw: toml::Table = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            origin: None,
            message: e.to_string(),
        })?;
        Scenario::from_table(raw, None)
    }

    /// Reads, parses and validates a scenario file.
    pub fn from_path(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let raw: toml::Table = toml::from_str(&text).map_err(|e| ScenarioError::Parse {
            origin: Some(path.to_path_buf()),
            message: e.to_string(),
        })?;
        let mut s = Scenario::from_table(raw, Some(path.to_path_buf()))?;
        if s.raw.get("name").is_none()
            && let Some(stem) = path.file_stem()
        {
            s.name = stem.to_string_lossy().into_owned();
        }
        Ok(s)
    }

    fn from_table(raw: toml::Table, origin: Option<PathBuf>) -> Result<Scenario, ScenarioError> {
        refuse_replay_inputs(&raw)?;
        let file: ScenarioFile =
            raw.clone()
                .try_into()
                .map_err(|e: toml::de::Error| ScenarioError::Parse {
                    origin: origin.clone(),
                    message: suggest::with_suggestion(&e.to_string()),
                })?;
        let default_pool = PoolFile {
            models: Vec::new(),
            classes: Vec::new(),
            instances: file.instances,
            max_input_tokens: file.max_input_tokens,
            max_output_tokens: file.max_output_tokens,
            standby: file.standby,
            preprocess: file.preprocess,
            host: file.host,
            queue: file.queue,
            batcher: file.batcher,
            execution: file.execution,
            service: file.service,
            kv_cache: file.kv_cache,
            step_time: file.step_time,
            postprocess: file.postprocess,
        };
        let mut pools = vec![validate_pool("default", "", default_pool)?];
        for (name, pool) in file.pools {
            let prefix = format!("pools.{name}.");
            pools.push(validate_pool(&name, &prefix, pool)?);
        }
        check_size(&pools)?;
        validate_network(&file.network)?;
        check_front(&file.gateway, &file.cache, &file.retry, &file.load)?;
        validate_client_timeout(&file.load, &pools)?;
        check_slo_and_timeseries(file.slo.as_ref(), &file.timeseries, &pools)?;
        Ok(Scenario {
            raw,
            origin,
            name: file.name.unwrap_or_else(|| "scenario".to_string()),
            description: file.description,
            load: file.load,
            network: file.network,
            gateway: file.gateway,
            cache: file.cache,
            retry: file.retry,
            slo: file.slo,
            timeseries: file.timeseries,
            pools,
            notes: Vec::new(),
        })
    }

    /// The folder a relative profile path (`service.path`, `step_time.path`) is resolved
    /// against: the scenario file's; `None` for a scenario read from text.
    pub fn base_dir(&self) -> Option<&Path> {
        self.origin.as_deref().and_then(Path::parent)
    }

    /// The key prefix of pool `index` of [`Scenario::pools`]: `""` for the default pool,
    /// `"pools.NAME."` for a named one.
    pub fn key_prefix(&self, index: usize) -> String {
        match index {
            0 => String::new(),
            _ => format!("pools.{}.", self.pools[index].name),
        }
    }

    /// The pools: `pools()[0]` is the default (top-level) pool, then named pools in name order.
    pub fn pools(&self) -> &[Pool] {
        &self.pools
    }

    /// The pools, for the build step to fill in what only files tell (the KV blocks a model
    /// config file sizes).
    pub(crate) fn pools_mut(&mut self) -> &mut [Pool] {
        &mut self.pools
    }

    /// Sets the key at dotted `path` (for example `batcher.max_batch_size` or `instances`) to
    /// `value`, written as in TOML (`8`, `"5ms"`, `[4, 8]`); a value that is not valid TOML is
    /// taken as a string, so `5ms` works unquoted. The whole scenario is validated again. A new
    /// `kind` for a table starts the table afresh (see [`Scenario::set_all`]).
    pub fn set(&mut self, path: &str, value: &str) -> Result<(), ScenarioError> {
        self.set_all(&[(path, value)]).map(|_notes| ())
    }

    /// Sets several keys as [`Scenario::set`] does, in order, and validates the scenario once
    /// after the last, so that a table can change kind together with the keys the new kind
    /// needs: `service.kind = profile` then `service.path = p.json` turns an affine `[service]`
    /// into a profile one. Setting a table's `kind` to a value other than the one written drops
    /// the table's other keys (they belong to the old kind); the notes returned name them. On
    /// error the scenario is unchanged.
    pub fn set_all(&mut self, overrides: &[(&str, &str)]) -> Result<Vec<String>, ScenarioError> {
        let mut raw = self.raw.clone();
        let mut notes = Vec::new();
        let mut kept = Vec::new();
        for (path, value) in overrides {
            let (switched, dropped) = set_raw(&mut raw, path, value)?;
            notes.extend(switched);
            kept.extend(dropped);
        }
        let mut next = Scenario::from_table(raw, self.origin.clone()).map_err(|e| {
            let (path, value) = overrides.last().copied().unwrap_or_default();
            let parts: Vec<&str> = path.split('.').collect();
            let e = suggest_full_path(e.to_string().trim_end(), &parts);
            let keys: Vec<String> = overrides.iter().map(|(k, _)| format!("`{k}`")).collect();
            let switched = if notes.is_empty() {
                String::new()
            } else {
                format!(
                    " ({}; set the new kind's keys in the same call)",
                    notes.join("; ")
                )
            };
            ScenarioError::Override {
                key: path.to_string(),
                value: value.to_string(),
                message: match keys.len() {
                    0 | 1 => format!("{e}{switched}"),
                    _ => format!("with {} set: {e}{switched}", keys.join(", ")),
                },
            }
        })?;
        if self.raw.get("name").is_none() && overrides.iter().all(|(k, _)| *k != "name") {
            next.name = self.name.clone();
        }
        let replay = &self.pools[0].replay;
        if !replay.is_empty() {
            pool::apply_replay(&mut next.pools[0], replay).map_err(|e| {
                let (path, value) = overrides.last().copied().unwrap_or_default();
                ScenarioError::Override {
                    key: path.to_string(),
                    value: value.to_string(),
                    message: format!("the replay inputs no longer fit: {e}"),
                }
            })?;
        }
        next.notes = self.notes.clone();
        next.notes.extend(kept);
        if !next.notes.is_empty() {
            let notes = next.notes.join("; ");
            next.description = Some(match next.description {
                Some(description) => format!("{description} (note: {notes})"),
                None => format!("note: {notes}"),
            });
        }
        *self = next;
        Ok(notes)
    }

    /// Drops the top-level table `name` (`host`, say) where it is written, and validates the
    /// scenario again; on error the scenario is unchanged.
    pub fn drop_table(&mut self, name: &str) -> Result<(), ScenarioError> {
        let mut next = self.clone();
        if next.raw.remove(name).is_none() {
            return Ok(());
        }
        next.set_all(&[])?;
        *self = next;
        Ok(())
    }

    /// Gives the default pool `inputs`, timings measured from the run a simulation replays
    /// (see [`ReplayInputs`]); they replace any given before and stay through later
    /// [`Scenario::set`] calls. On error (an input the pool cannot take, named `replay.KEY`) the
    /// scenario is unchanged.
    pub fn set_replay(&mut self, inputs: ReplayInputs) -> Result<(), ScenarioError> {
        pool::apply_replay(&mut self.pools[0], &inputs)
    }

    /// The default pool's replay inputs (empty unless [`Scenario::set_replay`] gave some).
    pub fn replay(&self) -> &ReplayInputs {
        &self.pools[0].replay
    }

    /// Serves the default pool with the calibrated profile at `path` (`capsim calibrate`'s
    /// output; absolute, or relative to the scenario's folder): `[service]` becomes
    /// `kind = "profile"` with that `path`, whatever its kind was. Returns the notes of
    /// [`Scenario::set_all`] (the old kind's keys dropped). The profile is not read here.
    pub fn set_service_profile(&mut self, path: &Path) -> Result<Vec<String>, ScenarioError> {
        let quoted = toml::Value::String(path.display().to_string()).to_string();
        self.set_all(&[("service.kind", "profile"), ("service.path", &quoted)])
    }

    /// What [`Scenario::set`] changed beyond the key it was given, one sentence each, in the
    /// order set: a `batcher.max_batch_size` below some `preferred_batch_size` drops those
    /// sizes. Empty for a scenario as read. The same notes end the scenario's description.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The value written at dotted `path` (the file as read, with overrides applied); `None`
    /// when the file does not set it (a default applies).
    pub fn get(&self, path: &str) -> Option<&toml::Value> {
        let (last, tables) = path
            .split('.')
            .collect::<Vec<_>>()
            .split_last()
            .map(|(l, t)| (*l, t.to_vec()))?;
        let mut table = &self.raw;
        for part in tables {
            table = table.get(part)?.as_table()?;
        }
        table.get(last)
    }

    /// The scenario as TOML (the file as read, with overrides applied).
    pub fn to_toml_string(&self) -> String {
        toml::to_string(&self.raw).unwrap_or_default()
    }
}

/// When `parts` sets a batcher's `max_batch_size` below some of the `preferred_batch_size` that
/// `batcher` (the table holding the key) lists, drops those sizes and says so. A grid over the
/// maximum would otherwise refuse every value below the file's largest preferred size.
fn drop_preferred_above_max(batcher: &mut toml::Table, parts: &[&str]) -> Option<String> {
    let [.., table, "max_batch_size"] = parts else {
        return None;
    };
    if *table != "batcher" {
        return None;
    }
    let max = batcher.get("max_batch_size")?.as_integer()?;
    let preferred = batcher.get("preferred_batch_size")?.as_array()?;
    let sizes: Vec<i64> = preferred
        .iter()
        .filter_map(toml::Value::as_integer)
        .collect();
    if sizes.len() != preferred.len() || sizes.iter().all(|&s| s <= max) {
        return None;
    }
    let kept: Vec<i64> = sizes.iter().copied().filter(|&s| s <= max).collect();
    let dropped: Vec<i64> = sizes.iter().copied().filter(|&s| s > max).collect();
    batcher.insert(
        "preferred_batch_size".to_string(),
        toml::Value::Array(kept.iter().map(|&s| toml::Value::Integer(s)).collect()),
    );
    let prefix = parts[..parts.len() - 1].join(".");
    Some(format!(
        "`{prefix}.max_batch_size` = {max} is below `{prefix}.preferred_batch_size` {sizes:?}: dropped {dropped:?}, leaving {kept:?}"
    ))
}

/// `message` with a "did you mean" for a misspelt part of the dotted key `parts` given as the
/// whole corrected key (`batcher.max_batch_size`, not `max_batch_size`).
fn suggest_full_path(message: &str, parts: &[&str]) -> String {
    let Some((unknown, suggested)) = suggest::suggestion_in(message) else {
        return message.to_string();
    };
    let Some(i) = parts.iter().rposition(|p| *p == unknown) else {
        return message.to_string();
    };
    let mut fixed: Vec<&str> = parts.to_vec();
    fixed[i] = suggested;
    let short = format!("did you mean `{suggested}`?");
    let full = format!("did you mean `{}`?", fixed.join("."));
    match message.rfind(&short) {
        Some(at) => format!("{}{full}{}", &message[..at], &message[at + short.len()..]),
        None => format!("{message}; {full}"),
    }
}

/// `load.client_timeout` is above 0, and no dynamic batcher that forms payloads ahead of a free
/// model instance (Triton's prefetching) serves a pool: a payload's requests cannot leave its
/// queue early, which a client timeout would ask of them.
fn validate_client_timeout(load: &LoadSpec, pools: &[Pool]) -> Result<(), ScenarioError> {
    let Some(timeout) = load.client_timeout else {
        return Ok(());
    };
    if timeout.0 == 0 {
        return Err(invalid(
            "load.client_timeout",
            "must be above 0 (leave it out for a client that waits forever)",
        ));
    }
    let prefetching = pools.iter().find(|p| {
        p.llm.is_none()
            && p.batcher.max_batch_size > 1
            && p.queue.allows_prefetch()
            && p.batcher.prefetch.unwrap_or(true)
    });
    if let Some(pool) = prefetching {
        let prefix = if pool.name == "default" {
            String::new()
        } else {
            format!("pools.{}.", pool.name)
        };
        return Err(invalid(
            "load.client_timeout",
            format!(
                "pool `{}`'s dynamic batcher prefetches payloads (Triton's default when the queue has no timeout, bound or priority levels), whose requests cannot leave the queue when their client gives up; set `{prefix}batcher.prefetch = false`",
                pool.name
            ),
        ));
    }
    Ok(())
}

/// Refuses replay inputs written as scenario keys, at the top level or in a pool: they belong
/// in a replay-inputs file.
fn refuse_replay_inputs(raw: &toml::Table) -> Result<(), ScenarioError> {
    if let Some(e) = replay::written_in_scenario(raw, "") {
        return Err(e);
    }
    if let Some(pools) = raw.get("pools").and_then(toml::Value::as_table) {
        for (name, pool) in pools {
            if let Some(e) = pool
                .as_table()
                .and_then(|t| replay::written_in_scenario(t, &format!("pools.{name}.")))
            {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Checks the gateway's limits, the cache's hit probability, the retry policy and the
/// closed-loop concurrency.
fn check_front(
    gateway: &GatewaySpec,
    cache: &CacheSpec,
    retry: &RetrySpec,
    load: &LoadSpec,
) -> Result<(), ScenarioError> {
    if let Some(rate) = gateway.rate_limit
        && rate.0 <= 0.0
    {
        return Err(invalid("gateway.rate_limit", "must be above 0rps"));
    }
    if gateway.burst == Some(0) {
        return Err(invalid("gateway.burst", "must be at least 1"));
    }
    if gateway.max_in_flight == Some(0) {
        return Err(invalid("gateway.max_in_flight", "must be at least 1"));
    }
    if !(0.0..=1.0).contains(&cache.hit_probability) {
        return Err(invalid(
            "cache.hit_probability",
            format!("{} is not a probability in [0, 1]", cache.hit_probability),
        ));
    }
    if retry.max_attempts == 0 || retry.max_attempts > 100 {
        return Err(invalid("retry.max_attempts", "must be between 1 and 100"));
    }
    if !(retry.backoff_multiplier.is_finite() && retry.backoff_multiplier >= 1.0) {
        return Err(invalid(
            "retry.backoff_multiplier",
            format!("{} must be a number >= 1", retry.backoff_multiplier),
        ));
    }
    if load.concurrency == 0 {
        return Err(invalid("load.concurrency", "must be at least 1"));
    }
    Ok(())
}

/// Checks that an SLO sets a bound, and token bounds only with a continuous pool among `pools`;
/// and the timeseries' interval and row bound.
fn check_slo_and_timeseries(
    slo: Option<&SloSpec>,
    timeseries: &TimeseriesSpec,
    pools: &[Pool],
) -> Result<(), ScenarioError> {
    if let Some(slo) = slo
        && slo.latency.is_none()
        && slo.ttft.is_none()
        && slo.tpot.is_none()
    {
        return Err(invalid(
            "slo",
            "sets no bound: give `latency`, `ttft` or `tpot` (or drop [slo])",
        ));
    }
    let continuous = pools.iter().any(|p| p.llm.is_some());
    if let Some(slo) = slo
        && !continuous
        && (slo.ttft.is_some() || slo.tpot.is_some())
    {
        return Err(invalid(
            "slo",
            "`ttft` and `tpot` bound token latencies, which only a continuous batcher (`batcher.kind = \"continuous\"`) produces",
        ));
    }
    if timeseries.interval.0 == 0 {
        return Err(invalid("timeseries.interval", "must be above 0"));
    }
    if !(2..=MAX_ROWS_LIMIT).contains(&timeseries.max_rows) {
        return Err(invalid(
            "timeseries.max_rows",
            format!(
                "must be between 2 and {MAX_ROWS_LIMIT} (the interval doubles as needed to stay within it)"
            ),
        ));
    }
    Ok(())
}

pub(crate) fn invalid(key: &str, message: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid {
        key: key.to_string(),
        message: message.into(),
    }
}

/// Writes `value` at dotted `path` into `raw`, unvalidated. A string `kind` that differs from
/// the one written empties the table first. Returns the note of a table whose kind it changed
/// (naming the old kind's keys dropped) and the note of preferred batch sizes it dropped (above
/// a new `max_batch_size`).
fn set_raw(
    raw: &mut toml::Table,
    path: &str,
    value: &str,
) -> Result<(Option<String>, Option<String>), ScenarioError> {
    let override_err = |message: String| ScenarioError::Override {
        key: path.to_string(),
        value: value.to_string(),
        message,
    };
    let parsed = match toml::from_str::<toml::Table>(&format!("v = {value}")) {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or(toml::Value::String(value.to_string())),
        Err(_) => toml::Value::String(value.to_string()),
    };
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(override_err("the key path has an empty part".to_string()));
    }
    let mut table = raw;
    for part in &parts[..parts.len() - 1] {
        let entry = table
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = entry
            .as_table_mut()
            .ok_or_else(|| override_err(format!("`{part}` is not a table")))?;
    }
    let last = parts[parts.len() - 1];
    let note = if last == "kind" {
        switch_kind(table, path, &parsed)
    } else {
        None
    };
    table.insert(last.to_string(), parsed);
    let dropped = drop_preferred_above_max(table, &parts);
    Ok((note, dropped))
}

/// Empties `table` when `kind` differs from the string kind it has; the note says what went.
fn switch_kind(table: &mut toml::Table, path: &str, kind: &toml::Value) -> Option<String> {
    let old = table.get("kind")?.as_str()?.to_string();
    if kind.as_str() == Some(old.as_str()) {
        return None;
    }
    let dropped: Vec<String> = table
        .keys()
        .filter(|k| k.as_str() != "kind")
        .map(|k| format!("`{k}`"))
        .collect();
    table.clear();
    let new = kind.as_str().map_or(kind.to_string(), |k| format!("{k:?}"));
    Some(match dropped.len() {
        0 => format!("`{path}` changed from {old:?} to {new}"),
        _ => format!(
            "`{path}` changed from {old:?} to {new}: dropped the old kind's {}",
            dropped.join(", ")
        ),
    })
}

fn validate_network(n: &NetworkSpec) -> Result<(), ScenarioError> {
    match &n.latency {
        Some(LatencySpec::Lognormal { median, p99 }) if p99.0 <= median.0 || median.0 == 0 => Err(
            invalid("network.latency.p99", "must exceed a median above 0"),
        ),
        Some(LatencySpec::Empirical { samples }) if samples.is_empty() => Err(invalid(
            "network.latency.samples",
            "needs at least one sample",
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scenario's models, built (none of these scenarios names a profile).
    fn models(s: &Scenario) -> crate::BuiltScenario {
        crate::build::build(s, &mut crate::Profiles::default()).unwrap()
    }

    const MINIMAL: &str = "[service]\nkind = \"constant\"\ntime = \"5ms\"\n";

    #[test]
    fn minimal_scenario_gets_documented_defaults() {
        let s = Scenario::from_toml_str(MINIMAL).unwrap();
        let p = &s.pools()[0];
        assert_eq!(p.instances, 1);
        assert_eq!(p.batcher.max_batch_size, 1);
        assert_eq!(p.execution.gpus * p.execution.instance_count, 1);
        assert_eq!(p.queue, QueueSpec::default());
        assert_eq!(s.load.mode, LoadMode::Open);
        assert_eq!(s.timeseries.interval, DurationNs(1_000_000_000));
        assert_eq!(
            models(&s).pools[0]
                .service
                .as_ref()
                .expect("a dynamic pool")
                .mean_ns(&crate::timing::service::BatchShape {
                    size: 1,
                    max_input_tokens: 1,
                    total_input_tokens: 1,
                    idle_ns: 0,
                }),
            5e6
        );
    }

    #[test]
    fn unknown_key_is_rejected_naming_it() {
        let err = Scenario::from_toml_str(&format!("{MINIMAL}[batcher]\nmax_batchsize = 4\n"))
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("max_batchsize"), "{msg}");
        let err = Scenario::from_toml_str(&format!("instancez = 3\n{MINIMAL}")).unwrap_err();
        assert!(err.to_string().contains("instancez"), "{err}");
    }

    #[test]
    fn bad_duration_is_rejected_quoting_value_and_key() {
        let err = Scenario::from_toml_str(&format!(
            "{MINIMAL}[batcher]\nmax_queue_delay = \"5 fortnights\"\n"
        ))
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("\"5 fortnights\"") && msg.contains("max_queue_delay"),
            "{msg}"
        );
        let err = Scenario::from_toml_str(&format!("{MINIMAL}[batcher]\nmax_queue_delay = 5\n"))
            .unwrap_err();
        assert!(err.to_string().contains("has no unit"), "{err}");
    }

    #[test]
    fn out_of_range_values_name_the_key() {
        let err = Scenario::from_toml_str(&format!(
            "{MINIMAL}[batcher]\nmax_batch_size = 4\npreferred_batch_size = [2, 8]\n"
        ))
        .unwrap_err();
        assert!(
            err.to_string().contains("batcher.preferred_batch_size"),
            "{err}"
        );
        let err = Scenario::from_toml_str(&format!("instances = 0\n{MINIMAL}")).unwrap_err();
        assert!(err.to_string().contains("`instances`"), "{err}");
    }

    #[test]
    fn set_changes_one_key_by_dotted_path() {
        let mut s = Scenario::from_toml_str(MINIMAL).unwrap();
        s.set("instances", "4").unwrap();
        s.set("batcher.max_batch_size", "8").unwrap();
        s.set("batcher.max_queue_delay", "2ms").unwrap();
        s.set("gateway.load_balancing", "power_of_two").unwrap();
        s.set("batcher.preferred_batch_size", "[4, 8]").unwrap();
        assert_eq!(
            s.get("batcher.max_batch_size").and_then(|v| v.as_integer()),
            Some(8)
        );
        assert_eq!(s.get("batcher.no_such_key"), None);
        let p = &s.pools()[0];
        assert_eq!(p.instances, 4);
        assert_eq!(p.batcher.max_batch_size, 8);
        assert_eq!(p.batcher.max_queue_delay, DurationNs(2_000_000));
        assert_eq!(p.batcher.preferred_batch_size, vec![4, 8]);
        assert_eq!(s.gateway.load_balancing, LoadBalancing::PowerOfTwo);
        let err = s.set("batcher.max_batch", "8").unwrap_err();
        assert!(err.to_string().contains("batcher.max_batch"), "{err}");
        assert_eq!(
            s.pools()[0].batcher.max_batch_size,
            8,
            "a failed set leaves the scenario unchanged"
        );
    }

    const AFFINE: &str = "[service]\nkind = \"affine\"\na = \"1ms\"\nb = \"0.1ms\"\nc = \"5us\"\n";

    #[test]
    fn set_all_switches_the_service_kind_and_drops_the_old_kinds_keys_with_a_note() {
        let mut s = Scenario::from_toml_str(AFFINE).unwrap();
        let notes = s
            .set_all(&[("service.kind", "profile"), ("service.path", "p.json")])
            .unwrap();
        match &s.pools()[0].service_spec {
            Some(ServiceSpec::Profile { path }) => assert_eq!(path, Path::new("p.json")),
            other => panic!("expected a profile service, got {other:?}"),
        }
        assert_eq!(s.get("service.a"), None, "the affine keys are gone");
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("\"affine\" to \"profile\"") && notes[0].contains("`a`, `b`, `c`"),
            "{notes:?}"
        );
    }

    #[test]
    fn a_new_kind_without_its_keys_is_refused_naming_them_and_changes_nothing() {
        let mut s = Scenario::from_toml_str(AFFINE).unwrap();
        let err = s.set("service.kind", "profile").unwrap_err().to_string();
        assert!(
            err.contains("`path`") && err.contains("dropped the old kind's `a`"),
            "{err}"
        );
        assert!(
            matches!(s.pools()[0].service_spec, Some(ServiceSpec::Affine { .. })),
            "a failed switch leaves the scenario unchanged"
        );
    }

    #[test]
    fn setting_the_kind_already_written_keeps_the_tables_keys() {
        let mut s = Scenario::from_toml_str(AFFINE).unwrap();
        let notes = s
            .set_all(&[("service.kind", "affine"), ("service.a", "2ms")])
            .unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        match &s.pools()[0].service_spec {
            Some(ServiceSpec::Affine { a, b, .. }) => {
                assert_eq!((a.0, b.0), (2_000_000, 100_000));
            }
            other => panic!("expected an affine service, got {other:?}"),
        }
    }

    #[test]
    fn set_service_profile_replaces_any_kind_and_keeps_the_path_verbatim() {
        let mut s = Scenario::from_toml_str(MINIMAL).unwrap();
        let notes = s
            .set_service_profile(Path::new("/tmp/a dir/profile \"1\".json"))
            .unwrap();
        match &s.pools()[0].service_spec {
            Some(ServiceSpec::Profile { path }) => {
                assert_eq!(path, Path::new("/tmp/a dir/profile \"1\".json"));
            }
            other => panic!("expected a profile service, got {other:?}"),
        }
        assert!(
            notes[0].contains("dropped the old kind's `time`"),
            "{notes:?}"
        );
    }

    const CONTINUOUS: &str = "[batcher]\nkind = \"continuous\"\n[kv_cache]\nnum_gpu_blocks = 1000\n[step_time]\nkind = \"linear\"\nbase = \"5ms\"\n";

    #[test]
    fn client_timeout_is_set_like_every_key_and_retried_only_when_listed() {
        let mut s = Scenario::from_toml_str(CONTINUOUS).unwrap();
        assert_eq!(
            s.load.client_timeout, None,
            "clients wait forever by default"
        );
        assert!(!s.retry.on.contains(&RetryOn::ClientTimeout));
        s.set_all(&[
            ("load.client_timeout", "300s"),
            ("retry.on", "[\"client_timeout\"]"),
        ])
        .unwrap();
        assert_eq!(s.load.client_timeout, Some(DurationNs(300_000_000_000)));
        assert_eq!(s.retry.on, vec![RetryOn::ClientTimeout]);
        let err = s.set("load.client_timeout", "0s").unwrap_err().to_string();
        assert!(
            err.contains("load.client_timeout") && err.contains("above 0"),
            "{err}"
        );
    }

    #[test]
    fn client_timeout_asks_a_prefetching_dynamic_batcher_to_stop_prefetching() {
        let text =
            format!("[load]\nclient_timeout = \"1s\"\n[batcher]\nmax_batch_size = 4\n{MINIMAL}");
        let err = Scenario::from_toml_str(&text).unwrap_err().to_string();
        assert!(
            err.contains("load.client_timeout") && err.contains("batcher.prefetch = false"),
            "{err}"
        );
        let off = text.replace(
            "max_batch_size = 4\n",
            "max_batch_size = 4\nprefetch = false\n",
        );
        assert!(Scenario::from_toml_str(&off).is_ok());
        let queue_policy = format!("{text}[queue]\ntimeout = \"1s\"\n");
        assert!(
            Scenario::from_toml_str(&queue_policy).is_ok(),
            "a queue with a timeout never prefetches"
        );
    }

    fn replay(text: &str) -> ReplayInputs {
        ReplayInputs::from_toml_str(text, Path::new("replay.toml")).unwrap()
    }

    #[test]
    fn overlapping_or_empty_slowdown_windows_are_refused_naming_the_window() {
        let mut s = Scenario::from_toml_str(MINIMAL).unwrap();
        let err = s
            .set_replay(replay(
                r#"slowdowns = [{ from = "0s", to = "2s", factor = 2.0 }, { from = "1s", to = "3s", factor = 2.0 }]"#,
            ))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("replay.slowdowns[1]") && err.contains("overlap"),
            "{err}"
        );
        let err = s
            .set_replay(replay(
                r#"slowdowns = [{ from = "2s", to = "2s", factor = 2.0 }]"#,
            ))
            .unwrap_err()
            .to_string();
        assert!(err.contains("replay.slowdowns[0]"), "{err}");
        assert!(
            s.pools()[0].slowdowns.windows().is_empty(),
            "unchanged on error"
        );
        s.set_replay(replay(
            r#"slowdowns = [{ from = "1s", to = "2s", factor = 2.0 }]"#,
        ))
        .unwrap();
        assert_eq!(s.pools()[0].slowdowns.windows().len(), 1);
    }

    #[test]
    fn replay_inputs_stay_through_later_overrides_and_refuse_a_pool_they_no_longer_fit() {
        let mut s = Scenario::from_toml_str(MINIMAL).unwrap();
        s.set("batcher.dispatch_latency", "\"50us\"").unwrap();
        s.set_replay(replay(
            "dispatch_residuals = [0.5, 1.5]\nthread_first_fraction = 0.25",
        ))
        .unwrap();
        s.set("batcher.max_batch_size", "8").unwrap();
        assert_eq!(s.pools()[0].replay.thread_first_fraction, 0.25);
        assert_eq!(s.replay().dispatch_residuals, Some(vec![0.5, 1.5]));
        let err = s
            .set("batcher.dispatch_latency", "\"0us\"")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("replay.dispatch_residuals") && err.contains("dispatch_latency"),
            "{err}"
        );
        assert_eq!(s.pools()[0].batcher.dispatch_latency.0, 50_000, "unchanged");
    }

    #[test]
    fn a_replay_input_written_in_a_scenario_is_refused_naming_the_key_and_the_replay_file() {
        for (name, key) in REPLAY_KEYS {
            let (table, field) = key.split_once('.').unwrap();
            let value = match name {
                "dispatch_residuals" => "[1.0]",
                "release_latency_per_request" => "\"1ms\"",
                "thread_first_fraction" => "0.5",
                _ => "[]",
            };
            let text = format!("{MINIMAL}[{table}]\n{field} = {value}\n");
            let text = text.replacen("[batcher]\n[batcher]", "[batcher]", 1);
            let err = Scenario::from_toml_str(&text).unwrap_err().to_string();
            assert!(
                err.contains(key) && err.contains("--replay-inputs"),
                "{key}: {err}"
            );
            let mut s = Scenario::from_toml_str(MINIMAL).unwrap();
            let err = s.set(key, value).unwrap_err().to_string();
            assert!(err.contains("replay input"), "{key}: {err}");
            let named = format!(
                "{MINIMAL}[pools.b]\nmodels = [\"m\"]\n[pools.b.{table}]\n{field} = {value}\n"
            );
            let err = Scenario::from_toml_str(&named).unwrap_err().to_string();
            assert!(err.contains(&format!("pools.b.{key}")), "{key}: {err}");
        }
    }

    /// Each of `cases` (a value and what its error says) set at `key` is refused, the error
    /// naming the key.
    fn assert_refused(s: &mut Scenario, key: &str, cases: &[(&str, &str)]) {
        for (bad, says) in cases {
            let err = s.set(key, bad).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn speed_levels_make_a_speed_process_that_a_replays_measured_windows_replace() {
        let mut s = Scenario::from_toml_str(MINIMAL).unwrap();
        assert!(s.pools()[0].slowdowns.process().is_none());
        s.set("execution.speed_levels", "[0.9, 1.1, 2.0]").unwrap();
        let process = s.pools()[0].slowdowns.process().unwrap();
        assert_eq!(process.levels().len(), 3);
        assert_refused(
            &mut s,
            "execution.speed_levels",
            &[
                ("[]", "empty"),
                ("[1.0, -1.0]", "[1]"),
                ("[0.0]", "above 0"),
            ],
        );
        let err = s
            .set("execution.speed_window", "\"0s\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("speed_window"), "{err}");
        // Pauses leave the process; a run's measured windows stand for it.
        s.set_replay(replay(r#"pauses = [{ from = "1ms", to = "2ms" }]"#))
            .unwrap();
        assert!(s.pools()[0].slowdowns.process().is_some());
        s.set_replay(replay(
            r#"slowdowns = [{ from = "1s", to = "2s", factor = 2.0 }]"#,
        ))
        .unwrap();
        assert!(s.pools()[0].slowdowns.process().is_none());
        assert_eq!(s.pools()[0].slowdowns.windows().len(), 1);
        let mut bare = Scenario::from_toml_str(MINIMAL).unwrap();
        let err = bare
            .set("execution.speed_window", "\"2s\"")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("execution.speed_window") && err.contains("speed_levels"),
            "{err}"
        );
    }

    #[test]
    fn time_scale_multiplies_batch_and_step_times_and_bad_values_are_refused_naming_the_key() {
        use crate::rng::SimRng;
        use crate::timing::step_time::StepBatch;
        use rand::SeedableRng;
        let shape = crate::BatchShape {
            size: 1,
            max_input_tokens: 16,
            total_input_tokens: 16,
            idle_ns: 0,
        };
        let mut s = Scenario::from_toml_str(MINIMAL).unwrap();
        s.set("execution.time_scale", "1.2").unwrap();
        let built = models(&s);
        let service = built.pools[0].service.as_ref().unwrap();
        let mut rng = SimRng::seed_from_u64(1);
        assert_eq!(service.sample_ns(&shape, &mut rng), 6_000_000, "5 ms x 1.2");
        assert_eq!(service.mean_ns(&shape), 6e6);

        let mut c = Scenario::from_toml_str(CONTINUOUS).unwrap();
        c.set("execution.time_scale", "0.5").unwrap();
        let step = StepBatch {
            decode_seqs: 1,
            ..StepBatch::default()
        };
        let built = models(&c);
        assert_eq!(
            built.pools[0]
                .step_time
                .as_ref()
                .unwrap()
                .sample_ns(&step, &mut rng),
            2_500_000,
            "5 ms x 0.5"
        );

        for bad in ["0", "-1", "1001", "nan"] {
            let err = s.set("execution.time_scale", bad).unwrap_err().to_string();
            assert!(err.contains("execution.time_scale"), "{bad}: {err}");
        }
    }

    #[test]
    fn dispatch_residuals_need_a_dispatch_latency_and_positive_ratios() {
        let mut s = Scenario::from_toml_str(MINIMAL).unwrap();
        let err = s
            .set_replay(replay("dispatch_residuals = [0.5, 1.5]"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("replay.dispatch_residuals") && err.contains("dispatch_latency"),
            "{err}"
        );
        s.set("batcher.dispatch_latency", "\"50us\"").unwrap();
        s.set_replay(replay("dispatch_residuals = [0.5, 1.5]"))
            .unwrap();
        for bad in ["[]", "[1.0, -2.0]", "[0.0]"] {
            let err = s
                .set_replay(replay(&format!("dispatch_residuals = {bad}")))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("replay.dispatch_residuals") && err.contains("above 0"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn cuda_graph_sizes_must_increase_from_1_and_default_to_vllms_list() {
        let mut s = Scenario::from_toml_str(CONTINUOUS).unwrap();
        let graphs = |s: &Scenario| s.pools()[0].llm.as_ref().unwrap().cuda_graphs.clone();
        assert_eq!(
            graphs(&s).sizes().len(),
            51,
            "max_num_seqs 256, 8192 tokens"
        );
        s.set("batcher.max_num_seqs", "2").unwrap();
        assert_eq!(graphs(&s).sizes(), [1, 2, 4]);
        s.set("batcher.cuda_graph_sizes", "[]").unwrap();
        assert!(graphs(&s).sizes().is_empty(), "[] runs eagerly");
        s.set("batcher.cuda_graph_sizes", "[1, 8, 64]").unwrap();
        assert_eq!(graphs(&s).sizes(), [1, 8, 64]);
        assert_refused(
            &mut s,
            "batcher.cuda_graph_sizes",
            &[
                ("[0, 8]", "holds 0"),
                ("[8, 4]", "strictly increasing"),
                ("[4, 4]", "strictly increasing"),
            ],
        );
        let err = s
            .set("batcher.cuda_graph_sizes", "[-1]")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cuda_graph_sizes"), "-1: {err}");
    }

    #[test]
    fn step_residuals_need_positive_factors_and_a_continuous_batcher() {
        let mut s = Scenario::from_toml_str(CONTINUOUS).unwrap();
        s.set("batcher.step_residuals", "[0.8, 1.3]").unwrap();
        for bad in ["[]", "[1.0, -2.0]", "[0.0]"] {
            let err = s
                .set("batcher.step_residuals", bad)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("batcher.step_residuals") && err.contains("above 0"),
                "{bad}: {err}"
            );
        }
        for key in ["step_residuals = [1.0]", "cuda_graph_sizes = [1, 2]"] {
            let err = Scenario::from_toml_str(&format!("{MINIMAL}[batcher]\n{key}\n"))
                .unwrap_err()
                .to_string();
            let name = key.split(' ').next().unwrap();
            assert!(err.contains(&format!("batcher.{name}")), "{key}: {err}");
        }
    }

    #[test]
    fn size_factors_need_one_positive_level_or_more_and_name_the_bad_entry() {
        let affine = "[batcher]\nmax_batch_size = 4\n[service]\nkind = \"affine\"\na = \"1ms\"\n";
        let mut s = Scenario::from_toml_str(affine).unwrap();
        s.set("service.size_factors", "[1.0, 1.2]").unwrap();
        let err = s.set("service.size_factors", "[]").unwrap_err().to_string();
        assert!(
            err.contains("service.size_factors") && err.contains("is empty"),
            "{err}"
        );
        let err = s
            .set("service.size_factors", "[1.0, 1.1, -0.5]")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("service.size_factors") && err.contains("batch size 3"),
            "{err}"
        );
    }

    #[test]
    fn a_thread_first_fraction_outside_0_to_1_is_refused_naming_the_key() {
        let mut s = Scenario::from_toml_str(MINIMAL).unwrap();
        s.set_replay(replay("thread_first_fraction = 0.25"))
            .unwrap();
        for bad in ["-0.1", "1.5", "nan"] {
            let err = s
                .set_replay(replay(&format!("thread_first_fraction = {bad}")))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("replay.thread_first_fraction") && err.contains("between 0"),
                "{bad}: {err}"
            );
        }
        assert_eq!(s.replay().thread_first_fraction, 0.25, "unchanged on error");
    }

    #[test]
    fn a_missed_release_outside_0_to_1_is_refused_naming_the_key() {
        let mut s = Scenario::from_toml_str(MINIMAL).unwrap();
        s.set("batcher.missed_release", "0.08").unwrap();
        assert_eq!(s.pools()[0].batcher.missed_release, 0.08);
        for bad in ["-0.1", "1.5", "nan"] {
            let err = s
                .set("batcher.missed_release", bad)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("batcher.missed_release") && err.contains("between 0"),
                "{bad}: {err}"
            );
        }
        assert_eq!(
            s.pools()[0].batcher.missed_release,
            0.08,
            "unchanged on error"
        );
        let text = CONTINUOUS.replace(
            "kind = \"continuous\"\n",
            "kind = \"continuous\"\nmissed_release = 0.1\n",
        );
        let err = Scenario::from_toml_str(&text).unwrap_err();
        assert!(err.to_string().contains("batcher.missed_release"), "{err}");
    }

    #[test]
    fn continuous_keys_under_the_dynamic_batcher_are_rejected_naming_the_key() {
        let err = Scenario::from_toml_str(&format!("{MINIMAL}[batcher]\nmax_num_seqs = 8\n"))
            .unwrap_err();
        assert!(err.to_string().contains("batcher.max_num_seqs"), "{err}");
        let err = Scenario::from_toml_str(&format!("{MINIMAL}[kv_cache]\nblock_size = 16\n"))
            .unwrap_err();
        assert!(err.to_string().contains("`kv_cache`"), "{err}");
    }

    #[test]
    fn continuous_pool_needs_step_time_instead_of_service() {
        let both = format!("{MINIMAL}{CONTINUOUS}");
        let err = Scenario::from_toml_str(&both).unwrap_err();
        assert!(err.to_string().contains("`service`"), "{err}");
        let err = Scenario::from_toml_str(&format!("{MINIMAL}[batcher]\nkind = \"continuous\"\n"))
            .unwrap_err();
        assert!(err.to_string().contains("`step_time`"), "{err}");
        let err = Scenario::from_toml_str("[batcher]\nkind = \"continuous\"\n").unwrap_err();
        assert!(err.to_string().contains("`step_time`"), "{err}");
        let err = Scenario::from_toml_str(&format!(
            "{CONTINUOUS}[batcher]\nkind = \"continuous\"\nmax_batch_size = 4\n"
        ));
        assert!(err.is_err(), "a duplicate [batcher] table is a TOML error");
    }

    #[test]
    fn continuous_pool_without_kv_capacity_names_num_gpu_blocks() {
        let text =
            "[batcher]\nkind = \"continuous\"\n[step_time]\nkind = \"linear\"\nbase = \"5ms\"\n";
        let err = Scenario::from_toml_str(text).unwrap_err();
        assert!(err.to_string().contains("kv_cache.num_gpu_blocks"), "{err}");
    }

    #[test]
    fn continuous_pool_rejects_several_model_instances_and_dynamic_keys() {
        let err =
            Scenario::from_toml_str(&format!("{CONTINUOUS}[execution]\ngpus = 2\n")).unwrap_err();
        assert!(err.to_string().contains("`execution`"), "{err}");
        let text = CONTINUOUS.replace(
            "kind = \"continuous\"\n",
            "kind = \"continuous\"\nmax_queue_delay = \"1ms\"\n",
        );
        let err = Scenario::from_toml_str(&text).unwrap_err();
        assert!(err.to_string().contains("batcher.max_queue_delay"), "{err}");
        let text = CONTINUOUS.replace(
            "kind = \"continuous\"\n",
            "kind = \"continuous\"\ndispatch_latency = \"100us\"\n",
        );
        let err = Scenario::from_toml_str(&text).unwrap_err();
        assert!(
            err.to_string().contains("batcher.dispatch_latency"),
            "{err}"
        );
        let mut continuous = Scenario::from_toml_str(CONTINUOUS).unwrap();
        let err = continuous
            .set_replay(replay(r#"pauses = [{ from = "1ms", to = "2ms" }]"#))
            .unwrap_err();
        assert!(err.to_string().contains("replay.pauses"), "{err}");
        continuous
            .set_replay(replay(
                r#"slowdowns = [{ from = "1ms", to = "2ms", factor = 2.0 }]"#,
            ))
            .unwrap();
        let text = CONTINUOUS.replace("[kv_cache]\n", "[kv_cache]\nprefix_block_tokens = 500\n");
        let err = Scenario::from_toml_str(&text).unwrap_err();
        assert!(
            err.to_string().contains("kv_cache.prefix_block_tokens"),
            "{err}"
        );
        let text = CONTINUOUS.replace(
            "kind = \"continuous\"\n",
            "kind = \"continuous\"\nscheduling = \"priority\"\n",
        );
        let err = Scenario::from_toml_str(&text).unwrap_err();
        assert!(err.to_string().contains("batcher.scheduling"), "{err}");
    }

    #[test]
    fn continuous_pool_gets_vllm_defaults_and_set_changes_its_keys() {
        let mut s = Scenario::from_toml_str(CONTINUOUS).unwrap();
        let pool = &s.pools()[0];
        assert!(pool.service_spec.is_none());
        let c = &pool.llm.as_ref().expect("a continuous pool").scheduler;
        assert_eq!(
            (
                c.max_num_seqs,
                c.max_num_batched_tokens,
                c.enable_chunked_prefill
            ),
            (256, 8192, true)
        );
        assert_eq!(
            (c.block_size, c.num_gpu_blocks, c.prefix_block_tokens),
            (16, 1000, 512)
        );
        assert!(!c.enable_prefix_caching);
        s.set("batcher.max_num_seqs", "32").unwrap();
        s.set("batcher.step_overhead", "3ms").unwrap();
        s.set("kv_cache.enable_prefix_caching", "true").unwrap();
        s.set("kv_cache.num_gpu_blocks", "500").unwrap();
        let c = &s.pools()[0].llm.as_ref().unwrap().scheduler;
        assert_eq!(
            (c.max_num_seqs, c.step_overhead_ns, c.num_gpu_blocks),
            (32, 3_000_000, 500)
        );
        assert!(c.enable_prefix_caching);
    }

    #[test]
    fn roofline_step_time_sizes_the_kv_cache_from_gpu_memory() {
        let s = Scenario::from_toml_str(
            "[batcher]\nkind = \"continuous\"\n[step_time]\nkind = \"roofline\"\nmodel = \"llama-3-8b\"\nhardware = \"h200\"\n",
        )
        .unwrap();
        let llm = s.pools()[0].llm.as_ref().unwrap();
        let tokens = llm
            .step_time_spec
            .kv_capacity_tokens()
            .expect("roofline knows memory");
        assert_eq!(u64::from(llm.scheduler.num_gpu_blocks), tokens / 16);
        assert!(
            llm.scheduler.num_gpu_blocks > 10_000,
            "{}",
            llm.scheduler.num_gpu_blocks
        );
    }

    #[test]
    fn a_roofline_model_file_defers_the_kv_blocks_and_an_unknown_model_is_named_first() {
        let roofline = "[batcher]\nkind = \"continuous\"\n[step_time]\nkind = \"roofline\"\nhardware = \"h200\"\n";
        let s = Scenario::from_toml_str(&format!("{roofline}model = \"no/such/config.json\"\n"))
            .expect("the file is not read while validating");
        let llm = s.pools()[0].llm.as_ref().unwrap();
        assert!(llm.num_gpu_blocks_from_model);
        let given = Scenario::from_toml_str(&format!(
            "{roofline}model = \"no/such/config.json\"\n[kv_cache]\nnum_gpu_blocks = 10\n"
        ))
        .unwrap();
        let llm = given.pools()[0].llm.as_ref().unwrap();
        assert!(!llm.num_gpu_blocks_from_model);
        assert_eq!(llm.scheduler.num_gpu_blocks, 10);
        let err = Scenario::from_toml_str(&format!("{roofline}model = \"gpt-9\"\n")).unwrap_err();
        assert!(
            err.to_string()
                .contains("step_time.model = \"gpt-9\" is not a known preset"),
            "{err}"
        );
    }

    #[test]
    fn slo_needs_a_bound_and_token_bounds_need_a_continuous_pool() {
        let err = Scenario::from_toml_str(&format!("{MINIMAL}[slo]\n")).unwrap_err();
        assert!(err.to_string().contains("`slo`"), "{err}");
        let err = Scenario::from_toml_str(&format!("{MINIMAL}[slo]\nttft = \"2s\"\n")).unwrap_err();
        assert!(err.to_string().contains("continuous"), "{err}");
        let s = Scenario::from_toml_str(&format!(
            "{CONTINUOUS}[slo]\nttft = \"2s\"\ntpot = \"100ms\"\n"
        ))
        .unwrap();
        let slo = s.slo.unwrap();
        assert_eq!(
            (slo.latency, slo.ttft, slo.tpot),
            (
                None,
                Some(DurationNs(2_000_000_000)),
                Some(DurationNs(100_000_000))
            )
        );
    }

    #[test]
    fn named_pools_are_parsed_after_the_default_pool() {
        let s = Scenario::from_toml_str(&format!(
            "{MINIMAL}[pools.large]\nmodels = [\"llama\"]\ninstances = 2\n[pools.large.service]\nkind = \"exponential\"\nmean = \"10ms\"\n"
        ))
        .unwrap();
        assert_eq!(s.pools().len(), 2);
        assert_eq!(s.pools()[1].name, "large");
        assert_eq!(s.pools()[1].models, vec!["llama".to_string()]);
    }

    const PREFERRED: &str = "[batcher]\nmax_batch_size = 32\npreferred_batch_size = [8, 16, 32]\n[service]\nkind = \"constant\"\ntime = \"5ms\"\n";

    #[test]
    fn a_max_batch_size_below_preferred_sizes_drops_them_with_a_note() {
        let mut s = Scenario::from_toml_str(PREFERRED).unwrap();
        assert!(s.notes().is_empty());
        s.set("batcher.max_batch_size", "12").unwrap();
        assert_eq!(s.pools()[0].batcher.max_batch_size, 12);
        assert_eq!(s.pools()[0].batcher.preferred_batch_size, vec![8]);
        let expected = "`batcher.max_batch_size` = 12 is below `batcher.preferred_batch_size` [8, 16, 32]: dropped [16, 32], leaving [8]";
        assert_eq!(s.notes(), [expected.to_string()]);
        assert_eq!(
            s.description.as_deref(),
            Some(format!("note: {expected}").as_str())
        );
        s.set("batcher.max_batch_size", "4").unwrap();
        assert!(s.pools()[0].batcher.preferred_batch_size.is_empty());
        assert_eq!(s.notes().len(), 2, "{:?}", s.notes());
    }

    #[test]
    fn a_max_batch_size_at_or_above_every_preferred_size_adds_no_note() {
        let mut s = Scenario::from_toml_str(PREFERRED).unwrap();
        s.set("batcher.max_batch_size", "32").unwrap();
        s.set("instances", "3").unwrap();
        assert!(s.notes().is_empty());
        assert_eq!(s.description, None);
    }

    #[test]
    fn preferred_sizes_set_above_the_max_are_still_refused() {
        let mut s = Scenario::from_toml_str(PREFERRED).unwrap();
        let err = s
            .set("batcher.preferred_batch_size", "[8, 64]")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("batcher.preferred_batch_size") && err.contains("max_batch_size (32)"),
            "{err}"
        );
    }

    #[test]
    fn misspelt_keys_suggest_the_intended_one() {
        let mut s = Scenario::from_toml_str(MINIMAL).unwrap();
        let err = s.set("instance", "2").unwrap_err().to_string();
        assert!(err.ends_with("did you mean `instances`?"), "{err}");
        let err = s.set("batcher.max_batch_sze", "2").unwrap_err().to_string();
        assert!(
            err.ends_with("did you mean `batcher.max_batch_size`?"),
            "{err}"
        );
        let err = s.set("batchr.max_batch_size", "2").unwrap_err().to_string();
        assert!(
            err.ends_with("did you mean `batcher.max_batch_size`?"),
            "{err}"
        );
        let err = Scenario::from_toml_str(&format!(
            "{MINIMAL}[gateway]\nload_balancing = \"least_outstandin\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("did you mean `least_outstanding`?"), "{err}");
        let err = Scenario::from_toml_str(&format!("{MINIMAL}[batcher]\nmax_batchsize = 4\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("did you mean `max_batch_size`?"), "{err}");
    }

    const HOST: &str = "[host]\ncores = 2\nrequest = \"60us\"\nrequest_per_input_token = \"0.1us\"\nresponse = \"40us\"\n";

    #[test]
    fn host_is_read_per_pool_and_set_like_every_key() {
        let mut s = Scenario::from_toml_str(&format!("{MINIMAL}{HOST}")).unwrap();
        let host = s.pools()[0]
            .host
            .clone()
            .expect("the default pool has a host");
        assert_eq!(
            (
                host.cores,
                host.request,
                host.request_per_input_token,
                host.response
            ),
            (2, DurationNs(60_000), DurationNs(100), DurationNs(40_000))
        );
        s.set("host.cores", "4").unwrap();
        assert_eq!(s.pools()[0].host.as_ref().map(|h| h.cores), Some(4));
        let mut bare = Scenario::from_toml_str(MINIMAL).unwrap();
        bare.set("host.cores", "4").unwrap();
        assert_eq!(
            bare.pools()[0].host.as_ref().map(|h| (h.cores, h.request)),
            Some((4, DurationNs(0))),
            "`--set host.cores=4` adds a host with no costs"
        );
        let s = Scenario::from_toml_str(&format!(
            "{MINIMAL}[pools.chat]\nmodels = [\"chat\"]\n[pools.chat.service]\nkind = \"constant\"\ntime = \"1ms\"\n[pools.chat.host]\ncores = 3\n"
        ))
        .unwrap();
        assert!(
            s.pools()[0].host.is_none(),
            "a named pool's host is its own"
        );
        let chat = s.pools()[1].host.as_ref().expect("pools.chat has a host");
        assert_eq!((chat.cores, chat.request), (3, DurationNs(0)));
    }

    #[test]
    fn host_without_cores_or_with_zero_is_refused_naming_host_cores() {
        for table in ["[host]\nrequest = \"60us\"\n", "[host]\ncores = 0\n"] {
            let err = Scenario::from_toml_str(&format!("{MINIMAL}{table}"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("`host.cores`") && err.contains("at least 1"),
                "{table:?}: {err}"
            );
        }
        let mut s = Scenario::from_toml_str(&format!("{MINIMAL}{HOST}")).unwrap();
        let err = s.set("host.cores", "0").unwrap_err().to_string();
        assert!(err.contains("`host.cores`"), "{err}");
        let err =
            Scenario::from_toml_str(&format!("{MINIMAL}[host]\ncores = 1\nrequest = \"-1us\"\n"))
                .unwrap_err()
                .to_string();
        assert!(
            err.contains("request"),
            "a negative duration names its key: {err}"
        );
    }

    #[test]
    fn preprocess_workers_beside_a_host_is_refused_naming_both_keys() {
        let err = Scenario::from_toml_str(&format!(
            "{MINIMAL}{HOST}[preprocess]\nworkers = 4\nbase = \"1ms\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("`preprocess.workers`")
                && err.contains("`host.cores`")
                && err.contains("drop `preprocess.workers`"),
            "{err}"
        );
        // Without `workers`, pre-processing runs on the cores.
        let s = Scenario::from_toml_str(&format!("{MINIMAL}{HOST}[preprocess]\nbase = \"1ms\"\n"))
            .unwrap();
        assert_eq!(
            s.pools()[0].preprocess.as_ref().map(|p| p.workers),
            Some(None)
        );
        let err = Scenario::from_toml_str(&format!(
            "{MINIMAL}[pools.img]\nmodels = [\"img\"]\n[pools.img.service]\nkind = \"constant\"\ntime = \"1ms\"\n\
             [pools.img.host]\ncores = 2\n[pools.img.preprocess]\nworkers = 2\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("`pools.img.preprocess.workers`")
                && err.contains("`pools.img.host.cores`"),
            "{err}"
        );
    }

    #[test]
    fn host_on_a_continuous_pool_is_refused_naming_the_pool() {
        let err = Scenario::from_toml_str(&format!("{CONTINUOUS}{HOST}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`host`")
                && err.contains("pool `default`")
                && err.contains("dynamic-batcher pools only"),
            "{err}"
        );
    }
}
