#!/usr/bin/env bash
# System packages the tests need (Debian 12, as root): none yet beyond Python.
# Later layers add theirs here (chromium for page tests, ...).
set -euo pipefail
if [ "$(id -u)" != "0" ]; then
  echo "scripts/install-system.sh: run as root (it uses apt-get); skipping system packages" >&2
  exit 0
fi
echo "system packages: nothing to install"
