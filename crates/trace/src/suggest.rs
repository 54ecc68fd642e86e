//! "Did you mean …?": the closest known name to a word a user typed.
//!
//! Used wherever a name the user wrote (a column, a key, a flag value) is not one the program
//! knows, so the error can offer the likely intended one. Below `capsim-sim` and
//! `capsim-report`, so every crate can use it.

/// The candidate closest to `word`, when it is close enough to be a likely typo.
///
/// Closeness is the edit distance (insertions, deletions, substitutions of characters),
/// compared without regard to ASCII case. A candidate counts as close when its distance is at
/// most a third of the longer of the two names (at least 1), so `output_tok` finds
/// `output_toks` but `ttft` does not find `e2e`. Ties go to the earlier candidate; an empty
/// `word` or no close candidate gives `None`. A candidate equal to `word` up to case is
/// returned (distance 0).
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    if word.is_empty() {
        return None;
    }
    let word_lower: Vec<char> = word.to_lowercase().chars().collect();
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        let candidate_lower: Vec<char> = candidate.to_lowercase().chars().collect();
        let longer = word_lower.len().max(candidate_lower.len());
        let limit = (longer / 3).max(1);
        let distance = edit_distance(&word_lower, &candidate_lower);
        if distance > limit {
            continue;
        }
        if best.is_none_or(|(best_distance, _)| distance < best_distance) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// Levenshtein distance between two character sequences, in one row of memory.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(s: &str) -> Vec<char> {
        s.chars().collect()
    }

    #[test]
    fn edit_distance_counts_insertions_deletions_and_substitutions() {
        assert_eq!(edit_distance(&chars("kitten"), &chars("sitting")), 3);
        assert_eq!(edit_distance(&chars(""), &chars("abc")), 3);
        assert_eq!(edit_distance(&chars("abc"), &chars("abc")), 0);
        assert_eq!(edit_distance(&chars("flaw"), &chars("lawn")), 2);
    }

    #[test]
    fn a_missing_letter_finds_the_column_it_was_meant_to_be() {
        let columns = ["arrival_time", "input_tokens", "output_toks"];
        assert_eq!(closest("output_tok", columns), Some("output_toks"));
    }

    #[test]
    fn the_nearest_of_several_close_candidates_wins() {
        let columns = ["output_tokens", "output_toks"];
        assert_eq!(closest("output_tok", columns), Some("output_toks"));
    }

    #[test]
    fn ties_go_to_the_earlier_candidate() {
        assert_eq!(closest("ab", ["ac", "ad"]), Some("ac"));
    }

    #[test]
    fn case_differences_cost_nothing() {
        assert_eq!(closest("Arrival", ["arrival", "model"]), Some("arrival"));
    }

    #[test]
    fn unrelated_names_get_no_suggestion() {
        assert_eq!(closest("ttft", ["e2e", "queue", "tpot"]), None);
        assert_eq!(closest("latency", ["model", "class"]), None);
        assert_eq!(closest("x", ["arrival"]), None);
    }

    #[test]
    fn an_empty_word_or_no_candidates_gives_none() {
        assert_eq!(closest("", ["a"]), None);
        assert_eq!(closest("arrival", std::iter::empty()), None);
    }

    #[test]
    fn non_ascii_names_are_compared_by_character() {
        assert_eq!(
            closest("latenz_µs", ["latenz_µs2", "x"]),
            Some("latenz_µs2")
        );
    }
}
