//! The errors of this crate's parsers.

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
