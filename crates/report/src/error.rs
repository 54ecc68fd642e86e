//! The errors of this crate's parsers, and of writing a report.

use std::path::PathBuf;

use crate::plot::PlotError;

/// A flag or key value that could not be parsed. The message quotes the bad value and says what
/// would fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} `{text}`: {reason}")]
pub struct ParseError {
    /// What was being parsed (`SLO`, `load axis`, `grid axis`, `shard`).
    pub what: &'static str,
    /// The whole text given.
    pub text: String,
    /// Why it is wrong and how to fix it.
    pub reason: String,
}

impl ParseError {
    pub(crate) fn new(what: &'static str, text: &str, reason: impl Into<String>) -> ParseError {
        ParseError {
            what,
            text: text.to_string(),
            reason: reason.into(),
        }
    }
}

/// A configuration of a grid that cannot run: the user's grid, `--set` or SLO is at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigurationError {
    /// The scenario refused a setting of the configuration.
    #[error("configuration `{configuration}`: {source}")]
    Scenario {
        /// The configuration's label (`key=value ...`).
        configuration: String,
        /// Why the scenario refused it.
        source: Box<capsim_sim::ScenarioError>,
    },
    /// The SLO bounds a metric the configuration does not report.
    #[error("configuration `{configuration}`: {source}")]
    Slo {
        /// The configuration's label (`key=value ...`).
        configuration: String,
        /// The SLO's refusal, naming the metrics the configuration reports.
        source: ParseError,
    },
    /// Any other failure to configure.
    #[error("{0}")]
    Other(String),
}

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A plot failed.
    #[error(transparent)]
    Plot(#[from] PlotError),
    /// The SLO stored in the sweep does not parse.
    #[error("sweep.json holds an unreadable SLO: {0}")]
    Slo(#[from] ParseError),
    /// Writing report.md failed.
    #[error("{path}: {source}")]
    Io {
        /// The file being written.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Nothing to report.
    #[error("the sweep has no capacity rows to report (did every run get interrupted?)")]
    Empty,
}

impl ReportError {
    /// Whether the sweep's outputs the user pointed at are at fault (an unreadable SLO, no rows),
    /// rather than drawing or writing.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, ReportError::Slo(_) | ReportError::Empty)
    }
}
