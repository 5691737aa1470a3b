#!/usr/bin/env bash
# Creates .venv and installs the project with all extras; skipped when pyproject.toml is unchanged.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "python: creating .venv with $($python --version)"
  "$python" -m venv .venv
fi
stamp=.venv/.outboxkit-installed
digest="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then
  echo "python: .venv up to date"
  exit 0
fi
echo "python: installing outboxkit[spark,service,dev,bench,docs] into .venv (first time: a few minutes)"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[spark,service,dev,bench,docs]'
echo "$digest" > "$stamp"
echo "python: done"
