//! Triton's trace API at level TIMESTAMPS: the time each request entered the scheduler's
//! queue, started and ended its batch's compute, on Triton's own clock. Triton writes its traces
//! to a file on its machine (`--trace-config triton,file=PATH`), so only a client on that
//! machine can read them.
//!
//! Triton 2.51 keeps the traces it collected in memory and writes them to `PATH.N` (N = 0, 1,
//! ...) each time it holds `log_frequency` of them, and the rest when its trace setting is
//! changed or it stops. Posting the global setting again, unchanged, writes out the rest
//! ([`flush`]): that is how one run's traces are made readable while the server keeps running.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::EndpointError;

/// The server's global trace setting (`GET /v2/trace/setting`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TraceSetting {
    /// Where it writes, on its own machine (`PATH.N`).
    #[serde(default)]
    pub trace_file: String,
    /// What it records (`TIMESTAMPS`, `TENSORS`); empty or `OFF` when tracing is off.
    #[serde(default)]
    pub trace_level: Vec<String>,
    /// One request traced in this many.
    #[serde(default)]
    pub trace_rate: String,
    /// Traces written per file; `0` keeps them all until the setting changes.
    #[serde(default)]
    pub log_frequency: String,
    /// `triton` (the file format read here) or `opentelemetry`.
    #[serde(default)]
    pub trace_mode: String,
}

impl TraceSetting {
    /// Why this setting cannot give every request's timestamps to a client on the server's
    /// machine; `None` when it can.
    pub fn problem(&self) -> Option<String> {
        if !self.trace_mode.is_empty() && self.trace_mode != "triton" {
            return Some(format!(
                "its trace mode is {:?}: the file format read here is Triton's own (start it with --trace-config mode=triton)",
                self.trace_mode
            ));
        }
        if !self.trace_level.iter().any(|l| l == "TIMESTAMPS") {
            return Some(format!(
                "its trace level is {:?}: start it with --trace-config level=TIMESTAMPS",
                self.trace_level
            ));
        }
        if self.trace_rate.trim() != "1" {
            return Some(format!(
                "it traces one request in {}: start it with --trace-config rate=1",
                self.trace_rate
            ));
        }
        if self.trace_file.is_empty() {
            return Some(
                "it names no trace file: start it with --trace-config triton,file=PATH".into(),
            );
        }
        if self.log_frequency.trim().parse::<u64>().unwrap_or(0) == 0 {
            return Some(format!(
                "it writes its trace only when it stops (log frequency {:?}), and a run's traces must be read while it runs: start it with --trace-config triton,log-frequency=1000",
                self.log_frequency
            ));
        }
        None
    }

    /// The trace files on this machine now: `PATH` itself, then `PATH.N` by N.
    pub fn files(&self) -> Vec<PathBuf> {
        let path = Path::new(&self.trace_file);
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Vec::new();
        };
        let name = name.to_string_lossy();
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let mut numbered: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let file = entry.file_name().to_string_lossy().into_owned();
                let n = file.strip_prefix(&*name)?.strip_prefix('.')?.parse().ok()?;
                Some((n, entry.path()))
            })
            .collect();
        numbered.sort();
        let mut files: Vec<PathBuf> = path
            .is_file()
            .then(|| path.to_path_buf())
            .into_iter()
            .collect();
        files.extend(numbered.into_iter().map(|(_, p)| p));
        files
    }
}

/// Reads the server's global trace setting from `base_url` (`http://HOST:PORT`).
pub fn trace_setting(base_url: &str) -> Result<TraceSetting, EndpointError> {
    let (url, body) = super::get(base_url, "/v2/trace/setting", "trace setting")?;
    serde_json::from_slice(&body).map_err(|e| EndpointError::Protocol {
        url,
        message: format!("not Triton's trace setting ({e})"),
    })
}

/// Makes the server write out the traces it holds: posts its log frequency back unchanged,
/// which replaces its trace setting with an equal one and writes the old one's traces to the
/// next `PATH.N`.
pub fn flush(base_url: &str, setting: &TraceSetting) -> Result<(), EndpointError> {
    let body = serde_json::json!({ "log_frequency": setting.log_frequency }).to_string();
    super::post(base_url, "/v2/trace/setting", body, "trace setting").map(|_| ())
}

/// One request as Triton traced it, on Triton's clock (nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TracedRequest {
    /// The id the client sent with it (`capsim replay` sends its trace row).
    pub request_id: u64,
    /// Entered the scheduler's queue.
    pub queue_start_ns: u64,
    /// Its batch's compute started.
    pub compute_start_ns: u64,
    /// Its batch's compute ended.
    pub compute_end_ns: u64,
}

#[derive(Deserialize)]
struct Event {
    id: u64,
    #[serde(default)]
    request_id: Option<String>,
    #[serde(default)]
    timestamps: Vec<Stamp>,
}

#[derive(Deserialize)]
struct Stamp {
    name: String,
    ns: u64,
}

