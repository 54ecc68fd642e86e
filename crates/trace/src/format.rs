//! Trace file formats, the presets for public traces, and the column mapping (`--map`).
//!
//! A [`ColumnMap`] says which source column feeds which canonical column. Every format starts
//! from a base map (the canonical names, or a preset's), and `--map` entries override it:
//!
//! ```text
//! --map arrival=TIMESTAMP:datetime,input_tokens=ContextTokens,output_tokens=GeneratedTokens
//! ```
//!
//! Keys: `arrival` (with `:UNIT`, one of `datetime`, `s`, `ms`, `us`, `ns`), `input_tokens`,
//! `output_tokens`, `request_id`, `model`, `class`, `prefix_blocks`, `failed`, `e2e_ms`,
//! `queue_ms`, `compute_ms`. `key=` (empty column) drops an optional column.

use std::io::Read;
use std::path::Path;

use crate::TraceError;
use crate::map::{MapError, MapKey, MapReader, map_entries};
use crate::timestamp::TimeUnit;

/// How a file is read. Presets are CSV, JSONL or Parquet with a fixed [`ColumnMap`], or a load
/// generator's export read at its own (nested) keys, which `--map` does not change. Each one's
/// name, aliases and one-line description are in one table, which `--format`'s parsing, help and
/// errors read, `capsim fit`'s included ([`Format::has_latencies`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Parquet: canonical columns, or any schema through `--map`.
    Parquet,
    /// CSV with a header row, canonical names or `--map`.
    Csv,
    /// One JSON object per line, canonical names or `--map`.
    Jsonl,
    /// Azure LLM inference trace CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`).
    Azure,
    /// BurstGPT CSV (`Timestamp` s, `Request tokens`, `Response tokens`, `Model`); rows with 0
    /// response tokens are failed requests.
    BurstGpt,
    /// Mooncake JSONL (`timestamp` ms, `input_length`, `output_length`, `hash_ids`).
    Mooncake,
    /// vLLM per-request records JSONL, the measured log `capsim fit` reads: `queued_ts` s (the
    /// server's monotonic clock, on which fit counts latencies; rebased to the first request),
    /// `input_toks`, `output_toks`.
    Vllm,
    /// capsim's own `requests.parquet` (a simulation's or a replay's): `arrival_ns`,
    /// `input_tokens`, `output_tokens`.
    Capsim,
    /// inference-perf's `per_request_lifecycle_metrics.json`, a JSON array: `start_time` s,
    /// the input and output tokens under `info`; failed entries left out.
    InferencePerf,
    /// AIPerf's `profile_export.jsonl`: `metadata.request_start_ns`, the sequence lengths under
    /// `metrics`; failed and warm-up records left out.
    Aiperf,
}

/// One `--format`: its name, the other spellings accepted, a line saying what it is, whether it
/// is a preset (a layout with its own columns) and whether it carries per-request latencies.
struct Entry {
    format: Format,
    name: &'static str,
    aliases: &'static [&'static str],
    about: &'static str,
    preset: bool,
    latencies: bool,
}

