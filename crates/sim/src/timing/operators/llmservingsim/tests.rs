//! The reader on the shared bundles and on small hand-written ones, and the held-out accuracy
//! of the composed per-layer times.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::*;

/// A bundle under `gpu-profiles/llmservingsim/` of the shared data (`$CAPSIM_SHARED`, or
/// `shared/` beside the checkout).
fn bundle(rel: &str) -> PathBuf {
    let root = std::env::var("CAPSIM_SHARED")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared").into());
    let dir = Path::new(&root)
        .join("gpu-profiles/llmservingsim")
        .join(rel);
    assert!(dir.is_dir(), "{} missing; set CAPSIM_SHARED", dir.display());
    dir
}

const LLAMA_4090: &str = "RTX4090/meta-llama/Llama-3.1-8B/bf16";
const QWEN_PRO6000: &str = "RTXPRO6000/Qwen/Qwen3-32B/bf16";

#[test]
fn the_rtx4090_llama_bundle_reads_every_operator_the_grid_and_no_skew() {
    let t = OperatorTable::load(&bundle(LLAMA_4090), 1).unwrap();
    assert_eq!(t.format, TableFormat::LlmServingSim);
    assert_eq!(t.gpu, "NVIDIA GeForce RTX 4090");
    assert_eq!(t.model, "meta-llama/Llama-3.1-8B");
    let dense: Vec<&str> = t
        .operators
        .keys()
        .filter(|op| op.scope() != OperatorScope::PerSequence)
        .map(|op| op.name())
        .collect();
    // Llama has no qk_norm: 9 per-layer and per-step operators.
    assert_eq!(
        dense,
        [
            "embedding",
            "layernorm",
            "qkv_proj",
            "rotary_emb",
            "o_proj",
            "gate_up_proj",
            "act_fn",
            "down_proj",
            "final_layernorm"
        ]
    );
    assert!(t.operators.contains_key(&Operator::LmHead));
    assert!(t.operators.contains_key(&Operator::Sampler));
    assert_eq!(t.attention.as_ref().map(|g| g.rows().len()), Some(8643));
    assert_eq!(t.moe, None);
    assert_eq!(t.decode_skew_alpha, None, "skew_fit.enabled is false");
    // act_fn,1,2.592 (us) is 2592 ns; 0,0,1,16,9.31067 is 9310.67 ns.
    assert_eq!(t.operators[&Operator::ActFn].points()[0], (1.0, 2592.0));
    let first = t.attention.as_ref().unwrap().at(0, 0, 1, 16);
    assert!((first - 9310.67).abs() < 1e-6, "{first}");
}

#[test]
fn the_qwen3_bundle_reads_qk_norm_and_each_degrees_alpha_default() {
    let dir = bundle(QWEN_PRO6000);
    let tp1 = read(&dir, 1).unwrap();
    assert!(tp1.operators.contains_key(&Operator::QkNorm));
    assert_eq!(
        tp1.operators.len(),
        12,
        "10 dense operators, lm_head and sampler"
    );
    assert_eq!(tp1.decode_skew_alpha, Some(0.057));
    let tp2 = read(&dir, 2).unwrap();
    assert_eq!(tp2.decode_skew_alpha, Some(0.0649));
    assert_eq!(tp2.tensor_parallel, 2);
    assert!(
        tp2.layer_dense_ns(512) < tp1.layer_dense_ns(512),
        "half the weights per rank"
    );
}

#[test]
fn a_degree_the_bundle_did_not_profile_is_refused_listing_those_it_did() {
    let err = read(&bundle(QWEN_PRO6000), 4).unwrap_err().to_string();
    assert!(
        err.contains("tensor_parallel = 4") && err.contains("tp_degrees: 1, 2"),
        "{err}"
    );
}

