//! The trace: its rows drawn at a rate aimed at the scenario's rough capacity, and written as CSV.

use std::fmt::Write as _;

use rand::RngExt;
use rand::rngs::StdRng;

use super::draw::{duration, log_uniform, size};
use super::{Batching, Spec, TraceRows};

/// Requests per second the scenario roughly serves (to aim the trace's rate at it).
fn capacity_rps(spec: &Spec, mean_input: f64, mean_output: f64) -> f64 {
    spec.pools
        .iter()
        .map(|p| {
            let servers = f64::from(p.instances);
            match &p.batching {
                Batching::Dynamic(d) => {
                    let b = u64::from(d.max_batch_size);
                    let batch_ns = (d.service.mean_ns(b, mean_input as u64)
                        + (d.dispatch_latency_ns + d.release_ns(b)) as f64)
                        .max(1.0);
                    servers * f64::from(p.model_instances()) * b as f64 / batch_ns * 1e9
                }
                Batching::Continuous(c) => {
                    let seqs = f64::from(c.max_num_seqs.min(32));
                    let step_ns = (c.base_ns + c.step_overhead_ns) as f64
                        + (c.per_decode_seq_ns + c.step_overhead_per_seq_ns) as f64 * seqs
                        + c.per_prefill_token_ns as f64 * mean_input * seqs / mean_output.max(1.0);
                    servers * seqs / (step_ns * mean_output.max(1.0)) * 1e9
                }
            }
        })
        .sum::<f64>()
        .max(0.1)
}

/// The trace, and its mean arrival rate in requests per second.
pub fn draw_trace(rng: &mut StdRng, spec: &Spec) -> (TraceRows, f64) {
    let rows = if rng.random_bool(0.7) {
        rng.random_range(100..800)
    } else {
        rng.random_range(800..2_500)
    };
    let llm = spec.pools.iter().any(|p| p.continuous().is_some());
    let (input_median, output_median) = if llm {
        (log_uniform(rng, 1.0, 3.0), log_uniform(rng, 0.5, 2.3))
    } else {
        (log_uniform(rng, 0.5, 2.5), 1.0)
    };
    let rho = if rng.random_bool(0.7) {
        rng.random_range(0.2..0.95)
    } else {
        rng.random_range(0.95..1.6)
    };
    let rate_rps = rho * capacity_rps(spec, input_median, output_median);
    let bursty = rng.random_bool(0.3);
    let ties = rng.random_bool(0.1);
    let mut t_ns = if rng.random_bool(0.3) {
        duration(rng, 1e3, 5e9)
    } else {
        0
    };
    let prefix_tokens = spec
        .pools
        .iter()
        .filter_map(|p| p.continuous())
        .find(|c| c.prefix_caching)
        .map(|c| c.prefix_block_tokens);
    let mut trace = TraceRows::default();
    if spec.pools.len() > 1 {
        trace.model = Some(Vec::new());
        trace.class = Some(Vec::new());
    } else if spec.pools[0].priority_levels > 1 || rng.random_bool(0.2) {
        trace.class = Some(Vec::new());
    }
    if prefix_tokens.is_some() {
        trace.prefix_blocks = Some(Vec::new());
    }
    for _ in 0..rows {
        trace.arrival_ns.push(t_ns);
        let input = size(rng, input_median, 1.0, 1, 8_000);
        trace.input_tokens.push(input);
        trace
            .output_tokens
            .push(size(rng, output_median, 0.8, 1, 1_000));
        if let Some(models) = &mut trace.model {
            models.push(["m0", "m1", "m2"][rng.random_range(0..3)].to_string());
        }
        if let Some(classes) = &mut trace.class {
            classes.push(rng.random_range(0..5));
        }
        if let (Some(blocks), Some(per_block)) = (&mut trace.prefix_blocks, prefix_tokens) {
            // A few shared system prompts, then the request's own blocks.
            let count = input / per_block;
            let shared = rng.random_range(0..4u64);
            let own = rng.random_range(0..u64::MAX / 2);
            blocks.push(
                (0..u64::from(count))
                    .map(|k| if k < 2 { 1_000 * shared + k } else { own + k })
                    .collect(),
            );
        }
        let mut gap_s = -rng.random_range(f64::EPSILON..1.0).ln() / rate_rps;
        if bursty {
            gap_s *= if rng.random_bool(0.8) { 0.1 } else { 4.6 };
        }
        if ties && rng.random_bool(0.05) {
            gap_s = 0.0;
        }
        t_ns += (gap_s * 1e9).round() as u64;
    }
    (trace, rate_rps)
}

/// The trace as CSV and the `--map` that reads it.
pub fn trace_csv(trace: &TraceRows) -> (String, String) {
    let mut header = vec!["t", "i", "o"];
    let mut map = "arrival=t:ns,input_tokens=i,output_tokens=o".to_string();
    if trace.model.is_some() {
        header.push("m");
        map.push_str(",model=m");
    }
    if trace.class.is_some() {
        header.push("c");
        map.push_str(",class=c");
    }
    if trace.prefix_blocks.is_some() {
        header.push("p");
        map.push_str(",prefix_blocks=p");
    }
    let mut text = header.join(",");
    text.push('\n');
    for row in 0..trace.arrival_ns.len() {
        write!(
            text,
            "{},{},{}",
            trace.arrival_ns[row], trace.input_tokens[row], trace.output_tokens[row]
        )
        .unwrap();
        if let Some(m) = &trace.model {
            write!(text, ",{}", m[row]).unwrap();
        }
        if let Some(c) = &trace.class {
            write!(text, ",{}", c[row]).unwrap();
        }
        if let Some(p) = &trace.prefix_blocks {
            let list: Vec<String> = p[row].iter().map(u64::to_string).collect();
            write!(text, ",{}", list.join(";")).unwrap();
        }
        text.push('\n');
    }
    (text, map)
}
