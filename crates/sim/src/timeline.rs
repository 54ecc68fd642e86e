//! The timeline of a run in the Chrome trace event format (open it in Perfetto or
//! `chrome://tracing`), built from the per-request records.
//!
//! Each pool is a process (`pid` = pool index). Within it, each instance has a `queue` track
//! carrying every request's wait in the instance queue (async `b`/`e` events, since waits
//! overlap), and each model instance has a track carrying its batches as complete (`X`) events
//! with the batch id, its size and the request ids. Only a window of the run is written, so
//! files stay small: a batch is in the window when its execution starts in it, a queue wait when
//! it begins in it. Times are microseconds since the run's origin. The output is deterministic.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use serde_json::{Value, json};

use crate::output::OutputError;
use crate::record::{NONE, RequestRecord};

/// The part of a run to draw: `[start_ns, end_ns)` in simulated time since the run's origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineWindow {
    /// First nanosecond drawn.
    pub start_ns: u64,
    /// First nanosecond not drawn.
    pub end_ns: u64,
}

impl Default for TimelineWindow {
    /// The first 10 s of the run.
    fn default() -> TimelineWindow {
        TimelineWindow {
            start_ns: 0,
            end_ns: 10_000_000_000,
        }
    }
}

impl TimelineWindow {
    fn contains(self, time_ns: u64) -> bool {
        time_ns != NONE && time_ns >= self.start_ns && time_ns < self.end_ns
    }
}

/// A track within a pool's process, in display order: an instance's queue, then its model
/// instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Track {
    Queue { instance: u32 },
    Model { instance: u32, model_instance: u32 },
}

impl Track {
    fn sort_key(self) -> (u32, u8, u32) {
        match self {
            Track::Queue { instance } => (instance, 0, 0),
            Track::Model {
                instance,
                model_instance,
            } => (instance, 1, model_instance),
        }
    }

    fn name(self) -> String {
        match self {
            Track::Queue { instance } => format!("instance {instance} queue"),
            Track::Model {
                instance,
                model_instance,
            } => format!("instance {instance} model {model_instance}"),
        }
    }
}

/// One batch, gathered from its requests' records.
struct Batch {
    pool: u16,
    instance: u32,
    model_instance: u32,
    exec_start_ns: u64,
    exec_end_ns: u64,
    size: u32,
    requests: BTreeSet<u32>,
}

fn micros(time_ns: u64) -> Value {
    // Whole microseconds stay integers (smaller files); others keep the nanoseconds as decimals.
    if time_ns.is_multiple_of(1_000) {
        json!(time_ns / 1_000)
    } else {
        json!(time_ns as f64 / 1_000.0)
    }
}

/// Builds the trace events (`{"traceEvents": [...], "displayTimeUnit": "ms"}`) of the records
/// within `window`; `pool_names[i]` names pool `i` (a missing name falls back to `pool i`).
pub fn timeline_json(
    records: &[RequestRecord],
    pool_names: &[String],
    window: TimelineWindow,
) -> Value {
    let spans = spans(records, window);
    let mut events: Vec<Value> = Vec::new();
    let tids = track_events(&spans.tracks, pool_names, &mut events);
    batch_events(&spans.batches, &tids, &mut events);
    wait_events(&spans.waits, &tids, &mut events);
    json!({ "traceEvents": events, "displayTimeUnit": "ms" })
}

/// A track: its pool, its place in the pool's order, and the track.
type TrackKey = (u16, (u32, u8, u32), Track);

/// What the timeline draws, gathered from the records.
#[derive(Default)]
struct Spans {
    /// By batch id.
    batches: BTreeMap<u64, Batch>,
    /// (start, request, attempt) -> (pool, track, end), in start order.
    waits: BTreeMap<(u64, u32, u16), (u16, Track, u64)>,
    tracks: BTreeSet<TrackKey>,
}