#[test]
fn composition_sums_per_layer_operators_by_their_calls_and_keeps_scopes_apart() {
    let t = read(&bundle(LLAMA_4090), 1).unwrap();
    let at = |op: Operator, x: f64| t.operators[&op].at(x);
    let per_layer: f64 = [
        Operator::QkvProj,
        Operator::RotaryEmb,
        Operator::OProj,
        Operator::GateUpProj,
        Operator::ActFn,
        Operator::DownProj,
    ]
    .into_iter()
    .map(|op| at(op, 100.0))
    .sum::<f64>()
        + 2.0 * at(Operator::Layernorm, 100.0);
    assert!((t.layer_dense_ns(100) - per_layer).abs() < 1e-6);
    let per_step = at(Operator::Embedding, 100.0) + at(Operator::FinalLayernorm, 100.0);
    assert!((t.per_step_ns(100) - per_step).abs() < 1e-6);
    let per_seq = at(Operator::LmHead, 7.0) + at(Operator::Sampler, 7.0);
    assert!((t.per_sequence_ns(7) - per_seq).abs() < 1e-6);
}

/// Writes a small bundle with the given `tp1/` files (name, text) into a temporary folder.
fn small_bundle(meta: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("meta.yaml"), meta).unwrap();
    std::fs::create_dir(dir.path().join("tp1")).unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join("tp1").join(name), text).unwrap();
    }
    dir
}

const META: &str = "gpu: G\nmodel: org/m\ntp_degrees: [1]\nskew_fit:\n  enabled: false\n";
const DENSE: &str = "layer,tokens,time_us\nqkv_proj,1,2.0\nqkv_proj,16,4.0\n";
const PER_SEQ: &str = "layer,sequences,time_us\nlm_head,1,10\nsampler,1,1\n";
const ATTENTION: &str =
    "prefill_chunk,kv_prefill,n_decode,kv_decode,time_us\n0,0,1,16,8\n16,0,0,0,9\n";

fn small_error(files: &[(&str, &str)]) -> String {
    let dir = small_bundle(META, files);
    read(dir.path(), 1).unwrap_err().to_string()
}

#[test]
fn a_small_bundle_reads_with_moe_and_times_in_nanoseconds() {
    let moe = "tokens,activated_experts,time_us\n1,8,50\n2,8,56\n";
    let dir = small_bundle(
        META,
        &[
            ("dense.csv", DENSE),
            ("per_sequence.csv", PER_SEQ),
            ("attention.csv", ATTENTION),
            ("moe.csv", moe),
        ],
    );
    let t = OperatorTable::load(dir.path(), 1).unwrap();
    assert_eq!(t.layer_dense_ns(16), 4000.0);
    assert_eq!(t.per_sequence_ns(1), 11_000.0);
    assert_eq!(t.moe.as_ref().map(|m| m.at(2, 8)), Some(56_000.0));
}

#[test]
fn an_unknown_layer_is_refused_naming_file_row_and_the_known_layers() {
    let dense = "layer,tokens,time_us\nqkv_proj,1,2.0\nswiglu,1,3.0\n";
    let err = small_error(&[
        ("dense.csv", dense),
        ("per_sequence.csv", PER_SEQ),
        ("attention.csv", ATTENTION),
    ]);
    assert!(
        err.contains("dense.csv: row 3")
            && err.contains("\"swiglu\"")
            && err.contains("qkv_proj")
            && err.contains("final_layernorm"),
        "{err}"
    );
}

#[test]
fn a_per_sequence_layer_in_dense_csv_is_refused_saying_where_it_belongs() {
    let dense = "layer,tokens,time_us\nqkv_proj,1,2.0\nlm_head,1,3.0\n";
    let err = small_error(&[
        ("dense.csv", dense),
        ("per_sequence.csv", PER_SEQ),
        ("attention.csv", ATTENTION),
    ]);
    assert!(
        err.contains("dense.csv: row 3") && err.contains("in per_sequence.csv"),
        "{err}"
    );
}

