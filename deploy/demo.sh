#!/usr/bin/env bash
# The one run command: the live demo on the embedded Tansu broker.
#   bash deploy/demo.sh [--duration SECONDS] [loopwarden dev options...]
# Creates .venv (if missing), installs loopwarden, then runs `loopwarden dev`:
# embedded broker + worker + simulated fleet + live terminal view.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
.venv/bin/python -m pip install -q --disable-pip-version-check -e .
exec .venv/bin/loopwarden dev "$@"
