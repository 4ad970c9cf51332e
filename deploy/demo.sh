#!/usr/bin/env bash
# The one run command: the live demo on the embedded Tansu broker.
#   bash deploy/demo.sh [--duration SECONDS] [loopwarden dev options...]
# Creates .venv (if missing), installs loopwarden, then runs `loopwarden dev`:
# embedded broker + worker + simulated fleet + live terminal view.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/ci/venv.sh
exec .venv/bin/loopwarden dev "$@"
