//! Synthetic traces: an arrival process and size distributions, deterministic per seed.
//!
//! Arrivals and sizes draw from two generators seeded from the one seed, so changing the size
//! distribution leaves the arrival times unchanged (and the other way round).
//!
//! Arrival processes (all with mean rate `rate_rps`):
//! - `poisson`: exponential gaps;
//! - `gamma:cv=C`: gamma gaps with coefficient of variation C (C > 1 is burstier than Poisson);
//! - `constant`: evenly spaced;
//! - `diurnal:period=P,amplitude=A`: Poisson with rate `rate * (1 + A sin(2 pi t / P))`, A in [0, 1];
//! - `bursty:ratio=R,on=D1,off=D2`: two-state MMPP; bursts last D1 on average with a rate R times
//!   the quiet rate, quiet spells last D2; rates are set so the long-run mean is `rate_rps`.
//!
//! Sizes: `const:N`, `uniform:LO..HI` (inclusive), `lognormal:mean=M,cv=C` (rounded, at least 1),
//! or resampled jointly (input with its output) from another trace.

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp, Gamma, LogNormal};

use crate::quantity::parse_duration_ns;
use crate::table::Columns;
use crate::{Trace, TraceError};

/// Most requests one synthesis may produce (bounds memory: 16 bytes a request).
pub const MAX_REQUESTS: u64 = 200_000_000;

/// How requests arrive.
#[derive(Debug, Clone, PartialEq)]
pub enum Arrivals {
    /// Exponential gaps (a Poisson process); the first request arrives after one gap.
    Poisson,
    /// Independent gamma-distributed gaps with mean `1 / rate_rps`.
    Gamma {
        /// Coefficient of variation of the gaps, > 0: 1 is Poisson, above 1 burstier, below 1
        /// more regular.
        cv: f64,
    },
    /// Evenly spaced, `1 / rate_rps` apart, the first at time 0.
    Constant,
    /// A Poisson process whose rate follows `rate_rps * (1 + amplitude * sin(2 pi t / period))`,
    /// drawn by thinning; the long-run mean over whole periods is `rate_rps`.
    Diurnal {
        /// Length of one cycle, nanoseconds, > 0.
        period_ns: u64,
        /// Relative swing of the rate, in [0, 1]: 0 is plain Poisson, 1 drops to zero at the
        /// trough.
        amplitude: f64,
    },
    /// A two-state Markov-modulated Poisson process: bursts and quiet spells with exponential
    /// lengths, rates set so the long-run mean is `rate_rps`.
    Bursty {
        /// Burst rate divided by quiet rate, >= 1 (1 is plain Poisson).
        ratio: f64,
        /// Mean length of a burst, nanoseconds, > 0.
        on_ns: u64,
        /// Mean length of a quiet spell, nanoseconds, > 0.
        off_ns: u64,
    },
}

/// A distribution of token counts.
#[derive(Debug, Clone, PartialEq)]
pub enum SizeDist {
    /// Every request has this many tokens (0 allowed).
    Const(u32),
    /// Uniform over whole numbers from `lo` to `hi`, both included.
    Uniform {
        /// Smallest size, tokens.
        lo: u32,
        /// Largest size, tokens, >= `lo`.
        hi: u32,
    },
    /// Log-normal with this mean and coefficient of variation, rounded to whole tokens and
    /// clamped to at least 1 (so the sample mean sits slightly above `mean` when it is small).
    LogNormal {
        /// Mean size, tokens, >= 1.
        mean: f64,
        /// Standard deviation over mean, > 0.
        cv: f64,
    },
}

/// Where request sizes come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Sizes {
    /// Independent draws; `output: None` makes a trace without output tokens.
    Parametric {
        /// Distribution of input (prompt) tokens.
        input: SizeDist,
        /// Distribution of output tokens; `None` leaves the column out.
        output: Option<SizeDist>,
    },
    /// Rows drawn uniformly (with replacement) from another trace's sizes, input and output
    /// together so that their correlation survives.
    Resampled {
        /// The source trace's input tokens, one per request; must not be empty.
        input: Vec<u32>,
        /// The source trace's output tokens, same length as `input`; `None` leaves the column
        /// out.
        output: Option<Vec<u32>>,
    },
}

impl Sizes {
    /// Sizes resampled jointly from `trace`'s requests: its input tokens, and its output tokens
    /// when it has them.
    pub fn resampled_from(trace: &Trace) -> Sizes {
        Sizes::Resampled {
            input: trace.input_tokens().to_vec(),
            output: trace.output_tokens().map(<[u32]>::to_vec),
        }
    }
}