#[test]
fn a_bad_value_is_refused_naming_file_row_and_column() {
    let attention =
        "prefill_chunk,kv_prefill,n_decode,kv_decode,time_us\n0,0,1,16,8\n0,0,-2,16,9\n";
    let err = small_error(&[
        ("dense.csv", DENSE),
        ("per_sequence.csv", PER_SEQ),
        ("attention.csv", attention),
    ]);
    assert!(
        err.contains("attention.csv: row 3, column \"n_decode\"") && err.contains("\"-2\""),
        "{err}"
    );
    let dense = "layer,tokens,time_us\nqkv_proj,1,fast\n";
    let err = small_error(&[
        ("dense.csv", dense),
        ("per_sequence.csv", PER_SEQ),
        ("attention.csv", ATTENTION),
    ]);
    assert!(
        err.contains("dense.csv: row 2, column \"time_us\""),
        "{err}"
    );
}

#[test]
fn a_repeated_attention_point_is_refused_naming_both_rows() {
    let attention = format!("{ATTENTION}0,0,1,16,9\n");
    let err = small_error(&[
        ("dense.csv", DENSE),
        ("per_sequence.csv", PER_SEQ),
        ("attention.csv", &attention),
    ]);
    assert!(err.contains("row 4") && err.contains("row 2"), "{err}");
}

#[test]
fn missing_files_columns_and_sampler_rows_are_refused_saying_what_to_supply() {
    let err = small_error(&[("dense.csv", DENSE), ("per_sequence.csv", PER_SEQ)]);
    assert!(
        err.contains("attention.csv: not found") && err.contains("per_sequence.csv"),
        "{err}"
    );
    let no_sampler = "layer,sequences,time_us\nlm_head,1,10\n";
    let err = small_error(&[
        ("dense.csv", DENSE),
        ("per_sequence.csv", no_sampler),
        ("attention.csv", ATTENTION),
    ]);
    assert!(err.contains("no sampler rows"), "{err}");
    let no_column = "layer,time_us\nqkv_proj,2.0\n";
    let err = small_error(&[
        ("dense.csv", no_column),
        ("per_sequence.csv", PER_SEQ),
        ("attention.csv", ATTENTION),
    ]);
    assert!(err.contains("no column \"tokens\""), "{err}");
}

#[test]
fn skew_enabled_without_the_degrees_alpha_default_is_refused_naming_the_key() {
    let meta = "gpu: G\nmodel: m\ntp_degrees: [1]\nskew_fit:\n  enabled: true\n";
    let dir = small_bundle(
        meta,
        &[
            ("dense.csv", DENSE),
            ("per_sequence.csv", PER_SEQ),
            ("attention.csv", ATTENTION),
        ],
    );
    let err = read(dir.path(), 1).unwrap_err().to_string();
    assert!(err.contains("skew_fit.per_tp.1.alpha_default"), "{err}");
}

#[test]
fn a_folder_without_meta_yaml_is_refused_saying_which_folder_is_expected() {
    let dir = tempfile::tempdir().unwrap();
    let err = OperatorTable::load(dir.path(), 1).unwrap_err().to_string();
    assert!(
        err.contains("meta.yaml") && err.contains("mlp.csv"),
        "{err}"
    );
}

// Held-out accuracy.

/// Every other interior value of `values` (sorted, distinct): the 2nd, 4th, ... but never the
/// last.
fn every_other_interior(values: &BTreeSet<u64>) -> BTreeSet<u64> {
    let v: Vec<u64> = values.iter().copied().collect();
    v[1..v.len().saturating_sub(1)]
        .iter()
        .step_by(2)
        .copied()
        .collect()
}

/// `full` with every other interior token count of each dense operator removed.
fn without_dense_points(full: &OperatorTable) -> OperatorTable {
    let mut t = full.clone();
    for curve in t.operators.values_mut() {
        let xs: BTreeSet<u64> = curve.points().iter().map(|p| p.0 as u64).collect();
        let drop = every_other_interior(&xs);
        let kept = curve
            .points()
            .iter()
            .filter(|p| !drop.contains(&(p.0 as u64)));
        *curve = Curve::new(kept.copied().collect()).unwrap();
    }
    t
}

/// `table` with the attention rows whose `axis` value is in `held` removed.
fn without_attention_rows(
    table: &OperatorTable,
    axis: usize,
    held: &BTreeSet<u64>,
) -> OperatorTable {
    let mut t = table.clone();
    let rows = table.attention.as_ref().unwrap().rows();
    let kept = rows.iter().filter(|(k, _)| !held.contains(&k[axis]));
    t.attention = Some(AttentionGrid::new(kept.copied().collect()).unwrap());
    t
}