/// Every format, in [`Format`]'s order (a test checks it): the one list of `--format` names.
const TABLE: [Entry; 10] = [
    Entry {
        format: Format::Parquet,
        name: "parquet",
        aliases: &[],
        about: "Parquet, canonical columns or --map",
        preset: false,
        latencies: false,
    },
    Entry {
        format: Format::Csv,
        name: "csv",
        aliases: &[],
        about: "CSV with a header row, canonical names or --map",
        preset: false,
        latencies: false,
    },
    Entry {
        format: Format::Jsonl,
        name: "jsonl",
        aliases: &["json"],
        about: "one JSON object a line, canonical keys or --map",
        preset: false,
        latencies: false,
    },
    Entry {
        format: Format::Azure,
        name: "azure",
        aliases: &[],
        about: "Azure LLM inference trace CSV",
        preset: true,
        latencies: false,
    },
    Entry {
        format: Format::BurstGpt,
        name: "burstgpt",
        aliases: &[],
        about: "BurstGPT CSV",
        preset: true,
        latencies: false,
    },
    Entry {
        format: Format::Mooncake,
        name: "mooncake",
        aliases: &[],
        about: "Mooncake JSON lines",
        preset: true,
        latencies: false,
    },
    Entry {
        format: Format::Vllm,
        name: "vllm",
        aliases: &[],
        about: "vLLM per-request records",
        preset: true,
        latencies: true,
    },
    Entry {
        format: Format::Capsim,
        name: "capsim",
        aliases: &[],
        about: "capsim's requests.parquet",
        preset: true,
        latencies: true,
    },
    Entry {
        format: Format::InferencePerf,
        name: "inference-perf",
        aliases: &["inference_perf"],
        about: "inference-perf per-request lifecycle metrics",
        preset: true,
        latencies: true,
    },
    Entry {
        format: Format::Aiperf,
        name: "aiperf",
        aliases: &[],
        about: "AIPerf per-record export",
        preset: true,
        latencies: true,
    },
];

impl Format {
    /// Parses a `--format` value (any case); an unknown one is an error listing every name.
    pub fn parse(text: &str) -> Result<Format, TraceError> {
        let text_lower = text.to_ascii_lowercase();
        TABLE
            .iter()
            .find(|e| e.name == text_lower || e.aliases.contains(&text_lower.as_str()))
            .map(|e| e.format)
            .ok_or_else(|| TraceError::BadOption {
                option: "--format",
                value: text.to_string(),
                reason: format!("use {}", Format::list(|_| true)),
            })
    }

    /// Every format, in the order help and errors list them.
    pub fn all() -> impl Iterator<Item = Format> {
        TABLE.iter().map(|e| e.format)
    }

