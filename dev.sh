#!/usr/bin/env bash
# The project's one entry point for set-up. Usage:
#   ./dev.sh demo   install everything missing, then run the main job on the embedded stack
#   ./dev.sh test   install everything missing, then run the test suite (CI runs this)
#   ./dev.sh check  install everything missing, then lint (ruff), check formatting and types (mypy)
#   ./dev.sh bench  install everything missing, then run the benchmarks (bench-results/)
#   ./dev.sh wheel  install everything missing, then build the framework's wheel into dist/
#                   (with the Connect transform the set-up builds and checks)
#   ./dev.sh setup  install only
# Extra arguments after the verb go to the command. Tests: ./dev.sh test runs everything but the
# slow fault campaign (what CI runs); ./dev.sh test --slow is the full campaign;
# ./dev.sh test -m "not integration" runs the unit tests only.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
verb="${1:-}"; shift || true
case "$verb" in
  demo|test|check|bench|wheel|setup) ;;
  *) echo "usage: ./dev.sh demo|test|check|bench|wheel|setup [args...]" >&2; exit 2 ;;
esac
bash scripts/install-system.sh
bash scripts/install-python.sh
.venv/bin/outboxkit dev stack install
case "$verb" in test|check) bash scripts/install-schemas.sh ;; esac
case "$verb" in
  demo) exec .venv/bin/outboxkit dev demo "$@" ;;
  test) exec .venv/bin/python -m pytest "$@" ;;
  check)
    # The quality gate CI runs before the tests: any finding fails it.
    .venv/bin/ruff check .
    .venv/bin/ruff format --check .
    exec .venv/bin/mypy ;;
  bench) exec .venv/bin/outboxkit dev bench "$@" ;;
  wheel) exec .venv/bin/python -m uv build --wheel --out-dir dist "$@" . ;;
  setup) echo "set-up complete: .venv/bin/outboxkit is ready" ;;
esac
