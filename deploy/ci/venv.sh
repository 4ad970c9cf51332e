#!/usr/bin/env bash
# Shared by tests/run.sh and deploy/demo.sh: make .venv (if missing) and install
# loopwarden into it, editable, with the extras given as $1 (e.g. "dev").
#   bash deploy/ci/venv.sh [EXTRAS]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".${1:+[$1]}"
