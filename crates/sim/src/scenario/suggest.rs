//! "Did you mean …?" for names a user wrote: scenario keys, and (through the re-export) SLO
//! metrics.
//!
//! `closest` has the signature of `capsim_trace::closest`, which another branch adds; once both
//! are merged this copy goes and its callers use that one.

/// The candidate closest to `word`, when it is close enough to be a likely typo.
///
/// Closeness is the edit distance (insertions, deletions, substitutions of characters),
/// compared without regard to ASCII case. A candidate counts as close when its distance is at
/// most a third of the longer of the two names (at least 1). Ties go to the earlier candidate;
/// an empty `word` or no close candidate gives `None`.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    if word.is_empty() {
        return None;
    }
    let word: Vec<char> = word.to_lowercase().chars().collect();
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        let other: Vec<char> = candidate.to_lowercase().chars().collect();
        let limit = (word.len().max(other.len()) / 3).max(1);
        let distance = edit_distance(&word, &other);
        if distance <= limit && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// Levenshtein distance, one row of memory.
fn edit_distance(a: &[char], b: &[char]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

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
    fn a_missing_letter_finds_the_intended_name() {
        assert_eq!(
            closest("instance", ["name", "instances", "batcher"]),
            Some("instances")
        );
        assert_eq!(closest("ttf", ["e2e", "ttft", "tpot"]), Some("ttft"));
    }

    #[test]
    fn unrelated_or_empty_words_get_no_suggestion() {
        assert_eq!(closest("latency", ["model", "class"]), None);
        assert_eq!(closest("", ["a"]), None);
        assert_eq!(closest("ttft", ["e2e", "queue", "tpot"]), None);
    }

    #[test]
    fn edit_distance_counts_each_change_once() {
        let chars = |s: &str| s.chars().collect::<Vec<_>>();
        assert_eq!(edit_distance(&chars("kitten"), &chars("sitting")), 3);
        assert_eq!(edit_distance(&chars(""), &chars("abc")), 3);
    }

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