/// Everything a synthesis needs.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthSpec {
    /// The arrival process.
    pub arrivals: Arrivals,
    /// Long-run mean arrival rate, requests per second.
    pub rate_rps: f64,
    /// Stop at this time (exclusive), nanoseconds.
    pub duration_ns: Option<u64>,
    /// Stop after this many requests. At least one of `duration_ns` and `count` must be set;
    /// with both, whichever comes first stops; at most [`MAX_REQUESTS`] either way.
    pub count: Option<u64>,
    /// Where the token counts come from.
    pub sizes: Sizes,
    /// Seed of both generators (arrivals, sizes); the same spec and seed give the same trace.
    pub seed: u64,
}

fn bad(option: &'static str, value: &str, reason: impl Into<String>) -> TraceError {
    TraceError::BadOption {
        option,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Splits `name:k=v,k=v` into the name and its parameters.
fn split_spec(text: &str) -> (&str, Vec<(&str, &str)>) {
    let (name, rest) = text.split_once(':').unwrap_or((text, ""));
    let params = rest
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.split_once('=')
                .map_or((p.trim(), ""), |(k, v)| (k.trim(), v.trim()))
        })
        .collect();
    (name.trim(), params)
}

fn param<'a>(params: &[(&str, &'a str)], key: &str) -> Option<&'a str> {
    params.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

fn number(
    option: &'static str,
    text: &str,
    key: &str,
    value: Option<&str>,
    default: Option<f64>,
) -> Result<f64, TraceError> {
    match value {
        None => default.ok_or_else(|| bad(option, text, format!("needs {key}="))),
        Some(v) => v
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| bad(option, text, format!("{key}={v:?} is not a number"))),
    }
}

impl Arrivals {
    /// Parses `poisson`, `gamma:cv=2`, `constant`, `diurnal:period=60s,amplitude=0.5`,
    /// `bursty:ratio=10,on=5s,off=30s`.
    pub fn parse(text: &str) -> Result<Arrivals, TraceError> {
        const OPT: &str = "--arrivals";
        let (name, params) = split_spec(text);
        let duration = |key: &str, default: &str| {
            let v = param(&params, key).unwrap_or(default);
            parse_duration_ns(v).ok().filter(|&d| d > 0).ok_or_else(|| {
                bad(
                    OPT,
                    text,
                    format!("{key}={v:?} is not a positive duration like 30s"),
                )
            })
        };
        let a = match name {
            "poisson" => Arrivals::Poisson,
            "constant" => Arrivals::Constant,
            "gamma" => {
                let cv = number(OPT, text, "cv", param(&params, "cv"), Some(2.0))?;
                if cv <= 0.0 {
                    return Err(bad(OPT, text, "cv must be > 0"));
                }
                Arrivals::Gamma { cv }
            }
            "diurnal" => {
                let amplitude = number(
                    OPT,
                    text,
                    "amplitude",
                    param(&params, "amplitude"),
                    Some(0.5),
                )?;
                if !(0.0..=1.0).contains(&amplitude) {
                    return Err(bad(OPT, text, "amplitude must be in [0, 1]"));
                }
                Arrivals::Diurnal {
                    period_ns: duration("period", "24h")?,
                    amplitude,
                }
            }
            "bursty" => {
                let ratio = number(OPT, text, "ratio", param(&params, "ratio"), Some(10.0))?;
                if ratio < 1.0 {
                    return Err(bad(
                        OPT,
                        text,
                        "ratio (burst rate / quiet rate) must be >= 1",
                    ));
                }
                Arrivals::Bursty {
                    ratio,
                    on_ns: duration("on", "5s")?,
                    off_ns: duration("off", "30s")?,
                }
            }
            _ => {
                return Err(bad(
                    OPT,
                    text,
                    "use poisson, gamma:cv=C, constant, diurnal:period=P,amplitude=A or bursty:ratio=R,on=D,off=D",
                ));
            }
        };
        Ok(a)
    }
}

