//! The records `capsim simulate` wrote: each row of `requests.parquet` as a [`Rec`].

use std::path::Path;

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;

/// Null in an output time column.
pub const NONE: u64 = u64::MAX;

/// Whether an output time or index column holds a value (is not null).
pub fn present(t: u64) -> bool {
    t != NONE
}

/// One row of requests.parquet; times and indices are `NONE` (`u64::MAX`) where null.
#[derive(Debug, Clone, Default)]
pub struct Rec {
    pub request: u64,
    pub attempt: u64,
    pub pool: Option<String>,
    pub instance: u64,
    pub model_instance: u64,
    pub client: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub arrival_ns: u64,
    pub gateway_ns: u64,
    pub admitted_ns: u64,
    pub queued_ns: u64,
    pub batch_formed_ns: u64,
    pub exec_start_ns: u64,
    pub first_token_ns: u64,
    pub exec_end_ns: u64,
    pub postprocessed_ns: u64,
    pub response_ns: u64,
    pub latency_ns: u64,
    pub batch_id: u64,
    pub batch_size: u64,
    pub outcome: String,
    pub reject_reason: Option<String>,
    pub cache_hit: bool,
    pub ttft_ns: u64,
    pub tpot_ns: u64,
}

pub fn read_requests(path: &Path) -> Result<Vec<Rec>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let reader = SerializedFileReader::new(file).map_err(|e| format!("{}: {e}", path.display()))?;
    let rows = reader
        .get_row_iter(None)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut records = Vec::new();
    for row in rows {
        let row = row.map_err(|e| format!("{}: {e}", path.display()))?;
        let mut r = Rec {
            first_token_ns: NONE,
            ttft_ns: NONE,
            tpot_ns: NONE,
            ..Rec::default()
        };
        for (name, field) in row.get_column_iter() {
            let int = match field {
                Field::Null => Some(NONE),
                Field::Long(v) => Some(*v as u64),
                Field::UInt(v) => Some(u64::from(*v)),
                Field::Int(v) => Some(*v as u64),
                _ => None,
            };
            let text = match field {
                Field::Str(s) => Some(s.clone()),
                _ => None,
            };
            let slot = match name.as_str() {
                "request" => &mut r.request,
                "attempt" => &mut r.attempt,
                "instance" => &mut r.instance,
                "model_instance" => &mut r.model_instance,
                "client" => &mut r.client,
                "input_tokens" => &mut r.input_tokens,
                "output_tokens" => &mut r.output_tokens,
                "arrival_ns" => &mut r.arrival_ns,
                "gateway_ns" => &mut r.gateway_ns,
                "admitted_ns" => &mut r.admitted_ns,
                "queued_ns" => &mut r.queued_ns,
                "batch_formed_ns" => &mut r.batch_formed_ns,
                "exec_start_ns" => &mut r.exec_start_ns,
                "first_token_ns" => &mut r.first_token_ns,
                "exec_end_ns" => &mut r.exec_end_ns,
                "postprocessed_ns" => &mut r.postprocessed_ns,
                "response_ns" => &mut r.response_ns,
                "latency_ns" => &mut r.latency_ns,
                "batch_id" => &mut r.batch_id,
                "batch_size" => &mut r.batch_size,
                "ttft_ns" => &mut r.ttft_ns,
                "tpot_ns" => &mut r.tpot_ns,
                "pool" => {
                    r.pool = text;
                    continue;
                }
                "outcome" => {
                    r.outcome = text.unwrap_or_default();
                    continue;
                }
                "reject_reason" => {
                    r.reject_reason = text;
                    continue;
                }
                "fail_reason" => {
                    if !matches!(field, Field::Null) {
                        return Err(format!("a simulated request has fail_reason {field:?}"));
                    }
                    continue;
                }
                "cache_hit" => {
                    r.cache_hit = matches!(field, Field::Bool(true));
                    continue;
                }
                // A column this audit does not know yet.
                _ => continue,
            };
            *slot = int.ok_or_else(|| format!("column {name}: unexpected {field:?}"))?;
        }
        records.push(r);
    }
    Ok(records)
}
