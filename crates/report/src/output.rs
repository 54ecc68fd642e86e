//! A sweep's files: `curves.parquet`, `capacity.csv`, `capacity.json` and `sweep.json` (all of
//! the result, which `capsim report` and `capsim merge` read back).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;

use crate::review::{Sensitivity, answering_row};
use crate::shard::Shard;
use crate::slo::{LatencyStat, REPORTED_PERCENTILES};
use crate::sweep::{CurveRow, SweepResult, stages};

/// Why an output could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// File system error.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Encoding error (Parquet, CSV, JSON).
    #[error("{path}: {message}")]
    Encode {
        /// The file being written or read.
        path: PathBuf,
        /// The Parquet, CSV or JSON library's message.
        message: String,
    },
    /// Shards that do not belong together.
    #[error("merge: {0}")]
    Merge(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn encode(path: &Path, message: impl ToString) -> OutputError {
    OutputError::Encode {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

const STATS: [(&str, LatencyStat); 7] = [
    ("mean", LatencyStat::Mean),
    ("p50", LatencyStat::Percentile(50.0)),
    ("p90", LatencyStat::Percentile(90.0)),
    ("p95", LatencyStat::Percentile(95.0)),
    ("p99", LatencyStat::Percentile(99.0)),
    ("p999", LatencyStat::Percentile(99.9)),
    ("max", LatencyStat::Max),
];

/// Writes `curves.parquet`: one row per run with every grid value (a column per key), the load,
/// offered and achieved rates, goodput, counts by outcome, and every latency statistic of every
/// stage (`{stage}_{stat}_ms`, null when the scenario does not model the stage).
pub fn write_curves_parquet(path: &Path, result: &SweepResult) -> Result<(), OutputError> {
    debug_assert_eq!(STATS.len(), REPORTED_PERCENTILES.len() + 2);
    let rows = &result.curves;
    let mut table = Columns::default();
    table.push(
        Field::new("config_index", DataType::UInt32, false),
        Arc::new(UInt32Array::from_iter_values(
            rows.iter().map(|r| r.config_index as u32),
        )),
    );
    table.push(
        Field::new("configuration", DataType::Utf8, false),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.configuration.as_str()),
        )),
    );
    for key in &result.grid_keys {
        table.push(
            Field::new(key, DataType::Utf8, false),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| {
                r.settings
                    .iter()
                    .find(|(k, _)| k == key)
                    .map_or("", |(_, v)| v.as_str())
            }))),
        );
    }
    run_columns(&mut table, rows);
    latency_columns(&mut table, rows);
    let schema = Arc::new(Schema::new(table.fields));
    let batch = RecordBatch::try_new(schema.clone(), table.columns).map_err(|e| encode(path, e))?;
    let file = File::create(path).map_err(io(path))?;
    let mut writer = ArrowWriter::try_new(file, schema, None).map_err(|e| encode(path, e))?;
    writer.write(&batch).map_err(|e| encode(path, e))?;
    writer.close().map_err(|e| encode(path, e))?;
    Ok(())
}

/// A table's columns as they are built, each beside its field.
#[derive(Default)]
struct Columns {
    fields: Vec<Field>,
    columns: Vec<ArrayRef>,
}

impl Columns {
    fn push(&mut self, field: Field, column: ArrayRef) {
        self.fields.push(field);
        self.columns.push(column);
    }

    /// A nullable `f64` column.
    fn f64(&mut self, name: &str, values: Vec<Option<f64>>) {
        self.push(
            Field::new(name, DataType::Float64, true),
            Arc::new(Float64Array::from(values)),
        );
    }
}

/// The columns of each run as a whole: its load, rates, counts by outcome and verdicts.
fn run_columns(table: &mut Columns, rows: &[CurveRow]) {
    table.push(
        Field::new("load_kind", DataType::Utf8, false),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.load_kind.column()),
        )),
    );
    table.f64("load", rows.iter().map(|r| Some(r.load)).collect());
    table.push(
        Field::new("seed", DataType::UInt64, false),
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.seed))),
    );
    table.f64(
        "offered_rps",
        rows.iter().map(|r| Some(r.offered_rps)).collect(),
    );
    table.f64(
        "throughput_rps",
        rows.iter().map(|r| Some(r.throughput_rps)).collect(),
    );
    table.f64("goodput_rps", rows.iter().map(|r| r.goodput_rps).collect());
    for (name, pick) in [
        ("requests", (|r: &CurveRow| r.total) as fn(&CurveRow) -> u64),
        ("completed", |r| r.completed),
        ("rejected", |r| r.rejected),
        ("timed_out", |r| r.timed_out),
    ] {
        table.push(
            Field::new(name, DataType::UInt64, false),
            Arc::new(UInt64Array::from_iter_values(rows.iter().map(pick))),
        );
    }
    for (name, pick) in [
        (
            "slo_met",
            (|r: &CurveRow| r.slo_met) as fn(&CurveRow) -> bool,
        ),
        ("queue_grows", |r| r.queue_grows),
    ] {
        table.push(
            Field::new(name, DataType::Boolean, false),
            Arc::new(BooleanArray::from(
                rows.iter().map(pick).collect::<Vec<_>>(),
            )),
        );
    }
}

