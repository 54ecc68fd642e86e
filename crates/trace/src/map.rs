//! The one `--map` grammar: `KEY=COL[:UNIT],KEY=COL,...`, for traces and measured logs alike.
//!
//! [`map_entries`] splits a `--map` value into typed [`MapEntry`]s, in order, each checked
//! against the keys and units of the [`MapReader`] that reads it: the trace ingest
//! ([`ColumnMap::apply`](crate::ColumnMap::apply), for `simulate`, `sweep` and the other commands
//! that read a trace) or a measured log's (`capsim fit`). The keys are one list ([`MapKey`]);
//! each reader knows a part of it and refuses the rest. The reader turns entries into its map and
//! a [`MapError`] into its own message.
//!
//! Unit rules, as each reader had them: the trace reads a unit only on `arrival` (after its last
//! colon: `datetime`, `s`, `ms`, `us` or `ns`) and trims keys and columns; a measured log reads a
//! unit on every key (after its first colon: `s`, `ms`, `us` or `ns`), before it checks the key.

use crate::timestamp::TimeUnit;

/// Who reads a `--map`: each knows its own keys and units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapReader {
    /// The trace ingest: arrivals, sizes, metadata and observed latencies in ms.
    Trace,
    /// A measured per-request log for a fit: arrivals, sizes and the token times or latencies.
    Log,
}

/// A `--map` key, the union of what the readers know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapKey {
    /// Arrival time (both readers).
    Arrival,
    /// Prompt tokens (both readers).
    InputTokens,
    /// Output tokens (both readers).
    OutputTokens,
    /// The log's request id (trace).
    RequestId,
    /// The model a request was sent to (trace).
    Model,
    /// Priority class (trace).
    Class,
    /// Prefix-block hashes (trace).
    PrefixBlocks,
    /// The log's failed flag (trace).
    Failed,
    /// Observed end-to-end latency in ms (trace).
    E2eMs,
    /// Observed queueing time in ms (trace).
    QueueMs,
    /// Observed compute time in ms (trace).
    ComputeMs,
    /// Timestamp of the first token, on the arrival's clock (log).
    FirstToken,
    /// Timestamp of the last token (log).
    LastToken,
    /// Time to first token, from the arrival (log).
    Ttft,
    /// End-to-end latency, from the arrival (log).
    E2e,
}

const ALL_KEYS: [MapKey; 15] = [
    MapKey::Arrival,
    MapKey::InputTokens,
    MapKey::OutputTokens,
    MapKey::RequestId,
    MapKey::Model,
    MapKey::Class,
    MapKey::PrefixBlocks,
    MapKey::Failed,
    MapKey::E2eMs,
    MapKey::QueueMs,
    MapKey::ComputeMs,
    MapKey::FirstToken,
    MapKey::LastToken,
    MapKey::Ttft,
    MapKey::E2e,
];

impl MapKey {
    /// The key as `--map` spells it.
    pub fn name(self) -> &'static str {
        match self {
            MapKey::Arrival => "arrival",
            MapKey::InputTokens => "input_tokens",
            MapKey::OutputTokens => "output_tokens",
            MapKey::RequestId => "request_id",
            MapKey::Model => "model",
            MapKey::Class => "class",
            MapKey::PrefixBlocks => "prefix_blocks",
            MapKey::Failed => "failed",
            MapKey::E2eMs => "e2e_ms",
            MapKey::QueueMs => "queue_ms",
            MapKey::ComputeMs => "compute_ms",
            MapKey::FirstToken => "first_token",
            MapKey::LastToken => "last_token",
            MapKey::Ttft => "ttft",
            MapKey::E2e => "e2e",
        }
    }

    /// Whether `reader` knows this key.
    pub fn read_by(self, reader: MapReader) -> bool {
        match self {
            MapKey::Arrival | MapKey::InputTokens | MapKey::OutputTokens => true,
            MapKey::FirstToken | MapKey::LastToken | MapKey::Ttft | MapKey::E2e => {
                reader == MapReader::Log
            }
            _ => reader == MapReader::Trace,
        }
    }

    /// The key `reader` knows by `name`, if any.
    pub fn named(name: &str, reader: MapReader) -> Option<MapKey> {
        ALL_KEYS
            .into_iter()
            .find(|k| k.name() == name && k.read_by(reader))
    }

    /// The names of the keys `reader` knows, in the order its docs list them.
    pub fn names(reader: MapReader) -> Vec<&'static str> {
        ALL_KEYS
            .into_iter()
            .filter(|k| k.read_by(reader))
            .map(MapKey::name)
            .collect()
    }
}

/// One `KEY=COL[:UNIT]` of a `--map`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry<'a> {
    /// The key.
    pub key: MapKey,
    /// The source column; empty for `key=` (which drops an optional trace column).
    pub column: &'a str,
    /// The unit after the colon; `None` when the entry gives none (each reader has its default).
    pub unit: Option<TimeUnit>,
}

