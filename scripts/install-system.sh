#!/usr/bin/env bash
# System packages the tests need (Debian 12, as root). Later layers add theirs here.
# chromium: headless browser for the dashboard's page tests (tests/web/test_dashboard_browser.py).
set -euo pipefail
if [ "$(id -u)" != "0" ]; then
  echo "scripts/install-system.sh: run as root (it uses apt-get); skipping system packages" >&2
  exit 0
fi
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y --no-install-recommends chromium
fi
# Real text for the data tests and experiments/data-tiny.yaml: the KJV Bible and the Python docs.
bash "$(dirname "$0")/install-corpora.sh" --minimal
