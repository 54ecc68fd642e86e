//! Queueing-theory closed forms, to check the simulator against and to size capacity.
//!
//! Rates are per second and times in seconds (these are analysis formulas, outside the engine).
//! Every function returns `None` when the queue is unstable (utilization >= 1) or an argument is
//! out of range.

/// True for a finite number >= 0 (false for NaN).
fn positive_or_zero(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

/// True for a finite number > 0 (false for NaN).
fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

/// Erlang's B formula: the blocking probability of an M/M/c/c loss system with offered load
/// `a = lambda / mu` erlangs, by the stable recursion `B(k) = a B(k-1) / (k + a B(k-1))`.
pub fn erlang_b(servers: u32, offered_load: f64) -> Option<f64> {
    if servers == 0 || !positive_or_zero(offered_load) {
        return None;
    }
    let mut b = 1.0;
    for k in 1..=servers {
        b = offered_load * b / (f64::from(k) + offered_load * b);
    }
    Some(b)
}

/// Erlang's C formula: the probability that an arrival to an M/M/c queue waits, with offered
/// load `a = lambda / mu < c`.
pub fn erlang_c(servers: u32, offered_load: f64) -> Option<f64> {
    let c = f64::from(servers);
    if offered_load >= c {
        return None;
    }
    let b = erlang_b(servers, offered_load)?;
    Some(c * b / (c - offered_load * (1.0 - b)))
}

/// Mean waiting time in queue (before service) of an M/M/c queue, in seconds:
/// `C(c, a) / (c mu - lambda)`.
pub fn mmc_mean_wait_s(arrival_rps: f64, service_rate_rps: f64, servers: u32) -> Option<f64> {
    if !positive(service_rate_rps) || !positive_or_zero(arrival_rps) {
        return None;
    }
    let a = arrival_rps / service_rate_rps;
    let c = erlang_c(servers, a)?;
    Some(c / (f64::from(servers) * service_rate_rps - arrival_rps))
}

/// Mean waiting time in queue of an M/M/1 queue, in seconds: `rho / (mu - lambda)`.
pub fn mm1_mean_wait_s(arrival_rps: f64, service_rate_rps: f64) -> Option<f64> {
    if !positive(service_rate_rps)
        || !positive_or_zero(arrival_rps)
        || arrival_rps >= service_rate_rps
    {
        return None;
    }
    Some(arrival_rps / service_rate_rps / (service_rate_rps - arrival_rps))
}

/// Probability that an M/M/c arrival waits longer than `wait_s`: `C(c, a) exp(-(c mu - lambda) t)`.
pub fn mmc_wait_exceeds(
    arrival_rps: f64,
    service_rate_rps: f64,
    servers: u32,
    wait_s: f64,
) -> Option<f64> {
    if !positive(service_rate_rps) || !positive_or_zero(wait_s) {
        return None;
    }
    let c = erlang_c(servers, arrival_rps / service_rate_rps)?;
    Some(c * (-(f64::from(servers) * service_rate_rps - arrival_rps) * wait_s).exp())
}

/// Pollaczek–Khinchine: mean waiting time in queue of an M/G/1 queue, in seconds:
/// `lambda E[S^2] / (2 (1 - rho))`, with `E[S] = mean_service_s` and `E[S^2] =
/// service_second_moment_s2`.
pub fn mg1_mean_wait_s(
    arrival_rps: f64,
    mean_service_s: f64,
    service_second_moment_s2: f64,
) -> Option<f64> {
    let rho = arrival_rps * mean_service_s;
    if !positive_or_zero(rho) || rho >= 1.0 || !positive_or_zero(service_second_moment_s2) {
        return None;
    }
    Some(arrival_rps * service_second_moment_s2 / (2.0 * (1.0 - rho)))
}

/// Mean waiting time in queue of an M/D/1 queue (constant service `service_s`), in seconds:
/// `rho service / (2 (1 - rho))`.
pub fn md1_mean_wait_s(arrival_rps: f64, service_s: f64) -> Option<f64> {
    mg1_mean_wait_s(arrival_rps, service_s, service_s * service_s)
}

/// Welch (1964): mean waiting time in queue of an M/G/1 queue whose busy periods start with an
/// exceptional service, in seconds. A request that finds the server idle takes `S0`
/// (`first_mean_s`, `first_second_moment_s2`), every other one `S` (`mean_service_s`,
/// `service_second_moment_s2`):
/// `lambda E[S^2] / (2 (1 - rho)) + lambda (E[S0^2] - E[S^2]) / (2 (1 - rho + rho0))`, with
/// `rho = lambda E[S]` and `rho0 = lambda E[S0]`. With `S0 = S` it is Pollaczek–Khinchine.
/// A request that finds the server idle waits 0 here; the share of such requests is
/// [`mg1_exceptional_first_idle_share`].
pub fn mg1_exceptional_first_mean_wait_s(
    arrival_rps: f64,
    mean_service_s: f64,
    service_second_moment_s2: f64,
    first_mean_s: f64,
    first_second_moment_s2: f64,
) -> Option<f64> {
    let (rho, rho0) = welch_loads(arrival_rps, mean_service_s, first_mean_s)?;
    if !positive_or_zero(service_second_moment_s2) || !positive_or_zero(first_second_moment_s2) {
        return None;
    }
    Some(
        arrival_rps * service_second_moment_s2 / (2.0 * (1.0 - rho))
            + arrival_rps * (first_second_moment_s2 - service_second_moment_s2)
                / (2.0 * (1.0 - rho + rho0)),
    )
}

/// The share of requests that find the server idle in Welch's M/G/1 queue with exceptional
/// first service ([`mg1_exceptional_first_mean_wait_s`]): `(1 - rho) / (1 - rho + rho0)`.
pub fn mg1_exceptional_first_idle_share(
    arrival_rps: f64,
    mean_service_s: f64,
    first_mean_s: f64,
) -> Option<f64> {
    let (rho, rho0) = welch_loads(arrival_rps, mean_service_s, first_mean_s)?;
    Some((1.0 - rho) / (1.0 - rho + rho0))
}

/// `(rho, rho0)` of Welch's queue: the load of the ordinary and of the first services; `None`
/// when unstable (`rho >= 1`) or either is negative or not a number.
fn welch_loads(arrival_rps: f64, mean_service_s: f64, first_mean_s: f64) -> Option<(f64, f64)> {
    let rho = arrival_rps * mean_service_s;
    let rho0 = arrival_rps * first_mean_s;
    (positive_or_zero(rho) && rho < 1.0 && positive_or_zero(rho0)).then_some((rho, rho0))
}

/// Inverse Erlang C: the fewest servers for which an M/M/c queue is stable and its mean wait is
/// at most `max_mean_wait_s`. Searches up to `max_servers`; `None` if none suffices.
pub fn min_servers_for_mean_wait(
    arrival_rps: f64,
    service_rate_rps: f64,
    max_mean_wait_s: f64,
    max_servers: u32,
) -> Option<u32> {
    if !positive(service_rate_rps) || !positive_or_zero(arrival_rps) {
        return None;
    }
    let first = ((arrival_rps / service_rate_rps).floor() as u32)
        .saturating_add(1)
        .max(1);
    (first..=max_servers).find(|&c| {
        mmc_mean_wait_s(arrival_rps, service_rate_rps, c).is_some_and(|w| w <= max_mean_wait_s)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn welch_with_an_ordinary_first_service_is_pollaczek_khinchine() {
        let pk = md1_mean_wait_s(800.0, 1e-3).unwrap();
        let welch = mg1_exceptional_first_mean_wait_s(800.0, 1e-3, 1e-6, 1e-3, 1e-6).unwrap();
        assert!(close(welch, pk), "Welch {welch} against P-K {pk}");
        assert!(close(
            mg1_exceptional_first_idle_share(800.0, 1e-3, 1e-3).unwrap(),
            0.2
        ));
        assert_eq!(
            mg1_exceptional_first_mean_wait_s(1000.0, 1e-3, 1e-6, 1e-3, 1e-6),
            None
        );
    }

    #[test]
    fn erlang_c_matches_a_textbook_value() {
        // c = 2, a = 1: C = (1/2 * 2) / (1 + 1 + 1) = 1/3.
        assert!(close(erlang_c(2, 1.0).unwrap(), 1.0 / 3.0));
        // One server: C = rho.
        assert!(close(erlang_c(1, 0.7).unwrap(), 0.7));
        assert!(erlang_c(4, 4.0).is_none());
    }

    #[test]
    fn mmc_with_one_server_is_mm1() {
        let a = mmc_mean_wait_s(8.0, 10.0, 1).unwrap();
        let b = mm1_mean_wait_s(8.0, 10.0).unwrap();
        assert!(close(a, b) && close(b, 0.4), "{a} {b}");
    }

    #[test]
    fn pk_for_exponential_service_is_mm1_and_md1_is_half() {
        let mg1 = mg1_mean_wait_s(8.0, 0.1, 2.0 * 0.01).unwrap();
        assert!(close(mg1, mm1_mean_wait_s(8.0, 10.0).unwrap()));
        assert!(close(md1_mean_wait_s(8.0, 0.1).unwrap(), mg1 / 2.0));
    }

    #[test]
    fn inverse_erlang_c_finds_the_smallest_sufficient_pool() {
        let c = min_servers_for_mean_wait(32.0, 10.0, 0.01, 100).unwrap();
        assert!(mmc_mean_wait_s(32.0, 10.0, c).unwrap() <= 0.01);
        assert!(mmc_mean_wait_s(32.0, 10.0, c - 1).is_none_or(|w| w > 0.01));
        assert_eq!(min_servers_for_mean_wait(32.0, 10.0, 0.0, 3), None);
    }
}
