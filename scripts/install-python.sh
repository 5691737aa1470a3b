#!/usr/bin/env bash
# Creates .venv and installs the framework with all extras and the repository's workshop (the dev
# stack, the example saga, campaigns, benchmarks: workshop/pyproject.toml), both editable;
# skipped when neither pyproject.toml changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "python: creating .venv with $($python --version)"
  "$python" -m venv .venv
fi
stamp=.venv/.outboxkit-installed
digest="$(cat pyproject.toml workshop/pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then
  echo "python: .venv up to date"
  exit 0
fi
echo "python: installing outboxkit[spark,service,console,dev,docs] and the workshop into .venv (first time: a few minutes)"
.venv/bin/python -m pip install -q --upgrade pip
# setuptools warns at length that a folder named like a package may shadow it; the framework
# checks that itself at import (outboxkit.kernel.packages), so the warning is left out.
PYTHONWARNINGS="ignore:Editable installation" \
  .venv/bin/python -m pip install -q -e '.[spark,service,console,dev,docs]' -e ./workshop
echo "$digest" > "$stamp"
echo "python: done"
