//! `capsim calibrate --operators DIR`: the per-operator roofline calibrated on a measured operator
//! table, its error on that table, and with `--check` its predictions of other tables.

use std::path::Path;

use anyhow::Result;
use capsim_sim::timing::model_config::{self, ModelConfig};
use capsim_sim::timing::operators::accuracy::{
    ErrorReport, ErrorSummary, error_report, relative_errors,
};
use capsim_sim::timing::operators::roofline::{Coefficients, Gpu, LayerShape, calibrate};
use capsim_sim::timing::operators::{OperatorTable, TableFormat, llmservingsim, vidur};
use capsim_sim::timing::step_spec::{ModelSource, model_source};

use super::CalibrateArgs;
use crate::cmd::BadInput;

/// Calibrates on the table in `dir` at `args.tensor_parallel` and prints the coefficients, the
/// error on the table and the error on each `--check` table.
pub fn run(dir: &Path, args: &CalibrateArgs) -> Result<()> {
    if let Some(out) = &args.out {
        return Err(BadInput(format!(
            "--out {} with --operators: the coefficients and errors are printed, nothing is \
             written; leave --out out",
            out.display()
        ))
        .into());
    }
    let model = args.model.as_deref().map(model_config).transpose()?;
    let table = load(dir, args.tensor_parallel)?;
    let shape = shape_of(&table, model.as_ref())?;
    let checks = args
        .check
        .iter()
        .map(|check| check_tables(check, &table, model.as_ref()))
        .collect::<Result<Vec<_>>>()?;
    let gpu = gpu_of(&table, args.hardware.as_deref())?;
    let coeffs = calibrate(&table, &shape, gpu).map_err(|e| BadInput(e.to_string()))?;
    println!(
        "calibrated the per-operator roofline on {} {} tp{} ({}){}",
        table.gpu,
        table.model,
        table.tensor_parallel,
        table.source.display(),
        model
            .as_ref()
            .map_or(String::new(), |m| format!(" with the shape of {}", m.name))
    );
    print_coefficients(&coeffs);
    if let Some(report) = error_report(&coeffs, &shape, &table) {
        println!("error on the calibration table (fitted):");
        print_report(&report);
    }
    for (dir, tables) in args.check.iter().zip(&checks) {
        print_check(&coeffs, dir, tables, &table);
    }
    Ok(())
}

/// The model `--model` names: a shipped preset (`qwen3-32b`), else the path of a Hugging Face
/// config.json.
fn model_config(name: &Path) -> Result<ModelConfig> {
    let text = name.to_str().ok_or_else(|| {
        BadInput(format!(
            "--model {}: the name is not UTF-8; give a preset or a config.json path",
            name.display()
        ))
    })?;
    let source = model_source(text).map_err(|_| {
        BadInput(format!(
            "--model {text:?} with --operators is neither a model preset ({}) nor the path of a \
             Hugging Face config.json",
            model_config::PRESET_NAMES.join(", ")
        ))
    })?;
    match source {
        ModelSource::Preset(config) => Ok(*config),
        ModelSource::File(path) => {
            ModelConfig::load(path).map_err(|e| BadInput(format!("--model: {e}")).into())
        }
    }
}

/// The table in `dir` at `tensor_parallel` ranks; what the user can fix is bad input.
fn load(dir: &Path, tensor_parallel: u32) -> Result<OperatorTable> {
    OperatorTable::load(dir, tensor_parallel).map_err(|e| BadInput(e.to_string()).into())
}

/// The layer shape of `table`: a Vidur table's own columns (a `model` given must agree with
/// them), an LLMServingSim bundle's from `model`, which it needs since it records no shape (and
/// which must fit the per-rank shape its profiler ran).
fn shape_of(table: &OperatorTable, model: Option<&ModelConfig>) -> Result<LayerShape> {
    let tp = u64::from(table.tensor_parallel);
    match table.format {
        TableFormat::Vidur => {
            let own = vidur::layer_shape(&table.source, table.tensor_parallel)
                .map_err(|e| BadInput(e.to_string()))?;
            match model.map(|m| LayerShape::from_config(m, tp)) {
                Some(given) if !same_widths(&given, &own) => Err(BadInput(format!(
                    "{}: --model {} ({}) disagrees with the shape the table records ({}); a \
                     Vidur table carries its model's shape, so leave --model out",
                    table.source.display(),
                    model.map_or("", |m| m.name.as_str()),
                    describe(&given),
                    describe(&own)
                ))
                .into()),
                _ => Ok(own),
            }
        }
        TableFormat::LlmServingSim => match model {
            Some(config) => {
                llmservingsim::check_model(&table.source, config)
                    .map_err(|e| BadInput(e.to_string()))?;
                Ok(LayerShape::from_config(config, tp))
            }
            None => Err(BadInput(format!(
                "{}: the model's shape (hidden size, heads, ...) is unknown, since the table does \
                 not record it; give --model with a preset ({}) or the path of {}'s config.json",
                table.source.display(),
                model_config::PRESET_NAMES.join(", "),
                table.model
            ))
            .into()),
        },
    }
}

/// Whether two shapes have the same widths, heads and vocabulary (Vidur's columns; its tables
/// record no q/k norm).
fn same_widths(a: &LayerShape, b: &LayerShape) -> bool {
    LayerShape {
        qk_norm: b.qk_norm,
        ..*a
    } == *b
}