    /// The names of the formats `keep` keeps, as `a, b or c`.
    pub fn list(keep: impl Fn(Format) -> bool) -> String {
        let names: Vec<&str> = Format::all()
            .filter(|&f| keep(f))
            .map(Format::name)
            .collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.join(""),
        }
    }

    fn entry(self) -> &'static Entry {
        &TABLE[self as usize]
    }

    /// The name `--format` accepts.
    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// What the format is, in a few words (`vLLM per-request records`).
    pub fn describe(self) -> &'static str {
        self.entry().about
    }

    /// Whether it is a preset: a layout with its own columns (all but parquet, csv and jsonl).
    pub fn is_preset(self) -> bool {
        self.entry().preset
    }

    /// Whether its records carry per-request latencies, so that `capsim fit` reads it as a
    /// measured log (vllm, capsim, inference-perf, aiperf); every format gives a trace.
    pub fn has_latencies(self) -> bool {
        self.entry().latencies
    }

    /// Whether the preset's arrival column is a clock with an arbitrary origin (vLLM's monotonic
    /// `queued_ts`, hours or days of uptime; inference-perf's `perf_counter` seconds), so that
    /// ingest rebases it to the first arrival as it does datetimes. A `--map` of another
    /// arrival column reads that column as any number.
    pub fn arrival_clock_is_arbitrary(self) -> bool {
        matches!(self, Format::Vllm | Format::InferencePerf)
    }

    /// The container the format is read with.
    pub(crate) fn container(self) -> Container {
        match self {
            Format::Parquet | Format::Capsim => Container::Parquet,
            Format::Csv | Format::Azure | Format::BurstGpt => Container::Csv,
            Format::Jsonl | Format::Mooncake | Format::Vllm => Container::Jsonl,
            Format::InferencePerf => Container::InferencePerf,
            Format::Aiperf => Container::Aiperf,
        }
    }

    /// The column map this format starts from, before `--map` overrides.
    pub fn base_map(self) -> ColumnMap {
        match self {
            Format::Parquet | Format::Csv | Format::Jsonl => ColumnMap::canonical(),
            Format::Azure => ColumnMap {
                arrival: "TIMESTAMP".into(),
                arrival_unit: Some(TimeUnit::Datetime),
                input_tokens: "ContextTokens".into(),
                output_tokens: Field::required("GeneratedTokens"),
                ..ColumnMap::none()
            },
            Format::BurstGpt => ColumnMap {
                arrival: "Timestamp".into(),
                arrival_unit: Some(TimeUnit::Seconds),
                input_tokens: "Request tokens".into(),
                output_tokens: Field::required("Response tokens"),
                model: Field::optional("Model"),
                zero_output_is_failed: true,
                ..ColumnMap::none()
            },
            Format::Mooncake => ColumnMap {
                arrival: "timestamp".into(),
                arrival_unit: Some(TimeUnit::Millis),
                input_tokens: "input_length".into(),
                output_tokens: Field::required("output_length"),
                prefix_blocks: Field::optional("hash_ids"),
                ..ColumnMap::none()
            },
            Format::Vllm => ColumnMap {
                arrival: "queued_ts".into(),
                arrival_unit: Some(TimeUnit::Seconds),
                input_tokens: "input_toks".into(),
                output_tokens: Field::required("output_toks"),
                ..ColumnMap::none()
            },
            Format::Capsim => ColumnMap {
                arrival: "arrival_ns".into(),
                arrival_unit: Some(TimeUnit::Nanos),
                input_tokens: "input_tokens".into(),
                output_tokens: Field::required("output_tokens"),
                ..ColumnMap::none()
            },
            Format::InferencePerf => INFERENCE_PERF.column_map(),
            Format::Aiperf => AIPERF.column_map(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Container {
    Parquet,
    Csv,
    Jsonl,
    /// inference-perf's JSON array, read at its own keys (`read/loadgen.rs`); no `--map`.
    InferencePerf,
    /// AIPerf's JSON lines, read at its own keys (`read/loadgen.rs`); no `--map`.
    Aiperf,
}

impl Container {
    /// Whether the reader takes its keys from a [`ColumnMap`] (and so `--map` applies).
    pub(crate) fn mapped(self) -> bool {
        !matches!(self, Container::InferencePerf | Container::Aiperf)
    }
}

/// Where an optional canonical column comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Field {
    /// Source column name; `None` means the trace has no such column.
    pub column: Option<String>,
    /// When true, a missing source column is an error; otherwise the column is just absent.
    pub required: bool,
}

impl Field {
    pub(crate) fn required(column: &str) -> Field {
        Field {
            column: Some(column.to_string()),
            required: true,
        }
    }
    fn optional(column: &str) -> Field {
        Field {
            column: Some(column.to_string()),
            required: false,
        }
    }
}

/// Which source column feeds each canonical column. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnMap {
    /// Source column of arrival times (required).
    pub arrival: String,
    /// Unit of the arrival column; `None` infers it: Parquet timestamps and text are datetimes,
    /// numbers are Unix times in the unit their magnitude implies, or else nanoseconds (see
    /// `docs/trace-format.md`).
    pub arrival_unit: Option<TimeUnit>,
    /// Source column of input sizes (required).
    pub input_tokens: String,
    /// Source column of output (generated) tokens.
    pub output_tokens: Field,
    /// Source column of the log's own request ids (text).
    pub request_id: Field,
    /// Source column of the model each request was sent to (text).
    pub model: Field,
    /// Source column of the priority class (non-negative integer, 0 most urgent).
    pub class: Field,
    /// Source column of the prefix-block hashes (a list; equal leading hashes share KV cache).
    pub prefix_blocks: Field,
    /// Source column of the log's failed flag (`true`/`false`/`1`/`0`); failed rows are kept.
    pub failed: Field,
    /// Source column of the end-to-end latency the production system observed, milliseconds.
    pub e2e_ms: Field,
    /// Source column of the queueing time the production system observed, milliseconds.
    pub queue_ms: Field,
    /// Source column of the compute time the production system observed, milliseconds.
    pub compute_ms: Field,
    /// BurstGPT: a row with 0 output tokens is a failed request (kept and flagged).
    pub zero_output_is_failed: bool,
}

/// The keys `--map` accepts.
pub const MAP_KEYS: [&str; 11] = [
    "arrival",
    "input_tokens",
    "output_tokens",
    "request_id",
    "model",
    "class",
    "prefix_blocks",
    "failed",
    "e2e_ms",
    "queue_ms",
    "compute_ms",
];

impl ColumnMap {
    /// The canonical column names; every optional column is used when present.
    pub fn canonical() -> ColumnMap {
        ColumnMap {
            arrival: "arrival".into(),
            arrival_unit: None,
            input_tokens: "input_tokens".into(),
            output_tokens: Field::optional("output_tokens"),
            request_id: Field::optional("request_id"),
            model: Field::optional("model"),
            class: Field::optional("class"),
            prefix_blocks: Field::optional("prefix_blocks"),
            failed: Field::optional("failed"),
            e2e_ms: Field::optional("e2e_ms"),
            queue_ms: Field::optional("queue_ms"),
            compute_ms: Field::optional("compute_ms"),
            zero_output_is_failed: false,
        }
    }

    pub(crate) fn none() -> ColumnMap {
        ColumnMap {
            arrival: String::new(),
            arrival_unit: None,
            input_tokens: String::new(),
            output_tokens: Field::default(),
            request_id: Field::default(),
            model: Field::default(),
            class: Field::default(),
            prefix_blocks: Field::default(),
            failed: Field::default(),
            e2e_ms: Field::default(),
            queue_ms: Field::default(),
            compute_ms: Field::default(),
            zero_output_is_failed: false,
        }
    }

    /// Applies one `--map` value (`key=COL[:UNIT],key=COL,...`, read by
    /// [`map_entries`](crate::map_entries)) on top of this map. A mapped optional column becomes
    /// required (it was asked for by name); `key=` drops it.
    pub fn apply(&mut self, spec: &str) -> Result<(), TraceError> {
        for entry in map_entries(spec, MapReader::Trace) {
            let entry = entry.map_err(|e| TraceError::BadMap {
                spec: spec.to_string(),
                reason: map_reason(&e),
            })?;
            match entry.key {
                MapKey::Arrival => {
                    self.arrival = entry.column.to_string();
                    self.arrival_unit = entry.unit;
                }
                MapKey::InputTokens => self.input_tokens = entry.column.to_string(),
                key => {
                    let Some(field) = self.field_mut(key) else {
                        unreachable!("the trace reader refuses {key:?}");
                    };
                    *field = if entry.column.is_empty() {
                        Field::default()
                    } else {
                        Field::required(entry.column)
                    };
                    if key == MapKey::Failed {
                        self.zero_output_is_failed = false;
                    }
                }
            }
        }
        Ok(())
    }

    fn field_mut(&mut self, key: MapKey) -> Option<&mut Field> {
        Some(match key {
            MapKey::OutputTokens => &mut self.output_tokens,
            MapKey::RequestId => &mut self.request_id,
            MapKey::Model => &mut self.model,
            MapKey::Class => &mut self.class,
            MapKey::PrefixBlocks => &mut self.prefix_blocks,
            MapKey::Failed => &mut self.failed,
            MapKey::E2eMs => &mut self.e2e_ms,
            MapKey::QueueMs => &mut self.queue_ms,
            MapKey::ComputeMs => &mut self.compute_ms,
            _ => return None,
        })
    }
}

/// The trace's wording of a `--map` error.
fn map_reason(error: &MapError) -> String {
    match error {
        MapError::UnknownKey { key } => {
            format!("unknown key {key:?} (keys: {})", MAP_KEYS.join(", "))
        }
        MapError::UnknownUnit { unit, .. } => {
            format!("unknown time unit {unit:?} (use datetime, s, ms, us or ns)")
        }
        MapError::NotKeyColumn { .. } | MapError::NoColumn { .. } => error.to_string(),
    }
}

/// Where a layout keeps a record's arrival and sizes: JSON pointers, each list tried in order
/// (the first that holds a non-null value is read).
pub(crate) struct Fields {
    /// The arrival, in `arrival_unit`.
    pub arrival: &'static str,
    /// The arrival's unit.
    pub arrival_unit: TimeUnit,
    /// The input (prompt) tokens.
    pub input: &'static [&'static str],
    /// The output (generated) tokens.
    pub output: &'static [&'static str],
    /// Whether a record whose `metadata.benchmark_phase` is `warmup` is left out.
    pub skip_warmup: bool,
}

