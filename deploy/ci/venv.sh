#!/usr/bin/env bash
# Shared by tests/run.sh and deploy/demo.sh: make .venv (if missing) and install
# loopwarden into it, editable, with the extras given as $1 (e.g. "dev").
#   bash deploy/ci/venv.sh [EXTRAS]
# Installs only when needed: .venv/.loopwarden-installed records the hash of
# pyproject.toml and the extras installed; an unchanged pyproject with the
# extras already there skips pip entirely (a second demo starts at once).
# pip's output goes to .venv/install.log and is shown only when it fails.
# One at a time: both README commands started at once in a fresh clone wait
# for each other on .venv.lock (flock) instead of building .venv twice.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec 9>.venv.lock
if command -v flock >/dev/null 2>&1; then
  flock 9
fi
PY=${PYTHON:-python3}
EXTRAS=${1:-}
STAMP=.venv/.loopwarden-installed
HASH=$("$PY" -c 'import hashlib,sys; print(hashlib.sha256(open("pyproject.toml","rb").read()).hexdigest())')
if [ -x .venv/bin/python ] && [ -f "$STAMP" ]; then
  read -r have_hash have_extras < "$STAMP" || true
  # "dev" includes every other extra, so a test venv also serves the demo.
  if [ "$have_hash" = "$HASH" ] && { [ -z "$EXTRAS" ] || [ "${have_extras:-}" = "$EXTRAS" ] || [ "${have_extras:-}" = dev ]; }; then
    # The stamp is not enough: a `pip install '.[extra]'` (without -e) replaces the editable
    # install, and edits to the clone would stop taking effect. loopwarden must import from here.
    here=$(.venv/bin/python -c 'import os, loopwarden; print(os.path.dirname(os.path.realpath(loopwarden.__file__)))' 2>/dev/null || true)
    if [ "$here" = "$(pwd -P)/streams" ]; then
      exit 0
    fi
    echo "note: .venv's loopwarden is not the editable install of this clone (${here:-not importable}): reinstalling" >&2
  fi
fi
echo "setting up .venv (loopwarden${EXTRAS:+[$EXTRAS]}; about a minute the first time)..." >&2
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
rm -f "$STAMP"
LOG=.venv/install.log
if ! { .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip \
       && .venv/bin/python -m pip install -q --disable-pip-version-check -e ".${EXTRAS:+[$EXTRAS]}"; } >"$LOG" 2>&1; then
  cat "$LOG" >&2
  echo "pip install failed (log above, also in $LOG)" >&2
  exit 1
fi
echo "$HASH $EXTRAS" > "$STAMP"
