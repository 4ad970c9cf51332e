#!/usr/bin/env bash
# The one run command: the live demo on the embedded Tansu broker.
#   bash deploy/demo.sh [--duration SECONDS] [loopwarden dev options...]
# Creates .venv and installs loopwarden the first time (deploy/ci/venv.sh), then runs `loopwarden dev`:
# embedded broker + worker + simulated fleet + live terminal view.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/ci/venv.sh devtools
exec .venv/bin/loopwarden dev "$@"
