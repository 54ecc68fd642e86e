//! Continuous-batching speed: the shared Azure conversation trace (19,366 requests, about 4 M
//! output tokens) through one H200 replica of an 8B model (`scenarios/llm-8b-h200.toml`), on one
//! core. Target: under 1 s. Run with `cargo bench -p capsim-sim --bench llm`.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use capsim_sim::build::{BuiltScenario, Profiles, build};
use capsim_sim::{RunOptions, Scenario, simulate};
use capsim_trace::{IngestOptions, Transforms};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// `scenario` with its models built (it names no profile file).
fn built(scenario: &Scenario) -> BuiltScenario {
    build(scenario, &mut Profiles::default()).expect("the scenario builds")
}

fn llm(c: &mut Criterion) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let (trace, _) = capsim_trace::load(
        &[root.join("traces/azure-conv.parquet")],
        &IngestOptions::default(),
        &Transforms::default(),
    )
    .expect("traces/azure-conv.parquet loads");
    let scenario = built(
        &Scenario::from_path(&root.join("scenarios/llm-8b-h200.toml")).expect("scenario parses"),
    );
    let options = RunOptions {
        seed: 1,
        ..RunOptions::default()
    };
    let tokens: u64 = trace
        .output_tokens()
        .expect("conv has output tokens")
        .iter()
        .map(|&t| u64::from(t))
        .sum();
    let mut group = c.benchmark_group("llm");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(8));
    group.throughput(Throughput::Elements(tokens));
    group.bench_function("azure_conv_19366_requests_1xH200", |b| {
        b.iter(|| black_box(simulate(&scenario, &trace, &options).expect("runs")))
    });
    group.finish();
}

criterion_group!(benches, llm);
criterion_main!(benches);
