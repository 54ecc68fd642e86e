//! `capsim plan`: the fewest instances (and the best setting of the grid) that meet the SLO at
//! the trace's peak times a growth factor.

use anyhow::Result;
use capsim_report::{
    CapacityRow, GridAxis, LoadAxis, LoadKind, Shard, SweepSpec, Workload, answer_sentence,
    carried_multiple, carrying, most_carrying, review_of,
};
use clap::Args;

use super::BadInput;
use super::shared::grid::{
    GridArgs, parse_grid_args, parse_growth, parse_warmup, run_with_progress, trace_label,
};

/// Instances tried when the grid has no `instances` axis.
const DEFAULT_MAX_INSTANCES: u32 = 16;

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub grid: GridArgs,

    /// How many runner-up configurations to show.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub runners_up: usize,
}

/// The instance axis a plan searches when `--grid` gives none: 1 to
/// [`DEFAULT_MAX_INSTANCES`].
fn default_instance_axis(grids: &[String]) -> Result<Vec<GridAxis>> {
    if grids
        .iter()
        .any(|g| g.trim_start().starts_with("instances="))
    {
        return Ok(Vec::new());
    }
    Ok(vec![
        format!("instances=1..{DEFAULT_MAX_INSTANCES}")
            .parse::<GridAxis>()
            .map_err(|e| BadInput(e.to_string()))?,
    ])
}

pub fn run(args: PlanArgs) -> Result<()> {
    let growth = parse_growth(&args.grid.growth)?;
    let extra = default_instance_axis(&args.grid.grids)?;
    let (scenario, profiles, grid, slo) = parse_grid_args(&args.grid, extra)?;
    let warmup = parse_warmup(args.grid.warmup.as_deref())?;
    let loaded = args.grid.input.load()?;
    eprintln!("{}", loaded.report_line());
    let summary = capsim_trace::Summary::of(&loaded.trace);
    let Some(mean_rps) = summary.mean_rate_rps else {
        return Err(BadInput(
            "the trace needs at least two requests over a nonzero span to plan on".into(),
        )
        .into());
    };
    let peak_rps = summary.peak_rate_60s_rps;
    let workload = Workload::new(&loaded.trace, LoadKind::RateScale, warmup);
    let spec = SweepSpec {
        base: scenario,
        profiles,
        grid,
        load: LoadAxis::parse(&format!("{growth}x"), LoadKind::RateScale)
            .map_err(|e| BadInput(e.to_string()))?,
        seeds: args.grid.seeds,
        base_seed: args.grid.seed,
        slo: slo.clone(),
        max_lost_fraction: args.grid.max_lost,
        shard: Shard::WHOLE,
        cost_per_instance_hour: args.grid.cost_per_instance_hour,
        knee_sensitivity: capsim_report::DEFAULT_KNEE_SENSITIVITY,
        detail_load: None,
        curves: false,
    };
    let mut result = run_with_progress(&spec, &workload)?;
    let multiple = |row: &CapacityRow| carried_multiple(row, mean_rps);
    let feasible = carrying(&result.capacities, mean_rps, growth);
    // The configuration the answer names: the one that carries the growth with the fewest
    // instances, else the one that carries the most.
    let named = feasible
        .first()
        .copied()
        .or_else(|| most_carrying(&result.capacities, mean_rps));
    super::shared::steady::refuse_short_trace(&spec, &workload, named, Some(growth))?;
    println!(
        "SLO {slo}; trace mean {mean_rps:.1} req/s, 60 s peak {peak_rps:.1} req/s; growth {growth}x: target peak {:.1} req/s",
        peak_rps * growth
    );
    let describe = |row: &CapacityRow| {
        format!(
            "{:<58} {:>3} instances, carries {:.2}x ({:.1} req/s at the trace's mean, {:.1} at its 60 s peak; 95% interval's low end), headroom {:+.0}%",
            row.configuration,
            row.instances,
            multiple(row),
            multiple(row) * mean_rps,
            multiple(row) * peak_rps,
            (multiple(row) / growth - 1.0) * 100.0
        )
    };
    if let Some(best) = feasible.first() {
        println!("\nplan: {}", describe(best));
        if let Some(cost) = best.cost_per_million_requests {
            println!("      cost at capacity: {cost:.4} per million requests");
        }
        let others: Vec<&&CapacityRow> = feasible.iter().skip(1).take(args.runners_up).collect();
        if !others.is_empty() {
            println!("\nrunners-up:");
            for row in others {
                println!("  {}", describe(row));
            }
        }
    } else {
        let most = result.capacities.iter().map(&multiple).fold(0.0, f64::max);
        println!(
            "no configuration of the grid carries {growth}x; the best carries {most:.2}x (the answer below says what ends it)."
        );
    }
    let review = review_of(
        &spec,
        &workload,
        &result,
        trace_label(&args.grid),
        &args.grid.scenario,
        growth,
    )?;
    result.review = Some(review);
    if let Some(review) = &result.review {
        println!("\n{}", answer_sentence(&result, review));
    }
    Ok(())
}