impl SizeDist {
    /// Parses `const:N`, `uniform:LO..HI` or `lognormal:mean=M,cv=C`.
    pub fn parse(option: &'static str, text: &str) -> Result<SizeDist, TraceError> {
        let (name, rest) = text.split_once(':').unwrap_or((text, ""));
        let int = |v: &str| {
            v.trim().parse::<u32>().map_err(|_| {
                bad(
                    option,
                    text,
                    format!("{v:?} is not a whole number of tokens"),
                )
            })
        };
        match name.trim() {
            "const" => Ok(SizeDist::Const(int(rest)?)),
            "uniform" => {
                let (lo, hi) = rest
                    .split_once("..")
                    .ok_or_else(|| bad(option, text, "expected uniform:LO..HI"))?;
                let (lo, hi) = (int(lo)?, int(hi)?);
                if hi < lo {
                    return Err(bad(option, text, "HI must be >= LO"));
                }
                Ok(SizeDist::Uniform { lo, hi })
            }
            "lognormal" => {
                let (_, params) = split_spec(text);
                let mean = number(option, text, "mean", param(&params, "mean"), None)?;
                let cv = number(option, text, "cv", param(&params, "cv"), Some(1.0))?;
                if mean < 1.0 || cv <= 0.0 {
                    return Err(bad(option, text, "mean must be >= 1 and cv > 0"));
                }
                Ok(SizeDist::LogNormal { mean, cv })
            }
            _ => Err(bad(
                option,
                text,
                "use const:N, uniform:LO..HI or lognormal:mean=M,cv=C",
            )),
        }
    }
}

/// A size sampler built once from a [`SizeDist`].
enum Sampler {
    Const(u32),
    Uniform(u32, u32),
    LogNormal(LogNormal<f64>),
}

impl Sampler {
    fn new(d: &SizeDist) -> Result<Sampler, TraceError> {
        Ok(match *d {
            SizeDist::Const(n) => Sampler::Const(n),
            SizeDist::Uniform { lo, hi } => Sampler::Uniform(lo, hi),
            SizeDist::LogNormal { mean, cv } => {
                let sigma2 = (1.0 + cv * cv).ln();
                let mu = mean.ln() - sigma2 / 2.0;
                Sampler::LogNormal(
                    LogNormal::new(mu, sigma2.sqrt())
                        .map_err(|e| bad("--input-tokens", &format!("{d:?}"), e.to_string()))?,
                )
            }
        })
    }

    fn draw(&self, rng: &mut Xoshiro256PlusPlus) -> u32 {
        match self {
            Sampler::Const(n) => *n,
            Sampler::Uniform(lo, hi) => rng.random_range(*lo..=*hi),
            Sampler::LogNormal(d) => d.sample(rng).round().clamp(1.0, u32::MAX as f64) as u32,
        }
    }
}

/// Generates a trace from `spec`. Same spec (seed included) => same trace.
pub fn synthesize(spec: &SynthSpec) -> Result<Trace, TraceError> {
    let rate = spec.rate_rps;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(bad(
            "--rate",
            &rate.to_string(),
            "must be a number of requests per second > 0",
        ));
    }
    if spec.duration_ns.is_none() && spec.count.is_none() {
        return Err(bad(
            "--duration/--count",
            "(neither given)",
            "give a duration (e.g. 5m), a count, or both",
        ));
    }
    let expected = spec.count.unwrap_or(u64::MAX).min(
        spec.duration_ns
            .map_or(u64::MAX, |d| (d as f64 / 1e9 * rate * 1.2 + 100.0) as u64),
    );
    if spec.count.unwrap_or(0) > MAX_REQUESTS || (spec.count.is_none() && expected > MAX_REQUESTS) {
        return Err(bad(
            "--count/--duration",
            &expected.to_string(),
            format!("more than {MAX_REQUESTS} requests; lower the rate, duration or count"),
        ));
    }
    let arrival_ns = arrivals(spec)?;
    if arrival_ns.is_empty() {
        return Err(TraceError::Empty {
            what: "synth".into(),
            hint: "no request arrived within the duration; raise --rate or --duration".into(),
        });
    }
    let n = arrival_ns.len();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(spec.seed ^ 0x5DEE_CE66_D1CE_5EED);
    let (input_tokens, output_tokens) = match &spec.sizes {
        Sizes::Parametric { input, output } => {
            let si = Sampler::new(input)?;
            let so = output.as_ref().map(Sampler::new).transpose()?;
            let mut inp = Vec::with_capacity(n);
            let mut out = so.as_ref().map(|_| Vec::with_capacity(n));
            for _ in 0..n {
                inp.push(si.draw(&mut rng));
                if let (Some(s), Some(o)) = (&so, &mut out) {
                    o.push(s.draw(&mut rng));
                }
            }
            (inp, out)
        }
        Sizes::Resampled { input, output } => {
            if input.is_empty() {
                return Err(bad("--sizes-from", "", "the source trace has no requests"));
            }
            let mut inp = Vec::with_capacity(n);
            let mut out = output.as_ref().map(|_| Vec::with_capacity(n));
            for _ in 0..n {
                let i = rng.random_range(0..input.len());
                inp.push(input[i]);
                if let (Some(src), Some(o)) = (output, &mut out) {
                    o.push(src[i]);
                }
            }
            (inp, out)
        }
    };
    Trace::from_columns(Columns {
        arrival_ns,
        input_tokens,
        output_tokens,
        ..Columns::default()
    })
}