fn describe(s: &LayerShape) -> String {
    format!(
        "hidden {}, heads {} x {}, kv heads {}, intermediate {}, vocab {}",
        s.hidden, s.heads, s.head_dim, s.kv_heads, s.intermediate, s.vocab
    )
}

/// `--hardware`, or the catalogue entry of the GPU the table names, as the per-operator
/// roofline sees it.
fn gpu_of(table: &OperatorTable, hardware: Option<&str>) -> Result<Gpu> {
    let name = hardware.unwrap_or(&table.gpu);
    let entry = capsim_sim::timing::hardware::lookup(name).map_err(|e| {
        BadInput(format!(
            "{}: {e}; give --hardware with the GPU the table was measured on",
            table.source.display()
        ))
    })?;
    Gpu::of(entry).map_err(|e| {
        BadInput(format!(
            "{}: {e}; the per-operator roofline cannot run on it",
            table.source.display()
        ))
        .into()
    })
}

fn print_coefficients(c: &Coefficients) {
    let g = &c.gemm;
    println!(
        "GEMM: launch {:.2} us, peak compute efficiency {:.3}, half of it at {:.1} tokens, \
         last-wave exponent {:.3}, bandwidth efficiency {:.3}",
        g.launch_ns * 1e-3,
        g.peak_compute_efficiency,
        g.half_efficiency_tokens,
        g.wave_exponent,
        g.bandwidth_efficiency
    );
    println!(
        "element-wise: launch {:.2} us",
        c.elementwise_launch_ns * 1e-3
    );
    let mut rows: Vec<_> = c
        .elementwise
        .iter()
        .map(|(op, e)| (op.name(), *e))
        .collect();
    rows.push(("(others)", c.elementwise_pooled));
    for (name, e) in rows {
        println!(
            "  {name:<16} {:.3} ns per value of a row, bandwidth efficiency {:.3}",
            e.row_ns_per_value, e.bandwidth_efficiency
        );
    }
}

fn print_report(report: &ErrorReport) {
    println!(
        "  {:<16} {:>7} {:>8} {:>8}",
        "operator", "points", "median", "p90"
    );
    for (op, s) in &report.per_operator {
        print_summary(op.name(), s);
    }
    print_summary("all", &report.overall);
}

fn print_summary(name: &str, s: &ErrorSummary) {
    println!(
        "  {name:<16} {:>7} {:>7.1}% {:>7.1}%",
        s.points,
        100.0 * s.median,
        100.0 * s.p90
    );
}

/// The table in `dir` at every tensor-parallel degree it has (a bundle's `tp_degrees`, Vidur's
/// rows), each with its shape: Vidur's own, a bundle's `model`'s, so a bundle must be of the
/// calibration bundle's model.
fn check_tables(
    dir: &Path,
    calibrated: &OperatorTable,
    model: Option<&ModelConfig>,
) -> Result<Vec<(OperatorTable, LayerShape)>> {
    let degrees =
        OperatorTable::tensor_parallel_degrees(dir).map_err(|e| BadInput(e.to_string()))?;
    degrees
        .into_iter()
        .map(|tp| {
            let table = load(dir, tp)?;
            refuse_another_bundle_model(&table, calibrated)?;
            let shape = match table.format {
                TableFormat::Vidur => shape_of(&table, None)?,
                TableFormat::LlmServingSim => shape_of(&table, model)?,
            };
            Ok((table, shape))
        })
        .collect()
}

/// Prints the error predicting each of `tables` (the degrees of the table in `dir`) and all of
/// them together; the rows `calibrated` on are marked fitted.
fn print_check(
    coeffs: &Coefficients,
    dir: &Path,
    tables: &[(OperatorTable, LayerShape)],
    calibrated: &OperatorTable,
) {
    let mut pooled = Vec::new();
    let mut name = String::new();
    for (table, shape) in tables {
        let tp = table.tensor_parallel;
        name = format!("{} {}", table.gpu, table.model);
        if let Some(report) = error_report(coeffs, shape, table) {
            let fitted = same_folder(dir, &calibrated.source) && tp == calibrated.tensor_parallel;
            let kind = if fitted { "fitted" } else { "prediction" };
            println!("error predicting {name} tp{tp} ({kind}):");
            print_report(&report);
        }
        pooled.extend(
            relative_errors(coeffs, shape, table)
                .into_iter()
                .flat_map(|(_, e)| e),
        );
    }
    if let Some(all) = ErrorSummary::of(pooled) {
        println!("error predicting {name}, every tp:");
        print_summary("all", &all);
    }
}

/// A bundle checked after calibrating on a bundle of another model would be predicted with the
/// wrong shape: `--model` gives one for both.
fn refuse_another_bundle_model(table: &OperatorTable, calibrated: &OperatorTable) -> Result<()> {
    let both_bundles = table.format == TableFormat::LlmServingSim
        && calibrated.format == TableFormat::LlmServingSim;
    if both_bundles && table.model != calibrated.model {
        return Err(BadInput(format!(
            "--check {}: the bundle is of {}, the calibration bundle of {}; --model gives one \
             shape to both, so check bundles of the same model",
            table.source.display(),
            table.model,
            calibrated.model
        ))
        .into());
    }
    Ok(())
}

/// Whether `a` and `b` name the same folder (the same path when either cannot be resolved).
fn same_folder(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
