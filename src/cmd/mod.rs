//! One module per subcommand group; each maps its flags onto a library call.

pub mod calibrate;
pub mod fit;
pub mod plan;
pub mod replay;
pub mod report;
pub mod shared;
pub mod simulate;
pub mod sweep;
pub mod trace;
pub mod validate;

// The commands' and `input.rs`'s error for bad input lives at the root, which both use.
pub use crate::BadInput;

/// `e` as bad input (exit 2), for `map_err` and early returns.
pub fn bad_input(e: impl std::fmt::Display) -> anyhow::Error {
    BadInput(e.to_string()).into()
}

/// Creates `dir` and its parents for the output that `flag` names. A folder that cannot be
/// made there is bad input (exit 2): the user picks another path.
pub fn create_out_dir(dir: &std::path::Path, flag: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| {
        BadInput(format!(
            "{flag}: cannot create the folder {} ({e}); pass a path in a folder you can write",
            dir.display()
        ))
        .into()
    })
}

/// Applies `--set KEY=VALUE` overrides to `scenario`, in order, validating once after the last
/// (so `--set service.kind=profile --set service.path=P` switches the model); prints a note for
/// each table whose kind changed.
pub fn apply_sets(scenario: &mut capsim_sim::Scenario, sets: &[String]) -> anyhow::Result<()> {
    let mut overrides = Vec::with_capacity(sets.len());
    for set in sets {
        let (key, value) = set.split_once('=').ok_or_else(|| {
            BadInput(format!(
                "--set {set:?}: write it as KEY=VALUE, e.g. instances=4"
            ))
        })?;
        overrides.push((key.trim(), value.trim()));
    }
    if overrides.is_empty() {
        return Ok(());
    }
    let notes = scenario
        .set_all(&overrides)
        .map_err(|e| BadInput(e.to_string()))?;
    for note in notes {
        eprintln!("note: --set {note}");
    }
    Ok(())
}

/// Applies `--profile P`: the scenario's `[service]` becomes the calibrated profile at `P`
/// (relative to the current folder, as every file flag), with a note for the keys dropped.
pub fn apply_profile(
    scenario: &mut capsim_sim::Scenario,
    profile: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let Some(profile) = profile else {
        return Ok(());
    };
    let absolute = std::path::absolute(profile)
        .map_err(|e| BadInput(format!("--profile {}: {e}", profile.display())))?;
    let notes = scenario
        .set_service_profile(&absolute)
        .map_err(|e| BadInput(format!("--profile {}: {e}", profile.display())))?;
    for note in notes {
        eprintln!("note: --profile {}: {note}", profile.display());
    }
    Ok(())
}

/// `scenario` built, reading the profiles it names into `profiles`; an unreadable profile is bad
/// input, with the message naming the key and the file.
pub fn build_scenario(
    scenario: &capsim_sim::Scenario,
    profiles: &mut capsim_sim::Profiles,
) -> anyhow::Result<capsim_sim::BuiltScenario> {
    capsim_sim::build::build(scenario, profiles).map_err(|e| BadInput(e.to_string()).into())
}

/// Exit code for an error: 2 when any cause in its chain is bad input, 1 otherwise.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    let bad_input = err.chain().any(|cause| {
        cause.is::<BadInput>()
            || cause.is::<capsim_sim::SimError>()
            || cause.is::<capsim_sim::ScenarioError>()
            || cause.is::<capsim_report::ParseError>()
            || cause.is::<capsim_report::ConfigurationError>()
            || cause
                .downcast_ref::<capsim_report::ReportError>()
                .is_some_and(capsim_report::ReportError::is_bad_input)
            || cause
                .downcast_ref::<capsim_trace::TraceError>()
                .is_some_and(capsim_trace::TraceError::is_bad_input)
    });
    if bad_input { 2 } else { 1 }
}
