#!/usr/bin/env bash
# Step-time cost: the Azure LLM conversation trace (19,366 requests, traces/azure-conv.parquet)
# replayed through one RTX 4090 serving Llama-3.1-8B, its steps timed by the analytic roofline
# (scenarios/vllm-rtx4090-llama-3.1-8b-roofline.toml) and by measured operators
# (scenarios/vllm-rtx4090-llama-3.1-8b-operators.toml): same engine limits, same trace. The runs
# alternate (roofline, operators, roofline, ...) so a machine that slows down slows both; prints
# each run's wall time, both medians and their ratio. Issue 31's target: operators within 2x of
# the roofline. Environment: BENCH_REPS (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${BENCH_REPS:-5}
cargo build --quiet --release --bin capsim
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() {
  local scenario=$1 out=$2
  local start end
  start=$(date +%s.%N)
  ./target/release/capsim simulate --scenario "$scenario" --trace traces/azure-conv.parquet \
    -o "$out" >"$out.log" 2>&1 || { cat "$out.log"; exit 1; }
  end=$(date +%s.%N)
  echo "$end - $start" | bc -l
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
roofline=() operators=()
for rep in $(seq 1 "$reps"); do
  r=$(run scenarios/vllm-rtx4090-llama-3.1-8b-roofline.toml "$dir/roofline$rep")
  o=$(run scenarios/vllm-rtx4090-llama-3.1-8b-operators.toml "$dir/operators$rep")
  printf 'rep %d: roofline %.3f s, operators %.3f s\n' "$rep" "$r" "$o"
  roofline+=("$r") operators+=("$o")
done
mr=$(median "${roofline[@]}") mo=$(median "${operators[@]}")
printf 'median of %d: roofline %.3f s, operators %.3f s, ratio operators/roofline %.2f (target <= 2)\n' \
  "$reps" "$mr" "$mo" "$(echo "$mo / $mr" | bc -l)"
echo "cores: $(nproc); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
