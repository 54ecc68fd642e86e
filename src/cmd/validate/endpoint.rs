//! `capsim validate --endpoint URL`: the simulator against a running server
//! (`capsim_endpoint::validation`). Prints the calibrated capacity and one table per load, and
//! writes `validation.json` under `-o DIR` (the library writes the per-request records there).

use std::path::PathBuf;

use anyhow::{Context, Result};
use capsim_endpoint::{EndpointRun, EndpointScenario, Protocol, Validation, check_loads};
use capsim_sim::Scenario;
use capsim_sim::quantity::parse_duration_ns;

use super::{ValidateArgs, failed};
use crate::cmd::BadInput;
use crate::cmd::shared::server::ProtocolArg;

/// Where `-o` defaults to.
const DEFAULT_OUT: &str = "output/validate-endpoint";

pub(super) fn run(args: &ValidateArgs, url: &str) -> Result<()> {
    let server = &args.server;
    let scenario_path = server.scenario.as_ref().ok_or_else(|| {
        BadInput("--scenario is required: the simulations run its default pool".into())
    })?;
    let mut scenario = Scenario::from_path(scenario_path).map_err(|e| BadInput(e.to_string()))?;
    crate::cmd::apply_sets(&mut scenario, &args.sets)?;
    let mut target = EndpointScenario::new(scenario, scenario_path).map_err(failed)?;
    check_loads(&args.loads).map_err(failed)?;
    let duration_ns =
        parse_duration_ns(&args.duration).map_err(|e| BadInput(format!("--duration: {e}")))?;
    let service = target.service(args.profile.as_deref()).map_err(failed)?;
    let protocol = match args.protocol {
        ProtocolArg::Kserve => Protocol::Kserve,
        ProtocolArg::Openai => Protocol::Openai,
    };
    let run = EndpointRun {
        url: url.to_string(),
        protocol,
        model: server.model.to_string_lossy().into_owned(),
        max_length: args.max_length.unwrap_or(512).max(1),
        seed: args.seed,
        duration_ns,
        server_trace: args.server_trace,
    };

    let loaded = server.input.load()?;
    eprintln!("{}", loaded.report_line());
    let trace = &loaded.trace;
    if trace.len() < 2 {
        return Err(BadInput("capsim validate needs a trace of at least 2 requests".into()).into());
    }
    let mut validation = Validation::new(&mut target, &service, &run, trace).map_err(failed)?;
    let capacity = validation.capacity();
    println!(
        "calibrated capacity: {:.1} rps ({} model instances, batches of {} padded to {} tokens on average (inputs {} on average) taking {:.3} ms with the {} service model)",
        capacity.rate_rps,
        capacity.model_instances,
        capacity.max_batch_size,
        capacity.padded_input_tokens,
        capacity.mean_input_tokens,
        capacity.full_batch_ms,
        service.label
    );
    let mut warn = |line: String| eprintln!("{line}");
    validation.connect(&mut warn).map_err(failed)?;

    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_OUT));
    crate::cmd::create_out_dir(&out, "--out")?;
    for &load in &args.loads {
        let result = validation.run_load(load, &out, &mut warn).map_err(failed)?;
        print!("{}", result.human(&service.label, "server's"));
        for warning in [result.late_sends_warning(), result.speed_warning()]
            .into_iter()
            .flatten()
        {
            eprintln!("{warning}");
        }
    }
    let report = validation.finish();
    let json = out.join("validation.json");
    let text = report.to_json().context("serializing the validation")?;
    std::fs::write(&json, text).with_context(|| format!("cannot write {}", json.display()))?;
    println!("wrote {}", out.display());
    Ok(())
}
