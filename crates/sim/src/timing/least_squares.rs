//! Least squares for the affine batch-time model `a + b * n + c * n * L`: one solver for the
//! profile's fit ([`crate::timing::profile::AffineFit`]), calibration's fit to a server's log and
//! the fit to a server's trace, so that the three agree on what "collinear" means.
//!
//! Rows are `[1, n, n * L]` (or any columns: a padded batch's fit adds `n * L^2`); a column left
//! out of the fit is held at 0.

/// Relative pivot below which the scaled normal equations are taken as singular.
const COLLINEAR: f64 = 1e-10;

/// Two subsets' weighted squared errors closer than this (relative) fit equally well.
const TIE: f64 = 1e-9;

/// Weighted least squares on the columns of `rows` named in `set`, the others held at 0.
///
/// `weights` holds one weight (>= 0) per row; 0 leaves the row out. Solves the normal equations
/// on columns scaled to unit weighted norm, by elimination with partial pivoting. `None` when a
/// column of `set` is zero over the weighted rows, or the columns are (nearly) collinear there,
/// so that the data cannot tell their coefficients apart.
pub fn least_squares<const N: usize>(
    rows: &[[f64; N]],
    y: &[f64],
    weights: &[f64],
    set: &[usize],
) -> Option<[f64; N]> {
    debug_assert!(rows.len() == y.len() && rows.len() == weights.len());
    let n = set.len();
    let norms: Vec<f64> = set
        .iter()
        .map(|&k| {
            rows.iter()
                .zip(weights)
                .map(|(r, w)| w * r[k] * r[k])
                .sum::<f64>()
                .sqrt()
        })
        .collect();
    if norms.iter().any(|&norm| !(norm > 0.0 && norm.is_finite())) {
        return None;
    }
    // The scaled Gram matrix with the right-hand side beside it: n x (n + 1).
    let mut m = vec![vec![0.0; n + 1]; n];
    for (i, &ki) in set.iter().enumerate() {
        for (j, &kj) in set.iter().enumerate() {
            let dot: f64 = rows
                .iter()
                .zip(weights)
                .map(|(r, w)| w * r[ki] * r[kj])
                .sum();
            m[i][j] = dot / (norms[i] * norms[j]);
        }
        let dot: f64 = rows
            .iter()
            .zip(weights)
            .zip(y)
            .map(|((r, w), y)| w * r[ki] * y)
            .sum();
        m[i][n] = dot / norms[i];
    }
    for col in 0..n {
        let pivot = (col..n).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[pivot][col].abs() < COLLINEAR {
            return None;
        }
        m.swap(col, pivot);
        let pivot_row = m[col].clone();
        for (r, row) in m.iter_mut().enumerate() {
            if r != col {
                let factor = row[col] / pivot_row[col];
                for (v, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *v -= factor * p;
                }
            }
        }
    }
    let mut beta = [0.0; N];
    for (i, &k) in set.iter().enumerate() {
        beta[k] = m[i][n] / m[i][i] / norms[i];
        if !beta[k].is_finite() {
            return None;
        }
    }
    Some(beta)
}

/// Weighted least squares over the first `columns` columns of `rows` with no coefficient
/// negative: of the subsets of those columns, the one whose solution has none negative and the
/// smallest weighted squared error, found by trying each (exact: the columns after `columns`
/// come out 0). Of subsets that fit equally well, the one with the earlier columns wins: when
/// `n` and `n * L` cannot be told apart (one input length), `n` is kept. `None` when no subset
/// can be solved (no weighted rows, or zero columns).
pub fn non_negative_least_squares<const N: usize>(
    rows: &[[f64; N]],
    y: &[f64],
    weights: &[f64],
    columns: usize,
) -> Option<[f64; N]> {
    debug_assert!((1..=N).contains(&columns));
    let mut best: Option<([f64; N], f64)> = None;
    // Masks in increasing order list {0}, {1}, {0,1}, {2}, {0,2}, {1,2}, {0,1,2}: earlier
    // columns first, which the tie rule relies on.
    for mask in 1u32..(1 << columns) {
        let set: Vec<usize> = (0..columns).filter(|k| mask & (1 << k) != 0).collect();
        let Some(beta) = least_squares(rows, y, weights, &set) else {
            continue;
        };
        if beta.iter().any(|&b| b < 0.0) {
            continue;
        }
        let error = squared_error(rows, y, weights, &beta);
        if best.is_none_or(|(_, e)| error < e - TIE * e.abs()) {
            best = Some((beta, error));
        }
    }
    best.map(|(beta, _)| beta)
}

