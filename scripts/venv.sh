#!/usr/bin/env bash
# Creates (or reuses) the project's virtualenv in .venv with everything the tests need.
# Idempotent and quick when nothing changed: it re-installs only when pyproject.toml moved.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.installed-$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if [ ! -f "$stamp" ]; then
  echo "installing the project into $venv ..." >&2
  "$venv/bin/pip" install --quiet --upgrade pip >/dev/null 2>&1 || true
  "$venv/bin/pip" install --quiet -e "$root[services,test,workloads,inspect,profile]"
  rm -f "$venv"/.installed-*
  touch "$stamp"
fi