/// The requests traced in `files` (Triton's JSON arrays of events) that carry a numeric
/// request id and reached compute, sorted by queue start. A request id traced twice (sent again)
/// keeps its latest queue start. Errors name the file that is not Triton's trace.
pub fn read_requests(files: &[PathBuf]) -> Result<Vec<TracedRequest>, EndpointError> {
    #[derive(Default)]
    struct Partial {
        request_id: Option<u64>,
        queue_start_ns: Option<u64>,
        compute_start_ns: Option<u64>,
        compute_end_ns: Option<u64>,
    }
    let mut traces: HashMap<u64, Partial> = HashMap::new();
    for file in files {
        let text = std::fs::read(file).map_err(|e| EndpointError::ServerTrace {
            path: file.clone(),
            message: e.to_string(),
        })?;
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let events: Vec<Event> =
            serde_json::from_slice(&text).map_err(|e| EndpointError::ServerTrace {
                path: file.clone(),
                message: format!(
                    "not a Triton trace at level TIMESTAMPS in mode triton ({e}): a JSON array of {{id, timestamps: [{{name, ns}}]}} objects"
                ),
            })?;
        for event in events {
            let partial = traces.entry(event.id).or_default();
            if let Some(id) = event.request_id.as_deref().and_then(|s| s.parse().ok()) {
                partial.request_id = Some(id);
            }
            for stamp in event.timestamps {
                match stamp.name.as_str() {
                    "QUEUE_START" => partial.queue_start_ns = Some(stamp.ns),
                    "COMPUTE_START" => partial.compute_start_ns = Some(stamp.ns),
                    "COMPUTE_END" => partial.compute_end_ns = Some(stamp.ns),
                    _ => {}
                }
            }
        }
    }
    let mut latest: HashMap<u64, TracedRequest> = HashMap::new();
    for partial in traces.into_values() {
        let (Some(request_id), Some(queue), Some(start), Some(end)) = (
            partial.request_id,
            partial.queue_start_ns,
            partial.compute_start_ns,
            partial.compute_end_ns,
        ) else {
            continue;
        };
        let request = TracedRequest {
            request_id,
            queue_start_ns: queue,
            compute_start_ns: start.max(queue),
            compute_end_ns: end.max(start.max(queue)),
        };
        latest
            .entry(request_id)
            .and_modify(|r| {
                if request.queue_start_ns > r.queue_start_ns {
                    *r = request;
                }
            })
            .or_insert(request);
    }
    let mut requests: Vec<TracedRequest> = latest.into_values().collect();
    requests.sort_by_key(|r| (r.queue_start_ns, r.request_id));
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(level: &[&str], rate: &str, file: &str) -> TraceSetting {
        TraceSetting {
            trace_file: file.to_string(),
            trace_level: level.iter().map(|s| s.to_string()).collect(),
            trace_rate: rate.to_string(),
            log_frequency: "1000".to_string(),
            trace_mode: "triton".to_string(),
        }
    }

    #[test]
    fn a_setting_without_timestamps_every_request_or_a_file_says_what_to_start_triton_with() {
        assert_eq!(setting(&["TIMESTAMPS"], "1", "/tmp/t.json").problem(), None);
        let off = setting(&["OFF"], "1", "/tmp/t.json").problem().unwrap();
        assert!(off.contains("level=TIMESTAMPS"), "{off}");
        let sampled = setting(&["TIMESTAMPS"], "1000", "/tmp/t.json")
            .problem()
            .unwrap();
        assert!(sampled.contains("rate=1"), "{sampled}");
        let nowhere = setting(&["TIMESTAMPS"], "1", "").problem().unwrap();
        assert!(nowhere.contains("file=PATH"), "{nowhere}");
        let at_exit = TraceSetting {
            log_frequency: "0".to_string(),
            ..setting(&["TIMESTAMPS"], "1", "/tmp/t.json")
        };
        let at_exit = at_exit.problem().unwrap();
        assert!(at_exit.contains("log-frequency=1000"), "{at_exit}");
    }

    #[test]
    fn requests_merge_their_events_across_files_and_keep_the_latest_send_of_an_id() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.json");
        let ns = |name: &str, ns: u64| format!(r#"{{"name":"{name}","ns":{ns}}}"#);
        // Trace 1: request 7, sent twice (trace 3 is the later send); trace 2 never reached
        // compute; trace 4 has no request id.
        std::fs::write(
            dir.path().join("trace.json.0"),
            format!(
                r#"[{{"id":1,"model_name":"m","request_id":"7"}},
                    {{"id":1,"timestamps":[{}]}},
                    {{"id":2,"request_id":"8","timestamps":[{}]}}]"#,
                ns("QUEUE_START", 100),
                ns("QUEUE_START", 150)
            ),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("trace.json.1"),
            format!(
                r#"[{{"id":1,"timestamps":[{},{}]}},
                    {{"id":3,"request_id":"7","timestamps":[{},{},{}]}},
                    {{"id":4,"timestamps":[{},{},{}]}}]"#,
                ns("COMPUTE_START", 200),
                ns("COMPUTE_END", 300),
                ns("QUEUE_START", 1000),
                ns("COMPUTE_START", 1100),
                ns("COMPUTE_END", 1400),
                ns("QUEUE_START", 500),
                ns("COMPUTE_START", 600),
                ns("COMPUTE_END", 700)
            ),
        )
        .unwrap();
        let files = setting(&["TIMESTAMPS"], "1", path.to_str().unwrap()).files();
        assert_eq!(files.len(), 2, "{files:?}");
        let requests = read_requests(&files).unwrap();
        assert_eq!(
            requests,
            vec![TracedRequest {
                request_id: 7,
                queue_start_ns: 1000,
                compute_start_ns: 1100,
                compute_end_ns: 1400,
            }]
        );
    }

    #[test]
    fn a_file_that_is_not_a_trace_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("trace.json.0");
        std::fs::write(&file, "{\"not\": \"a list\"}").unwrap();
        let err = read_requests(std::slice::from_ref(&file))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("trace.json.0") && err.contains("JSON array"),
            "{err}"
        );
    }
}
