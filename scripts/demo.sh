#!/usr/bin/env bash
# The main job on the shipped defaults: characterize the demo trace, simulate the example
# BERT-style scenario, calibrate the shipped classifier on this machine (ONNX Runtime, CUDA when it
# works, otherwise CPU), sweep a small grid of batcher settings and instance counts, plan for 2x
# growth, and draw the report. Everything lands under output/demo/ (or $1).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-output/demo}
scenario=scenarios/bert-dynamic-batching.toml
trace=traces/demo.parquet
slo='e2e.p99<=100ms'

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

step "4. Sweep: queue delay x instances over 1x..32x the trace's load, SLO $slo"
"$capsim" sweep --scenario "$scenario" "$trace" --load 1..32x:log11 \
  --grid batcher.max_queue_delay=0ms,2ms,10ms --grid instances=1,2,4 --slo "$slo" -o "$out/sweep"

step "5. Plan: the fewest instances for 2x growth"
"$capsim" plan --scenario "$scenario" "$trace" --slo "$slo" --growth 2x \
  --grid instances=1..4 --grid batcher.max_queue_delay=0ms,2ms

step "Done"
echo "summary:  $out/simulate/summary.json"
echo "profile:  $out/profile.json"
echo "report:   $out/sweep/report.md (PNGs beside it)"
