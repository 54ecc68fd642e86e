//! "Did you mean …?" for serde's unknown-field and unknown-variant messages about scenario keys.

use capsim_trace::closest;

/// `message` (a serde/TOML error) with "did you mean `X`?" appended when it names an unknown
/// field or variant and one of the names it expects is close; otherwise `message` unchanged.
pub(crate) fn with_suggestion(message: &str) -> String {
    match suggestion_in(message) {
        Some((_, suggested)) => format!("{}; did you mean `{suggested}`?", message.trim_end()),
        None => message.to_string(),
    }
}

/// The unknown name a serde message quotes (`unknown field `x`, expected one of `a`, `b``) and
/// the expected name closest to it.
pub(crate) fn suggestion_in(message: &str) -> Option<(&str, &str)> {
    let start = message
        .find("unknown field `")
        .map(|i| i + "unknown field `".len())
        .or_else(|| {
            message
                .find("unknown variant `")
                .map(|i| i + "unknown variant `".len())
        })?;
    let rest = &message[start..];
    let end = rest.find('`')?;
    let unknown = &rest[..end];
    let expected = &rest[end..];
    let expected = &expected[expected.find("expected")?..];
    let line = expected.lines().next().unwrap_or_default();
    let names = line.split('`').skip(1).step_by(2);
    closest(unknown, names).map(|name| (unknown, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_unknown_field_messages_get_the_closest_expected_name() {
        let message = "unknown field `max_batchsize`, expected one of `kind`, `max_batch_size`, `preferred_batch_size`";
        assert_eq!(
            with_suggestion(message),
            format!("{message}; did you mean `max_batch_size`?")
        );
        let variant = "unknown variant `least_outstandin`, expected one of `round_robin`, `least_outstanding`";
        assert!(with_suggestion(variant).ends_with("did you mean `least_outstanding`?"));
        let far = "unknown field `zzz`, expected one of `kind`, `time`";
        assert_eq!(with_suggestion(far), far);
        assert_eq!(with_suggestion("invalid type"), "invalid type");
    }
}