/// One layer's composed time at an attention point: the dense operators at the step's tokens
/// plus attention.
fn composed(t: &OperatorTable, k: [u64; 4]) -> f64 {
    let attention = t.attention.as_ref().unwrap().at(k[0], k[1], k[2], k[3]);
    t.layer_dense_ns(k[0] + k[2]) + attention
}

/// Held-out relative errors of composed per-layer times: `dense` at every other interior
/// token count, held out of every dense operator; `attention` at the attention rows held out
/// one axis at a time (every other interior value of the axis), composed with the dense
/// operators at the step's tokens; `both` the same attention points with the dense points held
/// out too.
struct HeldOut {
    dense: Vec<f64>,
    attention: Vec<f64>,
    both: Vec<f64>,
}

fn held_out_errors(full: &OperatorTable) -> HeldOut {
    let error = |got: f64, want: f64| (got - want).abs() / want;
    let sparse_dense = without_dense_points(full);
    let tokens: BTreeSet<u64> = full.operators[&Operator::QkvProj]
        .points()
        .iter()
        .map(|p| p.0 as u64)
        .collect();
    let dense = every_other_interior(&tokens)
        .into_iter()
        .map(|t| error(sparse_dense.layer_dense_ns(t), full.layer_dense_ns(t)))
        .collect();
    let rows = full.attention.as_ref().unwrap().rows();
    let (mut attention, mut both) = (Vec::new(), Vec::new());
    for axis in 0..4 {
        let values: BTreeSet<u64> = rows.iter().map(|(k, _)| k[axis]).collect();
        let held = every_other_interior(&values);
        let sparse = without_attention_rows(full, axis, &held);
        let sparse_both = without_attention_rows(&sparse_dense, axis, &held);
        for (k, _) in rows.iter().filter(|(k, _)| held.contains(&k[axis])) {
            let want = composed(full, *k);
            attention.push(error(composed(&sparse, *k), want));
            both.push(error(composed(&sparse_both, *k), want));
        }
    }
    HeldOut {
        dense,
        attention,
        both,
    }
}

fn quantile(errors: &mut [f64], q: f64) -> f64 {
    errors.sort_by(f64::total_cmp);
    errors[((errors.len() - 1) as f64 * q).round() as usize]
}

/// `median% p90% (n)` of `errors`.
fn summary(errors: &mut [f64]) -> String {
    let (median, p90) = (quantile(errors, 0.5), quantile(errors, 0.9));
    format!(
        "median {:.2}% p90 {:.2}% ({} points)",
        100.0 * median,
        100.0 * p90,
        errors.len()
    )
}

fn assert_held_out_within_bounds(rel: &str, tp: u32) {
    let full = read(&bundle(rel), tp).unwrap();
    let mut h = held_out_errors(&full);
    let mut pooled: Vec<f64> = h.dense.iter().chain(&h.attention).copied().collect();
    let (median, p90) = (quantile(&mut pooled, 0.5), quantile(&mut pooled, 0.9));
    let report = format!(
        "{rel} tp{tp}: composed per-layer time on held-out rows: {} (bounds: median 3%, p90 \
         10%); dense points held out: {}; attention rows held out: {}; (not bounded: attention \
         and dense points held out at once: {})",
        summary(&mut pooled),
        summary(&mut h.dense),
        summary(&mut h.attention),
        summary(&mut h.both),
    );
    println!("{report}");
    assert!(median <= 0.03 && p90 <= 0.10, "{report}");
}

#[test]
fn held_out_rows_of_the_rtx4090_llama_tp1_table_compose_within_3_and_10_percent() {
    assert_held_out_within_bounds(LLAMA_4090, 1);
}

#[test]
fn held_out_rows_of_the_rtxpro6000_qwen3_tp1_table_compose_within_3_and_10_percent() {
    assert_held_out_within_bounds(QWEN_PRO6000, 1);
}