fn arrivals(spec: &SynthSpec) -> Result<Vec<u64>, TraceError> {
    let rate = spec.rate_rps;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(spec.seed);
    let mut out = Bounded {
        end_ns: spec.duration_ns.map_or(f64::INFINITY, |d| d as f64),
        max_n: spec.count.unwrap_or(MAX_REQUESTS),
        times: Vec::new(),
    };
    let per_ns = rate / 1e9;
    match &spec.arrivals {
        Arrivals::Poisson => renewal(&exp(rate, per_ns)?, &mut rng, &mut out),
        Arrivals::Gamma { cv } => {
            let shape = 1.0 / (cv * cv);
            let scale = cv * cv / per_ns;
            let gap = Gamma::new(shape, scale)
                .map_err(|e| bad("--arrivals", &format!("gamma:cv={cv}"), e.to_string()))?;
            renewal(&gap, &mut rng, &mut out);
        }
        Arrivals::Constant => {
            let mut k = 0u64;
            while out.push(k as f64 / per_ns) {
                k += 1;
            }
        }
        Arrivals::Diurnal {
            period_ns,
            amplitude,
        } => {
            // Thinning (Lewis-Shedler): candidates at the peak rate, kept in proportion.
            let gap = exp(rate, per_ns * (1.0 + amplitude))?;
            let mut t = 0.0;
            loop {
                t += gap.sample(&mut rng);
                let phase = 2.0 * std::f64::consts::PI * t / *period_ns as f64;
                let keep = (1.0 + amplitude * phase.sin()) / (1.0 + amplitude);
                if rng.random::<f64>() < keep && !out.push(t) {
                    break;
                }
                if t >= out.end_ns {
                    break;
                }
            }
        }
        Arrivals::Bursty {
            ratio,
            on_ns,
            off_ns,
        } => bursty(
            rate,
            *ratio,
            (*on_ns as f64, *off_ns as f64),
            &mut rng,
            &mut out,
        )?,
    }
    Ok(out.times)
}

/// Arrival times as a process makes them: rounded to the nanosecond, until `end_ns` or
/// `max_n` arrivals.
struct Bounded {
    end_ns: f64,
    max_n: u64,
    times: Vec<u64>,
}

impl Bounded {
    /// Adds an arrival at `t` ns; `false` (and nothing added) once past the end or the count.
    fn push(&mut self, t: f64) -> bool {
        if t >= self.end_ns || self.times.len() as u64 >= self.max_n {
            return false;
        }
        self.times.push(t.round() as u64);
        true
    }
}

/// The exponential distribution of rate `per_ns`; an error names the `--rate` (`rate_rps`).
fn exp(rate_rps: f64, per_ns: f64) -> Result<Exp<f64>, TraceError> {
    Exp::new(per_ns).map_err(|e| bad("--rate", &rate_rps.to_string(), e.to_string()))
}

/// A renewal process: independent gaps drawn from `gap`.
fn renewal(gap: &impl Distribution<f64>, rng: &mut Xoshiro256PlusPlus, out: &mut Bounded) {
    let mut t = 0.0;
    loop {
        t += gap.sample(rng);
        if !out.push(t) {
            break;
        }
    }
}

