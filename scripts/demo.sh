#!/usr/bin/env bash
# The main job on the shipped defaults, as a capacity planner's story: a text classifier (the
# shipped traces/models/text_classifier.onnx, a 2-layer BERT-style encoder) is served by ONNX
# Runtime on CPU servers (scenarios/classifier-cpu.toml); it takes 100 req/s of short chat
# messages today (traces/demo.parquet); traffic is expected to grow 10x; the SLO is
# e2e.p99 <= 50 ms. How many servers, with which queue delay?
#
# The demo installs only what it needs (scripts/setup.sh --demo: a .venv with the onnxruntime
# wheel, whose shared library `capsim calibrate` loads), builds capsim, characterizes the trace,
# measures the classifier on this machine's CPU (ONNX Runtime's CPU provider, one intra-op
# thread, as each server of the scenario runs it), and serves it from that profile
# (`--profile`): one replay, a sweep of
# queue delay x instances (report.md and report.html), and `capsim plan`'s answer in one
# sentence. The answer is for servers like this machine. Everything lands under output/demo/
# (or $1).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-output/demo}
scenario=scenarios/classifier-cpu.toml
trace=traces/demo.parquet
profile=$out/profile.json
slo='e2e.p99<=50ms'
growth=10x

step() { printf '\n== %s\n' "$*"; }

started=$SECONDS
step "0. Installing what the demo needs (scripts/setup.sh --demo)"
scripts/setup.sh --demo
setup_s=$((SECONDS - started))

step "1. Building capsim (cargo build --release; the first build takes a few minutes, the rest of the demo under one)"
build_started=$SECONDS
cargo build --release
build_s=$((SECONDS - build_started))
capsim=target/release/capsim
mkdir -p "$out"

step "2. The trace: $trace"
"$capsim" trace inspect "$trace"

step "3. Measuring the classifier on this machine's CPU (one thread) -> $profile"
"$capsim" calibrate --model traces/models/text_classifier.onnx --ep cpu --threads 1 \
  --batch 1,2,8 --dim seq=32,128,512 --warmup 3 --iters 30 --min-iters 20 \
  --idle-curve 0,1ms,8ms -o "$profile"

step "4. One replay through $scenario, served from the profile just measured"
"$capsim" simulate --scenario "$scenario" --profile "$profile" "$trace" -o "$out/simulate"

step "5. Sweep: queue delay x instances over 0.5x..32x the trace's load, SLO $slo, growth $growth"
"$capsim" sweep --scenario "$scenario" --profile "$profile" "$trace" --load 0.5..32x:log11 \
  --grid batcher.max_queue_delay=0ms,2ms,10ms --grid instances=1..4 --slo "$slo" --seeds 3 \
  --growth "$growth" --detail-load "$growth" -o "$out/sweep"
echo "summary:  $out/simulate/summary.json"
echo "profile:  $profile (and its fit drawn in ${profile%.json}.fit.png)"
echo "report:   $out/sweep/report.md and $out/sweep/report.html (PNGs beside them)"

step "6. Plan: the fewest instances for $growth growth"
"$capsim" plan --scenario "$scenario" --profile "$profile" "$trace" --slo "$slo" \
  --growth "$growth" --seeds 3 --grid instances=1..6 --grid batcher.max_queue_delay=0ms,2ms

total_s=$((SECONDS - started))
printf '\ndemo: %ds in all: %ds the build, %ds the rest (setup %ds)\n' \
  "$total_s" "$build_s" "$((total_s - build_s))" "$setup_s"