#[test]
fn held_out_rows_of_the_rtxpro6000_qwen3_tp2_table_compose_within_3_and_10_percent() {
    assert_held_out_within_bounds(QWEN_PRO6000, 2);
}

/// Median and p90 relative error of attention alone at the rows held out one axis at a time,
/// blending linearly or in log-space.
fn attention_held_out(full: &AttentionGrid, axis: usize, log_space: bool) -> (f64, f64) {
    let rows = full.rows();
    let values: BTreeSet<u64> = rows.iter().map(|(k, _)| k[axis]).collect();
    let held = every_other_interior(&values);
    let kept = rows.iter().filter(|(k, _)| !held.contains(&k[axis]));
    let grid = AttentionGrid::new(kept.copied().collect()).unwrap();
    let mut errors: Vec<f64> = rows
        .iter()
        .filter(|(k, _)| held.contains(&k[axis]))
        .map(|&(k, t)| {
            let got = if log_space {
                grid.at_log_space(k[0], k[1], k[2], k[3])
            } else {
                grid.at(k[0], k[1], k[2], k[3])
            };
            (got - t).abs() / t
        })
        .collect();
    (quantile(&mut errors, 0.5), quantile(&mut errors, 0.9))
}

#[test]
fn linear_interpolation_predicts_held_out_attention_better_than_log_space() {
    for (rel, tp) in [(LLAMA_4090, 1), (QWEN_PRO6000, 1), (QWEN_PRO6000, 2)] {
        let table = read(&bundle(rel), tp).unwrap();
        let grid = table.attention.as_ref().unwrap();
        for axis in 0..4 {
            let linear = attention_held_out(grid, axis, false);
            let log = attention_held_out(grid, axis, true);
            println!(
                "{rel} tp{tp} axis {axis}: linear median {:.2}% p90 {:.2}%, log-space median \
                 {:.2}% p90 {:.2}%",
                100.0 * linear.0,
                100.0 * linear.1,
                100.0 * log.0,
                100.0 * log.1
            );
            assert!(
                linear.0 <= log.0 && linear.1 <= log.1,
                "{rel} tp{tp} axis {axis}: linear {linear:?} against log-space {log:?}"
            );
        }
    }
}

#[test]
fn a_bundles_tensor_parallel_degrees_are_its_meta_tp_degrees_and_an_empty_folder_is_refused() {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/profiles/llmservingsim");
    let degrees = |rel: &str| OperatorTable::tensor_parallel_degrees(&shipped.join(rel)).unwrap();
    assert_eq!(degrees(QWEN_PRO6000), vec![1, 2]);
    assert_eq!(degrees(LLAMA_4090), vec![1]);
    let empty = tempfile::tempdir().unwrap();
    let err = OperatorTable::tensor_parallel_degrees(empty.path())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("meta.yaml") && err.contains("mlp.csv"),
        "{err}"
    );
}

#[test]
fn the_model_of_a_bundle_is_checked_against_the_per_rank_shape_its_profiler_ran() {
    use crate::timing::model_config::ModelConfig;
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/profiles/llmservingsim");
    let preset = |name| ModelConfig::preset(name).unwrap();
    // Qwen3-32B's meta records tp 2's overrides (intermediate 12800 = 25600 / 2, ...).
    check_model(&shipped.join(QWEN_PRO6000), &preset("qwen3-32b")).unwrap();
    check_model(&shipped.join(LLAMA_4090), &preset("llama-3.1-8b")).unwrap();
    let err = check_model(&shipped.join(LLAMA_4090), &preset("llama-3.1-70b"))
        .unwrap_err()
        .to_string();
    for part in [
        "meta.yaml: row 25",
        "engine_effective.hf_overrides.intermediate_size",
        "intermediate_size 14336",
        "intermediate_size 28672",
        "tp_degrees (1)",
        "meta-llama/Llama-3.1-8B",
    ] {
        assert!(err.contains(part), "{part:?} in {err}");
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("meta.yaml"), "model: m\ntp_degrees: [1]\n").unwrap();
    check_model(dir.path(), &preset("llama-3.1-70b")).expect("no overrides: not checked");
}
