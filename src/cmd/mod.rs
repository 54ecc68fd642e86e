//! One module per subcommand group; each maps its flags onto a library call.

pub mod calibrate;
pub mod fit;
pub mod plan;
pub mod replay;
pub mod report;
pub mod simulate;
pub mod steady;
pub mod sweep;
pub mod trace;
pub mod validate;

/// Marks an error as caused by the user's input (exit code 2), for commands whose libraries do
/// not already say so. Wrap the message: `return Err(BadInput(msg).into())`.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Applies `--set KEY=VALUE` overrides to `scenario`, in order.
pub fn apply_sets(scenario: &mut capsim_sim::Scenario, sets: &[String]) -> anyhow::Result<()> {
    for set in sets {
        let (key, value) = set.split_once('=').ok_or_else(|| {
            BadInput(format!(
                "--set {set:?}: write it as KEY=VALUE, e.g. instances=4"
            ))
        })?;
        scenario
            .set(key.trim(), value.trim())
            .map_err(|e| BadInput(e.to_string()))?;
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
            || cause
                .downcast_ref::<capsim_trace::TraceError>()
                .is_some_and(capsim_trace::TraceError::is_bad_input)
    });
    if bad_input { 2 } else { 1 }
}