/// What is wrong with one entry of a `--map`; each reader words it its own way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// The entry has no `=`.
    #[error("entry {entry:?} is not key=COLUMN")]
    NotKeyColumn {
        /// The entry as given (trimmed).
        entry: String,
    },
    /// The key is not one the reader knows.
    #[error("unknown key {key:?}")]
    UnknownKey {
        /// The key as given.
        key: String,
    },
    /// The unit after the colon is not one the reader knows.
    #[error("unknown time unit {unit:?} of {key:?}")]
    UnknownUnit {
        /// The key as given.
        key: String,
        /// The unit as given.
        unit: String,
    },
    /// A required column (the trace's `arrival` or `input_tokens`) was left empty.
    #[error("{} needs a column", key.name())]
    NoColumn {
        /// The key.
        key: MapKey,
    },
}

/// The entries of `spec` as `reader` reads them, in order, each checked on its own; empty
/// entries (`a=x,,b=y`) are skipped. A caller stops at the first error.
pub fn map_entries(
    spec: &str,
    reader: MapReader,
) -> impl Iterator<Item = Result<MapEntry<'_>, MapError>> {
    spec.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(move |entry| {
            let (key, column) = entry
                .split_once('=')
                .ok_or_else(|| MapError::NotKeyColumn {
                    entry: entry.to_string(),
                })?;
            match reader {
                MapReader::Trace => trace_entry(key.trim(), column.trim()),
                MapReader::Log => log_entry(key, column),
            }
        })
}

/// A trace entry: the key first; a unit only on `arrival`, after its last colon.
fn trace_entry<'a>(key: &str, column: &'a str) -> Result<MapEntry<'a>, MapError> {
    let key = MapKey::named(key, MapReader::Trace).ok_or_else(|| MapError::UnknownKey {
        key: key.to_string(),
    })?;
    let (column, unit) = match (key, column.rsplit_once(':')) {
        (MapKey::Arrival, Some((name, unit))) => {
            let parsed = TimeUnit::parse(unit).ok_or_else(|| MapError::UnknownUnit {
                key: key.name().to_string(),
                unit: unit.to_string(),
            })?;
            (name, Some(parsed))
        }
        _ => (column, None),
    };
    if column.is_empty() && matches!(key, MapKey::Arrival | MapKey::InputTokens) {
        return Err(MapError::NoColumn { key });
    }
    Ok(MapEntry { key, column, unit })
}

/// A measured log's entry: the unit (after the first colon, on any key) first, then the key.
fn log_entry<'a>(key: &str, value: &'a str) -> Result<MapEntry<'a>, MapError> {
    let (column, unit) = match value.split_once(':') {
        Some((name, unit)) => {
            let parsed = TimeUnit::parse(unit)
                .filter(|u| *u != TimeUnit::Datetime)
                .ok_or_else(|| MapError::UnknownUnit {
                    key: key.to_string(),
                    unit: unit.to_string(),
                })?;
            (name, Some(parsed))
        }
        None => (value, None),
    };
    let key = MapKey::named(key, MapReader::Log).ok_or_else(|| MapError::UnknownKey {
        key: key.to_string(),
    })?;
    Ok(MapEntry { key, column, unit })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(spec: &str, reader: MapReader) -> Result<Vec<MapEntry<'_>>, MapError> {
        map_entries(spec, reader).collect()
    }

    #[test]
    fn each_reader_knows_its_keys_and_refuses_the_others() {
        assert_eq!(
            MapKey::names(MapReader::Trace).join(","),
            "arrival,input_tokens,output_tokens,request_id,model,class,prefix_blocks,failed,\
             e2e_ms,queue_ms,compute_ms"
        );
        assert_eq!(
            MapKey::names(MapReader::Log).join(","),
            "arrival,input_tokens,output_tokens,first_token,last_token,ttft,e2e"
        );
        let unknown = |key: &str| MapError::UnknownKey { key: key.into() };
        assert_eq!(all("ttft=x", MapReader::Trace), Err(unknown("ttft")));
        assert_eq!(all("e2e_ms=x", MapReader::Log), Err(unknown("e2e_ms")));
    }

    #[test]
    fn units_follow_each_readers_rules() {
        let trace = all(" arrival = t:x:ms , model=a:b", MapReader::Trace).unwrap();
        assert_eq!(
            (trace[0].column, trace[0].unit),
            ("t:x", Some(TimeUnit::Millis))
        );
        assert_eq!((trace[1].column, trace[1].unit), ("a:b", None));
        let log = all("arrival=t:ms,input_tokens=i", MapReader::Log).unwrap();
        assert_eq!((log[0].column, log[0].unit), ("t", Some(TimeUnit::Millis)));
        assert_eq!(log[1].unit, None);
        assert_eq!(
            all("arrival=t:datetime", MapReader::Log),
            Err(MapError::UnknownUnit {
                key: "arrival".into(),
                unit: "datetime".into()
            })
        );
        assert_eq!(
            all("arrival=:s", MapReader::Trace),
            Err(MapError::NoColumn {
                key: MapKey::Arrival
            })
        );
        assert_eq!(
            all("arrival", MapReader::Log),
            Err(MapError::NotKeyColumn {
                entry: "arrival".into()
            })
        );
    }
}
