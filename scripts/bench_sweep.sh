#!/usr/bin/env bash
# Sweep throughput: a 1,000-run sweep (25 configurations x 10 loads x 4 seeds) over a synthetic
# 100 k-request trace, timed end to end (including each configuration's capacity bisection, which
# adds runs beyond the 1,000 curve runs), without drawing the report. Prints the wall time of each
# repetition, their median and curve runs per second. Issue 5's target: 1,000 runs in under 60 s
# on 2 cores. Environment: BENCH_REPS (default 3), BENCH_THREADS (rayon threads, default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${BENCH_REPS:-3}
cargo build --quiet --release --bin capsim
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
./target/release/capsim trace synth --rate 500 --count 100000 --input-tokens uniform:16..512 \
  --output-tokens none --seed 1 -o "$dir/trace.parquet" >/dev/null
if [[ -n "${BENCH_THREADS:-}" ]]; then export RAYON_NUM_THREADS=$BENCH_THREADS; fi
runs=1000
times=()
for rep in $(seq 1 "$reps"); do
  start=$(date +%s.%N)
  ./target/release/capsim sweep --scenario scenarios/bert-dynamic-batching.toml \
    --trace "$dir/trace.parquet" \
    --grid instances=1..5 --grid batcher.max_queue_delay=0ms,1ms,2ms,5ms,10ms \
    --load 0.25..4x:10 --seeds 4 --slo 'e2e.p99<=800ms' --no-report \
    -o "$dir/out$rep" >"$dir/log$rep" 2>&1
  end=$(date +%s.%N)
  t=$(echo "$end - $start" | bc -l)
  grep -q "$runs curve runs" "$dir/log$rep" || { echo "expected $runs curve runs:"; cat "$dir/log$rep"; exit 1; }
  printf 'rep %d: %.2f s (%s)\n' "$rep" "$t" "$(grep 'curve runs' "$dir/log$rep")"
  times+=("$t")
done
median=$(printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
printf 'median of %d: %.2f s for %d curve runs = %.1f runs/s (target: 1000 runs < 60 s = 16.7 runs/s)\n' \
  "$reps" "$median" "$runs" "$(echo "$runs / $median" | bc -l)"
echo "cores: $(nproc); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