/// Every statistic of the stages, then of the token metrics of continuous batching when the runs
/// have them: `{stage}_{stat}_ms`, null where a run does not model it.
fn latency_columns(table: &mut Columns, rows: &[CurveRow]) {
    let token_metrics = capsim_sim::summary::TOKEN_METRICS
        .iter()
        .filter(|m| rows.iter().any(|r| r.latency_ms.contains_key(**m)));
    for stage in stages().iter().chain(token_metrics) {
        for (stat_name, stat) in STATS {
            let values = rows
                .iter()
                .map(|r| {
                    r.latency_ms
                        .get(*stage)
                        .and_then(|s| crate::experiment::stat_of(s, stat))
                })
                .collect();
            table.f64(&format!("{stage}_{stat_name}_ms"), values);
        }
    }
}

/// Writes `capacity.csv`: one row per configuration, with `limited_by` saying what ended each
/// seed's curve.
pub fn write_capacity_csv(path: &Path, result: &SweepResult) -> Result<(), OutputError> {
    let mut writer = csv::Writer::from_path(path).map_err(|e| encode(path, e))?;
    let mut header: Vec<String> = vec!["config_index".into(), "configuration".into()];
    header.extend(result.grid_keys.iter().cloned());
    header.extend(
        [
            // Instances in all pools; not `instances`, which may already name a grid axis.
            "instances_total",
            "seeds",
            "capacity_rps",
            "capacity_rps_ci95_low",
            "capacity_rps_ci95_high",
            "capacity_per_instance_rps",
            "capacity_bracket",
            "limited_by",
            "latency_at_capacity_ms",
            "slo_knee_load",
            "slo_knee_throughput_rps",
            "kneedle_knee_load",
            "kneedle_knee_throughput_rps",
            "kneedle_knee_latency_ms",
            "cost_per_million_requests",
        ]
        .map(String::from),
    );
    writer.write_record(&header).map_err(|e| encode(path, e))?;
    let number = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.6}"));
    for row in &result.capacities {
        let mut record = vec![row.config_index.to_string(), row.configuration.clone()];
        for key in &result.grid_keys {
            record.push(
                row.settings
                    .iter()
                    .find(|(k, _)| k == key)
                    .map_or(String::new(), |(_, v)| v.clone()),
            );
        }
        let brackets: Vec<String> = row
            .bracket_by_seed
            .iter()
            .map(|b| {
                serde_json::to_value(b)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default()
            })
            .collect();
        record.extend([
            row.instances.to_string(),
            row.capacity_rps_by_seed.len().to_string(),
            number(row.capacity_rps.map(|c| c.mean)),
            number(row.capacity_rps.map(|c| c.low)),
            number(row.capacity_rps.map(|c| c.high)),
            number(row.capacity_per_instance_rps),
            brackets.join(";"),
            limited_by_column(&row.limited_by_by_seed),
            number(row.latency_at_capacity_ms),
            number(row.slo_knee.map(|k| k.load)),
            number(row.slo_knee.map(|k| k.throughput_rps)),
            number(row.kneedle_knee.map(|k| k.load)),
            number(row.kneedle_knee.map(|k| k.throughput_rps)),
            number(row.kneedle_knee.map(|k| k.latency_ms)),
            number(row.cost_per_million_requests),
        ]);
        writer.write_record(&record).map_err(|e| encode(path, e))?;
    }
    writer.flush().map_err(io(path))
}

