//! A sharded sweep on a real scheduler: a one-node Slurm on 127.0.0.1 (`scripts/slurm_local.py`,
//! which installs Debian's slurm-wlm and munge when missing, starts the daemons and stops them by
//! PID) runs `capsim sweep --shard I/4` as a 4-task job array and `capsim merge` as a job that
//! depends on it. Every file the merge writes must equal, byte for byte, the file the unsharded
//! sweep writes, and nothing the cluster started or wrote may be left behind. The Kubernetes
//! manifests beside the Slurm scripts are checked as far as that can be done without a cluster.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{capsim, repo, text};

/// The sweep every run of the test makes: the shipped example, a 2 x 2 grid, 5 loads, 2 seeds.
const SWEEP: &[&str] = &[
    "--scenario",
    "scenarios/bert-dynamic-batching.toml",
    "traces/demo.parquet",
    "--load",
    "0.5..8x:log5",
    "--grid",
    "instances=1,2",
    "--grid",
    "batcher.max_queue_delay=0ms,2ms",
    "--slo",
    "e2e.p99<=100ms",
    "--seeds",
    "2",
];

/// Runs `scripts/slurm_local.py COMMAND --dir DIR REST...` for `args` = `[COMMAND, REST...]`.
fn slurm_local(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new("python3")
        .arg(repo("scripts/slurm_local.py"))
        .arg(args[0])
        .arg("--dir")
        .arg(dir)
        .args(&args[1..])
        .output()
        .expect("python3 runs scripts/slurm_local.py")
}

/// The cluster started in `dir`, stopped (by the PIDs it wrote) when dropped.
struct Cluster {
    dir: PathBuf,
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        let install = Command::new("python3")
            .args([
                repo("scripts/slurm_local.py").to_str().expect("path"),
                "install",
            ])
            .output()
            .expect("python3 runs scripts/slurm_local.py");
        assert!(install.status.success(), "install: {}", text(&install));
        let cluster = Cluster {
            dir: dir.to_path_buf(),
        };
        let started = slurm_local(&["start"], dir);
        assert!(started.status.success(), "start: {}", text(&started));
        cluster
    }

    /// The daemons' PIDs, from the file `start` wrote.
    fn pids(&self) -> Vec<u32> {
        let written = std::fs::read_to_string(self.dir.join("pids.json")).expect("pids.json");
        let pids: serde_json::Value = serde_json::from_str(&written).expect("JSON");
        pids.as_object()
            .expect("an object")
            .values()
            .map(|pid| pid.as_u64().expect("a PID") as u32)
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        slurm_local(&["stop"], &self.dir);
    }
}

/// Whether `pid` is a live process (a zombie awaiting its parent counts as gone).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z')
        })
        .unwrap_or(false)
}

/// The names of the files in `dir`, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

#[test]
fn slurm_array_and_merge_equal_the_unsharded_sweep_and_leave_nothing_behind() {
    let work = tempfile::tempdir().expect("tempdir");
    let state = work.path().join("cluster");
    let out = work.path().join("array");
    let whole = work.path().join("whole");

    let mut args: Vec<&str> = vec!["sweep"];
    args.extend_from_slice(SWEEP);
    args.extend(["-o", whole.to_str().expect("path")]);
    let unsharded = capsim(&args);
    assert!(unsharded.status.success(), "{}", text(&unsharded));

    let cluster = Cluster::start(&state);
    let pids = cluster.pids();
    assert_eq!(pids.len(), 3, "munged, slurmctld and slurmd");
    let mut args: Vec<&str> = vec![
        "sweep",
        "--shards",
        "4",
        "--capsim",
        env!("CARGO_BIN_EXE_capsim"),
        "--out",
        out.to_str().expect("path"),
        "--",
    ];
    args.extend_from_slice(SWEEP);
    let array = slurm_local(&args, &state);
    assert!(array.status.success(), "array: {}", text(&array));
    drop(cluster);

    let merged = out.join("merged");
    assert_eq!(files(&merged), files(&whole), "the same files");
    for name in files(&whole) {
        let (a, b) = (whole.join(&name), merged.join(&name));
        assert!(
            std::fs::read(&a).expect("read") == std::fs::read(&b).expect("read"),
            "{name} differs between the unsharded sweep and the merged array ({} vs {})",
            a.display(),
            b.display()
        );
    }
    for pid in pids {
        assert!(!alive(pid), "process {pid} left running after stop");
    }
    assert!(!state.exists(), "stop left {}", state.display());
}

/// The Kubernetes manifests (scripts/k8s) cannot run here: they are checked against the Job
/// schema, with the index wired as in the Slurm array (scripts/k8s/check_manifests.py).
#[test]
fn kubernetes_jobs_are_valid_and_wire_the_index_as_the_slurm_array_does() {
    let output = Command::new(repo(".venv/bin/python"))
        .arg(repo("scripts/k8s/check_manifests.py"))
        .output()
        .expect("the project's .venv (scripts/setup.sh) runs the check");
    assert!(output.status.success(), "{}", text(&output));
}
