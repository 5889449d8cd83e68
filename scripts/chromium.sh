#!/usr/bin/env bash
# Prints the path of a Chromium that runs headless, installing Debian's chromium package when
# neither `chromium` nor `chromium-browser` is on PATH. Idempotent: a second run only prints.
# The HTML report's test (tests/integration/test_html_report.py) renders the report with it.
#
#   scripts/chromium.sh     the binary's path on stdout; progress and errors on stderr
set -euo pipefail
apt_log=/var/log/megha-apt-chromium.log

say() { echo "chromium: $*" >&2; }
die() { say "$*"; exit 1; }
found() { command -v chromium || command -v chromium-browser; }

if found >/dev/null; then found; exit 0; fi
[ "$(id -u)" = 0 ] || die "chromium is missing and we are not root: install Debian's chromium first"
say "installing Debian's chromium (log: $apt_log) ..."
# apt prints pages of progress: keep it in a file and show only its end when it fails
if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends chromium; } >"$apt_log" 2>&1; then
  tail -n 20 "$apt_log" >&2
  die "apt-get install chromium failed (full log: $apt_log)"
fi
found || die "chromium installed but neither chromium nor chromium-browser is on PATH"