/// The `limited_by` column: per seed, what failed at its lowest unsustainable load
/// (`slo`, `losses`, `queue_growth`, `achieved_below_offered`, joined by `+`; `none` when the
/// capacity is above the searched range), seeds joined by `;` as in `capacity_bracket`.
fn limited_by_column(by_seed: &[Vec<crate::capacity::Limit>]) -> String {
    by_seed
        .iter()
        .map(|limits| {
            if limits.is_empty() {
                "none".to_string()
            } else {
                limits
                    .iter()
                    .map(|l| l.name())
                    .collect::<Vec<_>>()
                    .join("+")
            }
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// Writes `value` as pretty JSON.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), OutputError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| encode(path, e))?;
    std::fs::write(path, text + "\n").map_err(io(path))
}

/// Reads a `sweep.json`.
pub fn read_sweep(path: &Path) -> Result<SweepResult, OutputError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    serde_json::from_str(&text).map_err(|e| encode(path, format!("not a sweep.json: {e}")))
}

/// Writes every output of `result` into `dir` (created if missing): `sweep.json`,
/// `curves.parquet`, `capacity.csv`, `capacity.json`.
pub fn write_sweep_outputs(dir: &Path, result: &SweepResult) -> Result<(), OutputError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    write_json(&dir.join("sweep.json"), result)?;
    write_curves_parquet(&dir.join("curves.parquet"), result)?;
    write_capacity_csv(&dir.join("capacity.csv"), result)?;
    write_json(&dir.join("capacity.json"), &result.capacities)
}

/// Joins shard results into one, as if unsharded: rows ordered by configuration. Shards must
/// come from the same sweep (same SLO, load kind and grid) and must not overlap.
pub fn merge(mut shards: Vec<SweepResult>) -> Result<SweepResult, OutputError> {
    let Some(first) = shards.first().cloned() else {
        return Err(OutputError::Merge("no shard given".into()));
    };
    for shard in &shards {
        if shard.slo != first.slo
            || shard.load_kind != first.load_kind
            || shard.grid_keys != first.grid_keys
            || shard.grid_values != first.grid_values
        {
            return Err(OutputError::Merge(format!(
                "shard {} is from a different sweep (SLO, load axis or grid differ from shard {})",
                shard.shard, first.shard
            )));
        }
        if shard.shard.count != first.shard.count {
            return Err(OutputError::Merge(format!(
                "shard {} and shard {} cut the sweep differently",
                shard.shard, first.shard
            )));
        }
    }
    shards.sort_by_key(|s| s.shard.index);
    for pair in shards.windows(2) {
        if pair[0].shard.index == pair[1].shard.index {
            return Err(OutputError::Merge(format!(
                "shard {} is given twice",
                pair[0].shard
            )));
        }
    }
    let complete = shards.iter().all(|s| s.complete) && shards.len() as u32 == first.shard.count;
    let mut curves: Vec<CurveRow> = shards
        .iter()
        .flat_map(|s| s.curves.iter().cloned())
        .collect();
    curves.sort_by(|a, b| {
        a.config_index
            .cmp(&b.config_index)
            .then(a.load.total_cmp(&b.load))
            .then(a.seed.cmp(&b.seed))
    });
    let mut capacities: Vec<_> = shards
        .iter()
        .flat_map(|s| s.capacities.iter().cloned())
        .collect();
    capacities.sort_by_key(|c| c.config_index);
    let mut details: Vec<_> = shards
        .iter()
        .flat_map(|s| s.details.iter().cloned())
        .collect();
    details.sort_by_key(|d| d.config_index);
    let sensitivities: Vec<Sensitivity> = shards
        .iter()
        .flat_map(|s| s.shard_sensitivities.iter().cloned())
        .collect();
    let mut merged = SweepResult {
        shard: Shard::WHOLE,
        complete,
        curves,
        capacities,
        details,
        shard_sensitivities: Vec::new(),
        ..first
    };
    keep_the_answers_sensitivity(&mut merged, &sensitivities);
    Ok(merged)
}

/// Puts into `merged`'s review the sensitivity run of the configuration that answers, out of the
/// shards' runs of every configuration; none when the merge is incomplete (no answer yet).
fn keep_the_answers_sensitivity(merged: &mut SweepResult, sensitivities: &[Sensitivity]) {
    let chosen = merged
        .review
        .as_ref()
        .filter(|_| merged.complete)
        .and_then(|review| {
            let q = &review.question;
            answering_row(merged, q.mean_rate_rps, q.growth)
        })
        .map(|row| row.configuration.clone());
    let sensitivity = chosen.and_then(|configuration| {
        sensitivities
            .iter()
            .find(|s| s.configuration == configuration)
            .cloned()
    });
    if let Some(review) = merged.review.as_mut() {
        review.sensitivity = sensitivity;
    }
}