impl Fields {
    /// The keys as a [`ColumnMap`], each at its first spelling (dotted), for display: the reader
    /// reads the [`Fields`] themselves.
    pub(crate) fn column_map(&self) -> ColumnMap {
        ColumnMap {
            arrival: dotted(self.arrival),
            arrival_unit: Some(self.arrival_unit),
            input_tokens: dotted(self.input[0]),
            output_tokens: Field::required(&dotted(self.output[0])),
            ..ColumnMap::none()
        }
    }
}

/// inference-perf: `start_time` in seconds of the load generator's `time.perf_counter()`; the
/// input tokens as the server counted them (`request_metrics.text`), else the older top-level
/// count; the output tokens as the server reported them (`usage.completion_tokens`), else
/// inference-perf's own count, in the current or the older layout.
pub(crate) const INFERENCE_PERF: Fields = Fields {
    arrival: "/start_time",
    arrival_unit: TimeUnit::Seconds,
    input: &[
        "/info/request_metrics/text/input_tokens",
        "/info/input_tokens",
    ],
    output: &[
        "/info/response_metrics/server_usage/completion_tokens",
        "/info/response_metrics/output_tokens",
        "/info/output_tokens",
    ],
    skip_warmup: false,
};

/// AIPerf: `metadata.request_start_ns`, Unix nanoseconds (`time.time_ns()`); the input and
/// output sequence lengths (the output's every decoded token), else the older output count.
pub(crate) const AIPERF: Fields = Fields {
    arrival: "/metadata/request_start_ns",
    arrival_unit: TimeUnit::Nanos,
    input: &["/metrics/input_sequence_length/value"],
    output: &[
        "/metrics/output_sequence_length/value",
        "/metrics/output_token_count/value",
    ],
    skip_warmup: true,
};

