//! The loads a validation runs at: the trace's arrivals compressed (or stretched) to a fraction
//! of the calibrated capacity, with the input lengths the server sees.

use capsim_trace::{Columns, Trace};

use super::ValidationError;

/// Checks `--loads`: each a positive finite fraction.
pub fn check_loads(loads: &[f64]) -> Result<(), ValidationError> {
    if loads.iter().any(|&l| !(l > 0.0 && l.is_finite())) {
        return Err(ValidationError::BadInput(format!(
            "--loads {loads:?}: each load must be a positive fraction such as 0.6"
        )));
    }
    Ok(())
}

/// The requests' input lengths as the server sees them: cut to `max_length`, at least 1.
pub fn served_lengths(trace: &Trace, max_length: u32) -> Vec<u32> {
    trace
        .input_tokens()
        .iter()
        .map(|&t| t.clamp(1, max_length))
        .collect()
}

/// The trace's mean rate: its requests after the first over its span, per second.
fn trace_rate_rps(trace: &Trace) -> f64 {
    let arrivals = trace.arrival_ns();
    let n = arrivals.len();
    (n - 1) as f64 / ((arrivals[n - 1] - arrivals[0]).max(1) as f64 * 1e-9)
}

/// The trace with its gaps compressed (or stretched) to `rate_rps`, from 0, and its requests
/// in the first `duration_ns` kept, with input lengths `lengths` and, when
/// `keep_output_tokens`, the trace's output lengths. The trace has at least 2 requests.
pub fn scaled_trace(
    trace: &Trace,
    lengths: &[u32],
    rate_rps: f64,
    duration_ns: u64,
    keep_output_tokens: bool,
) -> Result<Trace, ValidationError> {
    let scale = trace_rate_rps(trace) / rate_rps;
    let arrivals = trace.arrival_ns();
    let first = arrivals[0];
    let outputs = trace.output_tokens().filter(|_| keep_output_tokens);
    let mut columns = Columns {
        output_tokens: outputs.map(|_| Vec::new()),
        ..Columns::default()
    };
    for (i, &arrival) in arrivals.iter().enumerate() {
        let at_ns = ((arrival - first) as f64 * scale).round() as u64;
        if at_ns > duration_ns {
            break;
        }
        columns.arrival_ns.push(at_ns);
        columns.input_tokens.push(lengths[i]);
        if let (Some(kept), Some(all)) = (columns.output_tokens.as_mut(), outputs) {
            kept.push(all[i]);
        }
    }
    Trace::from_columns(columns).map_err(ValidationError::context("building the scaled trace"))
}