/// The batches that start within `window` and the queue waits that begin within it, with the
/// tracks they run on.
fn spans(records: &[RequestRecord], window: TimelineWindow) -> Spans {
    let mut spans = Spans::default();
    for record in records {
        if record.instance == u32::MAX || record.pool == u16::MAX {
            continue;
        }
        let batched = record.batch_id != NONE
            && record.model_instance != u32::MAX
            && record.exec_start_ns != NONE
            && record.exec_end_ns != NONE;
        if batched && window.contains(record.exec_start_ns) {
            let batch = spans
                .batches
                .entry(record.batch_id)
                .or_insert_with(|| Batch {
                    pool: record.pool,
                    instance: record.instance,
                    model_instance: record.model_instance,
                    exec_start_ns: record.exec_start_ns,
                    exec_end_ns: record.exec_end_ns,
                    size: record.batch_size,
                    requests: BTreeSet::new(),
                });
            batch.requests.insert(record.request);
            let track = Track::Model {
                instance: record.instance,
                model_instance: record.model_instance,
            };
            spans.tracks.insert((record.pool, track.sort_key(), track));
        }
        if window.contains(record.queued_ns) {
            // The wait ends when the batch forms, or when the request leaves the queue unbatched
            // (timed out).
            let end_ns = if record.batch_formed_ns != NONE {
                record.batch_formed_ns
            } else {
                record.response_ns
            };
            if end_ns != NONE && end_ns >= record.queued_ns {
                let track = Track::Queue {
                    instance: record.instance,
                };
                spans.waits.insert(
                    (record.queued_ns, record.request, record.attempt),
                    (record.pool, track, end_ns),
                );
                spans.tracks.insert((record.pool, track.sort_key(), track));
            }
        }
    }
    spans
}

/// The metadata events that name each pool (once) and each track, in track order; returns the
/// thread id of each track: 1, 2, ... per pool.
fn track_events(
    tracks: &BTreeSet<TrackKey>,
    pool_names: &[String],
    events: &mut Vec<Value>,
) -> BTreeMap<(u16, Track), u64> {
    let mut tids: BTreeMap<(u16, Track), u64> = BTreeMap::new();
    let mut pools_named: BTreeSet<u16> = BTreeSet::new();
    for &(pool, _, track) in tracks {
        if pools_named.insert(pool) {
            let name = pool_names
                .get(usize::from(pool))
                .cloned()
                .unwrap_or_else(|| format!("pool {pool}"));
            events.push(json!({
                "name": "process_name", "ph": "M", "pid": pool, "tid": 0,
                "args": { "name": name },
            }));
        }
        let tid = tids.len() as u64 + 1;
        tids.insert((pool, track), tid);
        events.push(json!({
            "name": "thread_name", "ph": "M", "pid": pool, "tid": tid,
            "args": { "name": track.name() },
        }));
        events.push(json!({
            "name": "thread_sort_index", "ph": "M", "pid": pool, "tid": tid,
            "args": { "sort_index": tid },
        }));
    }
    tids
}

/// One complete event per batch, on its model instance's track.
fn batch_events(
    batches: &BTreeMap<u64, Batch>,
    tids: &BTreeMap<(u16, Track), u64>,
    events: &mut Vec<Value>,
) {
    for (batch_id, batch) in batches {
        let track = Track::Model {
            instance: batch.instance,
            model_instance: batch.model_instance,
        };
        let requests: Vec<u32> = batch.requests.iter().copied().collect();
        events.push(json!({
            "name": format!("batch {}", batch.size),
            "cat": "batch",
            "ph": "X",
            "pid": batch.pool,
            "tid": tids[&(batch.pool, track)],
            "ts": micros(batch.exec_start_ns),
            "dur": micros(batch.exec_end_ns.saturating_sub(batch.exec_start_ns)),
            "args": { "batch_id": batch_id, "size": batch.size, "requests": requests },
        }));
    }
}

/// A begin and an end event per queue wait, on its instance's queue track.
fn wait_events(
    waits: &BTreeMap<(u64, u32, u16), (u16, Track, u64)>,
    tids: &BTreeMap<(u16, Track), u64>,
    events: &mut Vec<Value>,
) {
    for (&(start_ns, request, attempt), &(pool, track, end_ns)) in waits {
        let tid = tids[&(pool, track)];
        let id = format!("{request}.{attempt}");
        events.push(json!({
            "name": "queue wait", "cat": "queue", "ph": "b", "id": id,
            "pid": pool, "tid": tid, "ts": micros(start_ns),
            "args": { "request": request, "attempt": attempt },
        }));
        events.push(json!({
            "name": "queue wait", "cat": "queue", "ph": "e", "id": id,
            "pid": pool, "tid": tid, "ts": micros(end_ns),
        }));
    }
}

