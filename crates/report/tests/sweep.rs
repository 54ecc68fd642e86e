//! The sweep end to end in the library: runs, outputs, report, and shard/merge equivalence.

use std::sync::atomic::AtomicBool;

use capsim_report::plot::PlotSize;
use capsim_report::{
    Grid, LoadAxis, LoadKind, Shard, SweepSpec, Workload, job_count, merge, read_sweep, run_sweep,
    write_capacity_csv, write_report, write_sweep_outputs,
};
use capsim_sim::{Profiles, Scenario, Warmup};
use capsim_trace::{Columns, Trace};

fn trace() -> Trace {
    // Arrivals every 0.8 ms on average, jittered deterministically; 6000 requests.
    let mut t = 0u64;
    let mut state = 7u64;
    let arrival_ns = (0..6000)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            t += (-u.ln() * 800_000.0) as u64;
            t
        })
        .collect();
    Trace::from_columns(Columns {
        arrival_ns,
        input_tokens: vec![32; 6000],
        ..Columns::default()
    })
    .unwrap()
}

fn spec(shard: Shard) -> SweepSpec {
    let base = Scenario::from_toml_str(
        "[timeseries]\ninterval = \"100ms\"\n[batcher]\nmax_queue_delay = \"1ms\"\n[service]\nkind = \"affine\"\na = \"1ms\"\nb = \"0.2ms\"\n",
    )
    .unwrap();
    SweepSpec {
        base,
        profiles: Profiles::default(),
        grid: Grid::new(vec![
            "batcher.max_batch_size=1,8".parse().unwrap(),
            "instances=1..2".parse().unwrap(),
        ])
        .unwrap(),
        load: LoadAxis::parse("0.25..2x:4", LoadKind::RateScale).unwrap(),
        seeds: 2,
        base_seed: 1,
        slo: "e2e.p99<=50ms".parse().unwrap(),
        max_lost_fraction: 0.001,
        shard,
        cost_per_instance_hour: Some(2.0),
        knee_sensitivity: 1.0,
        detail_load: None,
        curves: true,
    }
}

