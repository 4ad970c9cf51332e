#!/usr/bin/env bash
# Install promtool and prometheus (Debian package "prometheus") for the ops tests.
# Idempotent and quiet: does nothing when both binaries are already on PATH.
# The package's service is not started (no systemd in CI; policy-rc.d may deny it anyway).
set -euo pipefail

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null

# Never leave a packaged daemon running beside the tests (harmless where there is no init system).
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi

promtool --version 2>&1 | head -n 1