/// A JSON pointer as the dotted key a person reads: `/info/input_tokens` as `info.input_tokens`.
pub(crate) fn dotted(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

/// Decides the format of `path` from its extension and first bytes (header line or JSON keys):
/// a JSON array is inference-perf's report, a first JSON line with a `metadata` object and
/// `metrics` AIPerf's export (as `capsim fit` tells them), and one with the vLLM preset's keys
/// (`queued_ts`, `input_toks`, `output_toks`) a vLLM request log.
pub fn detect(path: &Path) -> Result<Format, TraceError> {
    let mut head = vec![0u8; 4096];
    let n = std::fs::File::open(path)
        .and_then(|mut f| read_up_to(&mut f, &mut head))
        .map_err(|source| TraceError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    head.truncate(n);
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    if ext == "parquet" || head.starts_with(b"PAR1") {
        return Ok(Format::Parquet);
    }
    let first_line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let first_line = String::from_utf8_lossy(first_line).trim().to_string();
    let looks_json = first_line.starts_with('{');
    if first_line.starts_with('[') && ext != "csv" {
        // One JSON array, not a line per record: inference-perf's report.
        return Ok(Format::InferencePerf);
    }
    if ext == "jsonl" || ext == "json" || looks_json {
        let first = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&first_line)
            .unwrap_or_default();
        let has = |k: &str| first.contains_key(k);
        if has("timestamp") && has("input_length") && has("output_length") {
            return Ok(Format::Mooncake);
        }
        if first
            .get("metadata")
            .is_some_and(serde_json::Value::is_object)
            && has("metrics")
        {
            return Ok(Format::Aiperf);
        }
        if has("queued_ts") && has("input_toks") && has("output_toks") {
            return Ok(Format::Vllm);
        }
        return Ok(Format::Jsonl);
    }
    let header: Vec<&str> = first_line.split(',').map(str::trim).collect();
    if header == ["TIMESTAMP", "ContextTokens", "GeneratedTokens"] {
        return Ok(Format::Azure);
    }
    let has = |k: &str| header.contains(&k);
    if has("Timestamp") && has("Request tokens") && has("Response tokens") {
        return Ok(Format::BurstGpt);
    }
    if ext == "csv" || first_line.contains(',') {
        return Ok(Format::Csv);
    }
    Err(TraceError::UnknownFormat {
        path: path.to_path_buf(),
        header: first_line.chars().take(80).collect(),
        formats: Format::all()
            .map(Format::name)
            .collect::<Vec<_>>()
            .join(", "),
    })
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_overrides_and_drops_columns() {
        let mut map = Format::Azure.base_map();
        map.apply("arrival=t:s, output_tokens=").unwrap();
        assert_eq!(map.arrival, "t");
        assert_eq!(map.arrival_unit, Some(TimeUnit::Seconds));
        assert_eq!(map.output_tokens, Field::default());
        assert_eq!(map.input_tokens, "ContextTokens");
    }

    #[test]
    fn the_table_lists_every_format_once_in_enum_order() {
        for (i, entry) in TABLE.iter().enumerate() {
            assert_eq!(entry.format as usize, i, "{}", entry.name);
            assert_eq!(Format::parse(entry.name).unwrap(), entry.format);
            for alias in entry.aliases {
                assert_eq!(Format::parse(alias).unwrap(), entry.format);
            }
        }
        assert_eq!(
            Format::list(Format::has_latencies),
            "vllm, capsim, inference-perf or aiperf"
        );
        let err = Format::parse("genai-perf").unwrap_err().to_string();
        assert!(
            err.ends_with(
                "use parquet, csv, jsonl, azure, burstgpt, mooncake, vllm, capsim, \
                           inference-perf or aiperf"
            ),
            "{err}"
        );
    }

    #[test]
    fn map_keys_are_the_trace_readers_keys() {
        assert_eq!(MAP_KEYS.to_vec(), MapKey::names(MapReader::Trace));
    }

    #[test]
    fn map_rejects_unknown_keys_and_units() {
        let mut map = ColumnMap::canonical();
        let err = map.apply("arival=x").unwrap_err().to_string();
        assert!(err.contains("unknown key \"arival\""), "{err}");
        let err = map.apply("arrival=x:hours").unwrap_err().to_string();
        assert!(err.contains("unknown time unit"), "{err}");
    }

    #[test]
    fn detects_shared_trace_presets_from_headers() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                "a.csv",
                "TIMESTAMP,ContextTokens,GeneratedTokens\n",
                Format::Azure,
            ),
            (
                "b.csv",
                "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n",
                Format::BurstGpt,
            ),
            (
                "c.jsonl",
                "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 2, \"hash_ids\": []}\n",
                Format::Mooncake,
            ),
            ("d.csv", "arrival,input_tokens\n", Format::Csv),
            (
                "e.json",
                "[\n  {\"start_time\": 1.5}\n]\n",
                Format::InferencePerf,
            ),
            (
                "f.jsonl",
                "{\"metadata\": {\"request_start_ns\": 1}, \"metrics\": {}, \"error\": null}\n",
                Format::Aiperf,
            ),
            (
                "g.jsonl",
                "{\"request_id\": \"bench-0\", \"input_toks\": 2358, \"output_toks\": 531, \
                 \"arrival_time\": 1787267980.08, \"queued_ts\": 27536.66, \
                 \"scheduled_ts\": 27536.66, \"first_token_ts\": 27537.35, \
                 \"last_token_ts\": 27554.23}\n",
                Format::Vllm,
            ),
            (
                "h.jsonl",
                "{\"arrival\": 0, \"input_tokens\": 1, \"output_tokens\": 2}\n",
                Format::Jsonl,
            ),
        ];
        for (name, text, want) in cases {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            assert_eq!(detect(&path).unwrap(), want, "{name}");
        }
    }
}
