//! Which layout a measured log has, and reading it in that layout: the one place that knows
//! every reader ([`super::log`]'s vLLM and capsim readers, [`super::inference_perf`],
//! [`super::aiperf`], [`super::mapped`]), so the readers depend on the log's types and not on
//! each other.

use std::path::Path;

use capsim_trace::Format;

use super::aiperf::read_aiperf;
use super::inference_perf::read_inference_perf;
use super::log::{
    LogError, MIN_REQUESTS, MeasuredLog, is_parquet, read_capsim_parquet, read_vllm_jsonl,
};
use super::mapped::{LogMap, read_mapped};

/// The measured-log format `--format` names: one of the trace crate's formats
/// ([`Format::parse`], the one table of names) that carries latencies
/// ([`Format::has_latencies`]); another name is an error listing those.
pub fn parse_log_format(name: &str) -> Result<Format, LogError> {
    match Format::parse(name) {
        Ok(format) if format.has_latencies() => Ok(format),
        Ok(format) => Err(no_latencies(format.name())),
        Err(_) => Err(LogError::Format {
            given: name.to_string(),
            message: format!("unknown; give one of {}", latency_formats()),
        }),
    }
}

/// The formats fit reads, `a, b, c`.
fn latency_formats() -> String {
    Format::all()
        .filter(|f| f.has_latencies())
        .map(Format::name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `--format NAME` names a trace without per-request latencies.
fn no_latencies(name: &str) -> LogError {
    LogError::Format {
        given: name.to_string(),
        message: format!(
            "a trace of arrivals and sizes, without the latencies a fit compares with; give one \
             of {}, or read the log's columns with --map",
            latency_formats()
        ),
    }
}

/// Tells a log's format from its content, as the trace crate's [`capsim_trace::detect`] does
/// for every trace and log (one detector): Parquet is capsim's requests.parquet, a format with
/// latencies is itself, and a JSON line no preset knows is read as vLLM's (whose reader names
/// any key that is missing). Content that is neither, or a trace without latencies, is
/// [`LogError::UnknownFormat`].
pub fn detect_format(path: &Path) -> Result<Format, LogError> {
    // Read errors name the log as the readers do.
    is_parquet(path)?;
    let unknown = || LogError::UnknownFormat {
        path: path.to_path_buf(),
    };
    match capsim_trace::detect(path) {
        Ok(Format::Parquet) => Ok(Format::Capsim),
        Ok(Format::Jsonl) => Ok(Format::Vllm),
        Ok(format) if format.has_latencies() => Ok(format),
        Ok(_) | Err(_) => Err(unknown()),
    }
}

/// Reads a measured log: through `map` when given (CSV, JSON lines or Parquet, see
/// [`super::mapped`]), else in the format its content shows ([`detect_format`]). Requests come
/// back sorted by arrival.
pub fn read_log(path: &Path, map: Option<&LogMap>) -> Result<MeasuredLog, LogError> {
    read_log_as(path, map, None)
}

/// [`read_log`] with the format given (`--format`) instead of detected. A format together with
/// a map is an error: the map says where everything is.
pub fn read_log_as(
    path: &Path,
    map: Option<&LogMap>,
    format: Option<Format>,
) -> Result<MeasuredLog, LogError> {
    let log = match (map, format) {
        (Some(_), Some(format)) => {
            return Err(LogError::Format {
                given: format.name().to_string(),
                message: "--map reads its own columns (of a CSV, JSON-lines or Parquet file); \
                          drop --format, or drop --map to read the tool's own layout"
                    .into(),
            });
        }
        (Some(map), None) => read_mapped(path, map)?,
        (None, format) => match format.map_or_else(|| detect_format(path), Ok)? {
            Format::Vllm => read_vllm_jsonl(path)?,
            Format::Capsim => read_capsim_parquet(path)?,
            Format::InferencePerf => read_inference_perf(path)?,
            Format::Aiperf => read_aiperf(path)?,
            other => return Err(no_latencies(other.name())),
        },
    };
    if log.len() < MIN_REQUESTS {
        let path = path.to_path_buf();
        let count = log.len();
        return Err(match log.excluded_summary() {
            None => LogError::TooFewRequests { path, count },
            Some(excluded) => LogError::TooFewKept {
                path,
                count,
                excluded,
            },
        });
    }
    Ok(log)
}
