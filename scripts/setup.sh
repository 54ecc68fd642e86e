#!/usr/bin/env bash
# Installs what capsim's commands and tests need beyond the Rust toolchain, from the package
# registries only.
#
#   scripts/setup.sh --demo   what scripts/demo.sh needs: a project-local Python environment
#                             (.venv) with the pinned onnxruntime wheel of scripts/requirements.txt
#                             (its shared library is what `capsim calibrate` loads) and its
#                             dependencies; about 20 s with a reachable PyPI.
#   scripts/setup.sh          everything (scripts/test.sh runs it): the above, every pinned
#                             package of scripts/requirements.txt and notebooks/requirements.txt,
#                             a Triton Inference Server in .triton/ (scripts/triton.py install: the
#                             nvidia-pytriton wheel), llama-cpp-python's OpenAI-compatible server in
#                             .venv (scripts/llama_server.py install: built from source, a few
#                             minutes the first time), and Debian's chromium package (apt-get) for
#                             the headless-browser test of report.html.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

demo_only=false
case "${1:-}" in
  --demo) demo_only=true ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--demo]" >&2; exit 2 ;;
esac

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($python --version 2>&1)"
  "$python" -m venv .venv
fi
if $demo_only; then
  # The onnxruntime pin of requirements.txt, with its dependencies held to the file's pins too.
  if ! .venv/bin/python -m pip install -q --disable-pip-version-check -c scripts/requirements.txt onnxruntime; then
    echo "setup: installing onnxruntime (pinned in scripts/requirements.txt) into .venv failed (is PyPI reachable?)" >&2
    exit 1
  fi
  exit 0
fi
if ! .venv/bin/python -m pip install -q --disable-pip-version-check -r scripts/requirements.txt -r notebooks/requirements.txt; then
  echo "setup: installing scripts/requirements.txt and notebooks/requirements.txt into .venv failed (is PyPI reachable?)" >&2
  exit 1
fi
if ! .venv/bin/python scripts/triton.py install; then
  echo "setup: installing Triton into .triton (scripts/triton.py install) failed (is PyPI reachable?)" >&2
  exit 1
fi
if ! .venv/bin/python scripts/llama_server.py install; then
  echo "setup: installing llama-cpp-python (scripts/llama_server.py install, scripts/requirements-llama.txt) into .venv failed: it builds from source and needs PyPI, gcc and g++" >&2
  exit 1
fi
# Headless Chromium (Debian's chromium package) renders report.html in tests/report_html.rs.
# Without it the demo still runs; that test fails under CI and says how to install it.
if ! command -v chromium >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi
  echo "setup: installing chromium (apt-get) for the report.html screenshot test"
  if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null; }; then
    echo "setup: warning: installing chromium failed (run: apt-get install -y chromium); the report.html screenshot test needs it" >&2
  fi
fi
