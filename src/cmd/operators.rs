//! `capsim calibrate --operators DIR`: the per-operator roofline calibrated on a measured operator
//! table, its error on that table, and with `--check` its predictions of other tables.

use std::path::Path;

use anyhow::Result;
use capsim_sim::timing::operators::accuracy::{
    ErrorReport, ErrorSummary, error_report, relative_errors,
};
use capsim_sim::timing::operators::roofline::{Coefficients, Gpu, LayerShape, calibrate};
use capsim_sim::timing::operators::{OperatorTable, TableFormat, vidur};

use super::BadInput;
use super::calibrate::CalibrateArgs;

/// Calibrates on the table in `dir` at `args.tensor_parallel` and prints the coefficients, the
/// error on the table and the error on each `--check` table.
pub fn run(dir: &Path, args: &CalibrateArgs) -> Result<()> {
    if args.model.is_some() {
        return Err(BadInput(
            "--model with --operators would name the model's Hugging Face config.json, which is \
             not read yet; a Vidur table carries its model's shape, so leave --model out"
                .into(),
        )
        .into());
    }
    if let Some(out) = &args.out {
        return Err(BadInput(format!(
            "--out {} with --operators: the coefficients and errors are printed, nothing is \
             written; leave --out out",
            out.display()
        ))
        .into());
    }
    let table = load(dir, args.tensor_parallel)?;
    let shape = shape_of(&table)?;
    let gpu = gpu_of(&table, args.hardware.as_deref())?;
    let coeffs = calibrate(&table, &shape, gpu).map_err(|e| BadInput(e.to_string()))?;
    println!(
        "calibrated the per-operator roofline on {} {} tp{} ({})",
        table.gpu,
        table.model,
        table.tensor_parallel,
        table.source.display()
    );
    print_coefficients(&coeffs);
    if let Some(report) = error_report(&coeffs, &shape, &table) {
        println!("error on the calibration table (fitted):");
        print_report(&report);
    }
    for check in &args.check {
        check_table(&coeffs, check, &table)?;
    }
    Ok(())
}

/// The table in `dir` at `tensor_parallel` ranks; what the user can fix is bad input.
fn load(dir: &Path, tensor_parallel: u32) -> Result<OperatorTable> {
    OperatorTable::load(dir, tensor_parallel).map_err(|e| BadInput(e.to_string()).into())
}

/// The layer shape of `table`: Vidur's columns; other formats record none.
fn shape_of(table: &OperatorTable) -> Result<LayerShape> {
    match table.format {
        TableFormat::Vidur => vidur::layer_shape(&table.source, table.tensor_parallel)
            .map_err(|e| BadInput(e.to_string()).into()),
        TableFormat::LlmServingSim => Err(BadInput(format!(
            "{}: the model's shape (hidden size, heads, ...) is unknown, since the table does not \
             record it; give --model PATH/config.json",
            table.source.display()
        ))
        .into()),
    }
}

/// `--hardware`, or the preset of the GPU the table names.
fn gpu_of(table: &OperatorTable, hardware: Option<&str>) -> Result<Gpu> {
    let name = hardware.unwrap_or(&table.gpu);
    Gpu::preset(name).ok_or_else(|| {
        BadInput(format!(
            "{}: no hardware preset {name:?}; give --hardware with one of {}",
            table.source.display(),
            capsim_sim::timing::hardware::PRESET_NAMES.join(", ")
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

/// Predicts the table in `dir` at every tensor-parallel degree it has and prints the errors,
/// each degree's and all degrees' together; the rows `calibrated` on are marked fitted.
fn check_table(coeffs: &Coefficients, dir: &Path, calibrated: &OperatorTable) -> Result<()> {
    let degrees = vidur::tensor_parallel_degrees(dir).map_err(|e| BadInput(e.to_string()))?;
    let mut pooled = Vec::new();
    let mut name = String::new();
    for tp in degrees {
        let table = load(dir, tp)?;
        let shape = shape_of(&table)?;
        name = format!("{} {}", table.gpu, table.model);
        if let Some(report) = error_report(coeffs, &shape, &table) {
            let fitted = same_folder(dir, &calibrated.source) && tp == calibrated.tensor_parallel;
            let kind = if fitted { "fitted" } else { "prediction" };
            println!("error predicting {name} tp{tp} ({kind}):");
            print_report(&report);
        }
        pooled.extend(
            relative_errors(coeffs, &shape, &table)
                .into_iter()
                .flat_map(|(_, e)| e),
        );
    }
    if let Some(all) = ErrorSummary::of(pooled) {
        println!("error predicting {name}, every tp:");
        print_summary("all", &all);
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
