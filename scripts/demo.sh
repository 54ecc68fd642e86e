#!/usr/bin/env bash
# The main job on the shipped defaults, as a capacity planner's story: a BERT-base text
# classifier (inputs cut at 512 tokens, one T4-class GPU per server) serves 100 req/s of short
# chat messages today (traces/demo.parquet); traffic is expected to grow 4x; the SLO is
# e2e.p99 <= 100 ms. How many servers, with which batching? The demo characterizes the trace,
# simulates it once, calibrates the shipped classifier on this machine (ONNX Runtime, CUDA when
# it works, otherwise CPU), sweeps queue delay x instances (report.md and report.html), and ends
# with `capsim plan`'s answer in one sentence. Everything lands under output/demo/ (or $1).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-output/demo}
scenario=scenarios/bert-dynamic-batching.toml
trace=traces/demo.parquet
slo='e2e.p99<=100ms'
growth=4x

scripts/setup.sh
cargo build --release --quiet
capsim=target/release/capsim
mkdir -p "$out"

step() { printf '\n== %s\n' "$*"; }

step "1. The trace: traces/demo.parquet"
"$capsim" trace inspect "$trace"

step "2. One replay through $scenario"
"$capsim" simulate --scenario "$scenario" "$trace" -o "$out/simulate"

step "3. Calibrating the shipped classifier (short grid) -> $out/profile.json"
"$capsim" calibrate --model traces/models/text_classifier.onnx --ep auto \
  --batch 1,2,4,8 --dim seq=16,32,64 --warmup 5 --iters 60 -o "$out/profile.json"

step "4. Sweep: queue delay x instances over 0.25x..32x the trace's load, SLO $slo, growth $growth"
"$capsim" sweep --scenario "$scenario" "$trace" --load 0.25..32x:log13 \
  --grid batcher.max_queue_delay=0ms,2ms,10ms --grid instances=1,2,4 --slo "$slo" --seeds 3 \
  --growth "$growth" -o "$out/sweep"
echo "summary:  $out/simulate/summary.json"
echo "profile:  $out/profile.json"
echo "report:   $out/sweep/report.md and $out/sweep/report.html (PNGs beside them)"

step "5. Plan: the fewest instances for $growth growth"
"$capsim" plan --scenario "$scenario" "$trace" --slo "$slo" --growth "$growth" --seeds 3 \
  --grid instances=1..4 --grid batcher.max_queue_delay=0ms,2ms