/// Writes `timeline_json` of the records to `path` (compact JSON).
pub fn write_timeline_json(
    path: &Path,
    records: &[RequestRecord],
    pool_names: &[String],
    window: TimelineWindow,
) -> Result<(), OutputError> {
    let io_err = |source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    };
    let value = timeline_json(records, pool_names, window);
    let file = File::create(path).map_err(io_err)?;
    let mut writer = BufWriter::new(file);
    serde_json::to_writer(&mut writer, &value).map_err(|e| io_err(e.into()))?;
    writer.write_all(b"\n").map_err(io_err)?;
    writer.flush().map_err(io_err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Outcome, RequestRecord};

    fn batched(request: u32, batch_id: u64, model_instance: u32, queued_ns: u64) -> RequestRecord {
        let mut r = RequestRecord::new(request, 1, queued_ns);
        r.pool = 0;
        r.instance = 0;
        r.model_instance = model_instance;
        r.queued_ns = queued_ns;
        r.batch_id = batch_id;
        r.batch_formed_ns = 5_000_000;
        r.exec_start_ns = 5_000_000;
        r.exec_end_ns = 7_500_500;
        r.batch_size = 2;
        r.response_ns = 8_000_000;
        r.outcome = Outcome::Completed;
        r
    }

    fn events_of(value: &Value, ph: &str) -> Vec<Value> {
        value["traceEvents"]
            .as_array()
            .expect("traceEvents is an array")
            .iter()
            .filter(|e| e["ph"] == ph)
            .cloned()
            .collect()
    }

    #[test]
    fn each_batch_is_one_complete_event_with_its_requests_and_each_wait_a_begin_end_pair() {
        let mut late = batched(3, 1, 1, 20_000_000_000);
        late.exec_start_ns = 20_000_000_000;
        late.exec_end_ns = 20_001_000_000;
        late.batch_formed_ns = 20_000_000_000;
        let mut timed_out = RequestRecord::new(4, 1, 1_000_000);
        timed_out.pool = 0;
        timed_out.instance = 0;
        timed_out.queued_ns = 1_000_000;
        timed_out.response_ns = 3_000_000;
        timed_out.outcome = Outcome::TimedOut;
        let rejected = RequestRecord::new(5, 1, 0);
        let records = [
            batched(2, 0, 1, 2_000_000),
            batched(1, 0, 1, 1_000_000),
            late,
            timed_out,
            rejected,
        ];
        let value = timeline_json(
            &records,
            &["default".to_string()],
            TimelineWindow::default(),
        );

        let complete = events_of(&value, "X");
        assert_eq!(complete.len(), 1, "the batch at 20 s is outside the window");
        let batch = &complete[0];
        assert_eq!(batch["ts"], json!(5_000));
        assert_eq!(batch["dur"], json!(2_500.5));
        assert_eq!(batch["args"]["batch_id"], json!(0));
        assert_eq!(batch["args"]["size"], json!(2));
        assert_eq!(batch["args"]["requests"], json!([1, 2]));

        let begins = events_of(&value, "b");
        let ends = events_of(&value, "e");
        let begun: Vec<&Value> = begins.iter().map(|e| &e["args"]["request"]).collect();
        assert_eq!(begun, [&json!(1), &json!(4), &json!(2)], "in start order");
        assert_eq!(ends.len(), 3);
        assert_eq!(
            ends[1]["ts"],
            json!(3_000),
            "a timed-out wait ends at its timeout"
        );
        assert_eq!(
            ends[0]["ts"],
            json!(5_000),
            "a wait ends when its batch forms"
        );

        // Queue and model tracks are distinct threads of the pool's process, named.
        assert_ne!(batch["tid"], begins[0]["tid"]);
        let names: Vec<Value> = events_of(&value, "M")
            .into_iter()
            .filter(|e| e["name"] == "thread_name" || e["name"] == "process_name")
            .map(|e| e["args"]["name"].clone())
            .collect();
        assert_eq!(
            names,
            [
                json!("default"),
                json!("instance 0 queue"),
                json!("instance 0 model 1")
            ]
        );
    }

    #[test]
    fn same_records_in_any_order_give_identical_output() {
        let records = [batched(1, 0, 0, 1_000), batched(2, 0, 0, 2_000)];
        let reversed = [records[1], records[0]];
        let window = TimelineWindow::default();
        assert_eq!(
            serde_json::to_string(&timeline_json(&records, &[], window)).expect("encodes"),
            serde_json::to_string(&timeline_json(&reversed, &[], window)).expect("encodes"),
        );
    }
}