/// The weighted sum of squared residuals of `beta` over `rows`.
pub fn squared_error<const N: usize>(
    rows: &[[f64; N]],
    y: &[f64],
    weights: &[f64],
    beta: &[f64; N],
) -> f64 {
    rows.iter()
        .zip(y)
        .zip(weights)
        .map(|((r, y), w)| w * (y - r.iter().zip(beta).map(|(x, b)| x * b).sum::<f64>()).powi(2))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows_of(points: &[(f64, f64)]) -> Vec<[f64; 3]> {
        points.iter().map(|&(n, l)| [1.0, n, n * l]).collect()
    }

    #[test]
    fn exact_affine_data_is_recovered() {
        let rows = rows_of(&[
            (1.0, 10.0),
            (2.0, 20.0),
            (4.0, 10.0),
            (8.0, 40.0),
            (3.0, 5.0),
        ]);
        let truth = [2.0e6, 5.0e5, 1.0e3];
        let y: Vec<f64> = rows
            .iter()
            .map(|r| r.iter().zip(&truth).map(|(x, b)| x * b).sum())
            .collect();
        let ones = vec![1.0; rows.len()];
        let beta = least_squares(&rows, &y, &ones, &[0, 1, 2]).expect("solvable");
        for (got, want) in beta.iter().zip(&truth) {
            assert!(
                (got - want).abs() < 1e-6 * want,
                "got {beta:?}, want {truth:?}"
            );
        }
        assert_eq!(non_negative_least_squares(&rows, &y, &ones, 3), Some(beta));
    }

    #[test]
    fn collinear_columns_are_refused_and_the_earlier_one_kept() {
        // One input length: n * L = 16 n, so b and c cannot be told apart.
        let rows = rows_of(&[(1.0, 16.0), (2.0, 16.0), (4.0, 16.0), (8.0, 16.0)]);
        let y: Vec<f64> = rows.iter().map(|r| 3.0 + 2.0 * r[1]).collect();
        let ones = vec![1.0; rows.len()];
        assert_eq!(least_squares(&rows, &y, &ones, &[0, 1, 2]), None);
        let beta = non_negative_least_squares(&rows, &y, &ones, 3).expect("a subset solves");
        assert!(
            (beta[0] - 3.0).abs() < 1e-9 && (beta[1] - 2.0).abs() < 1e-9,
            "{beta:?}"
        );
        assert_eq!(
            beta[2], 0.0,
            "the later column is the one dropped: {beta:?}"
        );
    }

    #[test]
    fn a_negative_coefficient_is_dropped_for_the_best_non_negative_subset() {
        // Time falls with batch size: unconstrained b < 0; the non-negative fit is the mean.
        let rows = rows_of(&[(1.0, 0.0), (2.0, 0.0), (3.0, 0.0), (4.0, 0.0)]);
        let y = [10.0, 9.0, 8.0, 7.0];
        let ones = [1.0; 4];
        let free = least_squares(&rows, &y, &ones, &[0, 1]).expect("solvable");
        assert!(free[1] < 0.0, "{free:?}");
        let beta = non_negative_least_squares(&rows, &y, &ones, 2).expect("solvable");
        assert!((beta[0] - 8.5).abs() < 1e-9 && beta[1] == 0.0, "{beta:?}");
    }

    #[test]
    fn zero_weights_leave_rows_out() {
        let rows = rows_of(&[(1.0, 0.0), (2.0, 0.0), (3.0, 0.0), (4.0, 0.0)]);
        let y = [3.0, 5.0, 7.0, 1000.0];
        let weights = [1.0, 1.0, 1.0, 0.0];
        let beta = least_squares(&rows, &y, &weights, &[0, 1]).expect("solvable");
        assert!(
            (beta[0] - 1.0).abs() < 1e-9 && (beta[1] - 2.0).abs() < 1e-9,
            "{beta:?}"
        );
        assert_eq!(least_squares(&rows, &y, &[0.0; 4], &[0]), None);
        assert_eq!(non_negative_least_squares(&rows, &y, &[0.0; 4], 2), None);
    }
}