#[test]
fn sweep_writes_outputs_and_sharded_merge_equals_unsharded() {
    let trace = trace();
    let workload = Workload::new(&trace, LoadKind::RateScale, Warmup::Count(200));
    let cancel = AtomicBool::new(false);
    let whole = run_sweep(&spec(Shard::WHOLE), &workload, &|| {}, &cancel).unwrap();
    assert!(whole.complete);
    assert_eq!(whole.curves.len(), 4 * 4 * 2, "configs x loads x seeds");
    assert_eq!(whole.capacities.len(), 4);
    assert_eq!(job_count(&spec(Shard::WHOLE)), 4 * (2 * (1 + 4) + 1));
    for row in &whole.capacities {
        let capacity = row
            .capacity_rps
            .expect("every configuration has a capacity");
        assert!(capacity.mean > 0.0, "{row:?}");
        assert!(capacity.low <= capacity.mean && capacity.mean <= capacity.high);
    }
    // Batching and a second instance both raise capacity.
    let capacity = |i: usize| whole.capacities[i].capacity_rps.unwrap().mean;
    assert!(
        capacity(1) > capacity(0),
        "2 instances beat 1: {} vs {}",
        capacity(1),
        capacity(0)
    );
    assert!(
        capacity(2) > capacity(0),
        "batch 8 beats batch 1: {} vs {}",
        capacity(2),
        capacity(0)
    );

    let dir = tempfile::tempdir().unwrap();
    write_sweep_outputs(dir.path(), &whole).unwrap();
    for name in [
        "sweep.json",
        "curves.parquet",
        "capacity.csv",
        "capacity.json",
    ] {
        assert!(
            dir.path().join(name).metadata().unwrap().len() > 0,
            "{name} written"
        );
    }
    let read_back = read_sweep(&dir.path().join("sweep.json")).unwrap();
    assert_eq!(read_back.curves.len(), whole.curves.len());
    let (direct, via_json) = (
        dir.path().join("direct.csv"),
        dir.path().join("via_json.csv"),
    );
    write_capacity_csv(&direct, &whole).unwrap();
    write_capacity_csv(&via_json, &read_back).unwrap();
    // The grid has an `instances` axis: the header must still name each column once.
    let csv_text = std::fs::read_to_string(&direct).unwrap();
    let header: Vec<&str> = csv_text.lines().next().unwrap().split(',').collect();
    let unique: std::collections::BTreeSet<&str> = header.iter().copied().collect();
    assert_eq!(unique.len(), header.len(), "duplicate column in {header:?}");
    assert!(header.contains(&"instances") && header.contains(&"instances_total"));
    for row in &whole.capacities {
        let capacity = row.capacity_rps.unwrap();
        assert!(capacity.low >= 0.0, "{capacity:?}");
    }
    assert_eq!(
        std::fs::read(&direct).unwrap(),
        std::fs::read(&via_json).unwrap()
    );
    let written = write_report(dir.path(), &whole, PlotSize::DEFAULT).unwrap();
    let names: Vec<String> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for name in [
        "throughput_latency.png",
        "latency_cdf.png",
        "stage_breakdown.png",
        "timeseries.png",
        "capacity_heatmap.png",
        "report.md",
    ] {
        assert!(
            names.contains(&name.to_string()),
            "{name} missing from {names:?}"
        );
    }
    if let Some(keep) = std::env::var_os("CAPSIM_KEEP_PLOTS") {
        std::fs::create_dir_all(&keep).unwrap();
        for path in &written {
            std::fs::copy(
                path,
                std::path::Path::new(&keep).join(path.file_name().unwrap()),
            )
            .unwrap();
        }
    }

    let shards: Vec<_> = (0..3)
        .map(|i| {
            let shard = Shard { index: i, count: 3 };
            run_sweep(&spec(shard), &workload, &|| {}, &cancel).unwrap()
        })
        .collect();
    let merged = merge(shards).unwrap();
    assert!(merged.complete);
    assert_eq!(merged.curves, whole.curves);
    let (a, b) = (dir.path().join("a.csv"), dir.path().join("b.csv"));
    write_capacity_csv(&a, &whole).unwrap();
    write_capacity_csv(&b, &merged).unwrap();
    assert_eq!(
        std::fs::read(&a).unwrap(),
        std::fs::read(&b).unwrap(),
        "capacity.csv from merged shards differs from the unsharded sweep"
    );
}

#[test]
fn cancelled_sweep_keeps_nothing_started_and_says_so() {
    let trace = trace();
    let workload = Workload::new(&trace, LoadKind::RateScale, Warmup::None);
    let cancel = AtomicBool::new(true);
    let result = run_sweep(&spec(Shard::WHOLE), &workload, &|| {}, &cancel).unwrap();
    assert!(!result.complete);
    assert!(result.curves.is_empty());
}

#[test]
fn a_sweep_builds_every_run_from_the_profiles_read_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::copy(
        root.join("traces/profiles/text_classifier.cpu.json"),
        dir.path().join("p.json"),
    )
    .unwrap();
    let path = dir.path().join("s.toml");
    std::fs::write(
        &path,
        "[batcher]\nmax_batch_size = 8\nmax_queue_delay = \"1ms\"\n\
         [service]\nkind = \"profile\"\npath = \"p.json\"\n",
    )
    .unwrap();
    let base = Scenario::from_path(&path).unwrap();
    let mut profiles = Profiles::default();
    profiles.load(&base).unwrap();
    // Every configuration and load builds from the cache: without the file the sweep still runs.
    std::fs::remove_file(dir.path().join("p.json")).unwrap();
    let spec = SweepSpec {
        base,
        profiles,
        ..spec(Shard::WHOLE)
    };
    let trace = trace();
    let workload = Workload::new(&trace, LoadKind::RateScale, Warmup::None);
    let result = run_sweep(&spec, &workload, &|| {}, &AtomicBool::new(false)).unwrap();
    assert!(result.complete);
    assert_eq!(result.capacities.len(), 4, "every configuration ran");
}