/// On-off bursts: `ratio` times the rate while on, with exponential on and off spells of mean
/// `(on, off)` ns, the mean rate over both `rate_rps`.
fn bursty(
    rate_rps: f64,
    ratio: f64,
    (on, off): (f64, f64),
    rng: &mut Xoshiro256PlusPlus,
    out: &mut Bounded,
) -> Result<(), TraceError> {
    let per_ns = rate_rps / 1e9;
    let low = per_ns * (on + off) / (ratio * on + off);
    let high = low * ratio;
    let gap_low = exp(rate_rps, low)?;
    let gap_high = exp(rate_rps, high)?;
    let stay_on = exp(rate_rps, 1.0 / on)?;
    let stay_off = exp(rate_rps, 1.0 / off)?;
    let mut burst = rng.random::<f64>() < on / (on + off);
    let mut t = 0.0;
    let mut state_end = if burst {
        stay_on.sample(rng)
    } else {
        stay_off.sample(rng)
    };
    loop {
        let g = if burst {
            gap_high.sample(rng)
        } else {
            gap_low.sample(rng)
        };
        if t + g >= state_end {
            // Memoryless: restart the gap in the new state.
            t = state_end;
            burst = !burst;
            state_end = t + if burst {
                stay_on.sample(rng)
            } else {
                stay_off.sample(rng)
            };
            if t >= out.end_ns {
                break;
            }
            continue;
        }
        t += g;
        if !out.push(t) {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::Summary;

    fn spec(arrivals: Arrivals) -> SynthSpec {
        SynthSpec {
            arrivals,
            rate_rps: 50.0,
            duration_ns: Some(600_000_000_000),
            count: None,
            sizes: Sizes::Parametric {
                input: SizeDist::LogNormal {
                    mean: 1000.0,
                    cv: 1.0,
                },
                output: Some(SizeDist::Uniform { lo: 10, hi: 20 }),
            },
            seed: 42,
        }
    }

    #[test]
    fn every_process_hits_its_mean_rate() {
        for a in [
            Arrivals::Poisson,
            Arrivals::Gamma { cv: 3.0 },
            Arrivals::Constant,
            Arrivals::Diurnal {
                period_ns: 60_000_000_000,
                amplitude: 0.8,
            },
            Arrivals::Bursty {
                ratio: 10.0,
                on_ns: 5_000_000_000,
                off_ns: 20_000_000_000,
            },
        ] {
            let t = synthesize(&spec(a.clone())).unwrap();
            let rate = t.len() as f64 / 600.0;
            assert!(
                (rate - 50.0).abs() < 5.0,
                "{a:?}: rate {rate}, expected ~50"
            );
        }
    }

    #[test]
    fn gamma_cv_and_poisson_cv_match_theory() {
        let cv = |a| {
            Summary::of(&synthesize(&spec(a)).unwrap())
                .interarrival_cv
                .unwrap()
        };
        let p = cv(Arrivals::Poisson);
        assert!((p - 1.0).abs() < 0.05, "poisson CV {p}, expected 1");
        let g = cv(Arrivals::Gamma { cv: 3.0 });
        assert!((g - 3.0).abs() < 0.4, "gamma CV {g}, expected 3");
        let c = cv(Arrivals::Constant);
        assert!(c < 1e-6, "constant CV {c}, expected 0");
        let b = cv(Arrivals::Bursty {
            ratio: 20.0,
            on_ns: 5_000_000_000,
            off_ns: 20_000_000_000,
        });
        assert!(b > 1.3, "bursty CV {b}, expected > 1");
    }

    #[test]
    fn same_seed_same_trace_other_seed_other_trace() {
        let a = synthesize(&spec(Arrivals::Poisson)).unwrap();
        let b = synthesize(&spec(Arrivals::Poisson)).unwrap();
        assert_eq!(a.arrival_ns(), b.arrival_ns());
        assert_eq!(a.input_tokens(), b.input_tokens());
        let mut s = spec(Arrivals::Poisson);
        s.seed = 43;
        assert_ne!(synthesize(&s).unwrap().arrival_ns(), a.arrival_ns());
    }

    #[test]
    fn lognormal_sizes_have_requested_mean_and_count_limit_holds() {
        let mut s = spec(Arrivals::Poisson);
        s.count = Some(20_000);
        s.duration_ns = None;
        let t = synthesize(&s).unwrap();
        assert_eq!(t.len(), 20_000);
        let mean = t.input_tokens().iter().map(|&x| x as f64).sum::<f64>() / t.len() as f64;
        assert!(
            (mean - 1000.0).abs() < 50.0,
            "lognormal mean {mean}, expected ~1000"
        );
        assert!(
            t.output_tokens()
                .unwrap()
                .iter()
                .all(|&o| (10..=20).contains(&o))
        );
    }

    #[test]
    fn specs_parse_and_reject_nonsense() {
        assert_eq!(
            Arrivals::parse("gamma:cv=3").unwrap(),
            Arrivals::Gamma { cv: 3.0 }
        );
        assert!(matches!(
            Arrivals::parse("diurnal:period=60s,amplitude=0.5").unwrap(),
            Arrivals::Diurnal { .. }
        ));
        assert!(Arrivals::parse("gamma:cv=-1").is_err());
        assert!(Arrivals::parse("weibull").is_err());
        assert_eq!(
            SizeDist::parse("--input-tokens", "uniform:5..9").unwrap(),
            SizeDist::Uniform { lo: 5, hi: 9 }
        );
        assert!(SizeDist::parse("--input-tokens", "uniform:9..5").is_err());
        assert!(SizeDist::parse("--input-tokens", "lognormal:cv=1").is_err());
    }
}
