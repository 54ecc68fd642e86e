#!/usr/bin/env bash
# Peak memory of `capsim simulate --no-requests` at 1 M and 4 M requests through the full
# pipeline benchmark scenario (crates/sim/benches/full-pipeline.toml). The engine keeps only
# requests in flight, so the difference between the two runs should be the trace's own columns
# (arrival_ns u64 + input_tokens u32 = 12 bytes a request), nothing per request from the engine.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release --bin capsim
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
declare -A rss
for n in 1000000 4000000; do
  ./target/release/capsim trace synth --rate 6000 --count "$n" --input-tokens uniform:16..512 \
    --output-tokens none --seed 1 -o "$dir/t$n.parquet" >/dev/null
  /usr/bin/time -f "%M" -o "$dir/rss$n" ./target/release/capsim simulate \
    --scenario crates/sim/benches/full-pipeline.toml --trace "$dir/t$n.parquet" --no-requests \
    -o "$dir/out$n" >/dev/null 2>&1
  rss[$n]=$(cat "$dir/rss$n")
  echo "requests $n: peak RSS ${rss[$n]} KiB"
done
growth=$(( (rss[4000000] - rss[1000000]) * 1024 ))
echo "growth from 1 M to 4 M requests: $growth bytes = $(( growth / 3000000 )) bytes per extra request (trace columns: 12)"
