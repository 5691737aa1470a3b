"""How pytest-xdist's two workers share a run (``-n 2`` in pyproject's pytest options): every
test that needs the stack or Spark in one worker, in collection order, since they share the
session's stacks and its SparkSession and stop each after its last user; the unit tests in the
other, beside them. The unit tests use one core, and the stack tests mostly wait on the stack."""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

# Where the tests that need no stack live (tests/conftest.py refuses a stack test under it).
UNIT_DIR = "tests/unit/"


class BesideTheStack(LoadScopeScheduling):
    """Two work units, the stack's tests and the unit tests; a run of unit tests only is spread
    over the workers by module, as ``--dist loadscope`` does."""

    _units_only: bool | None = None

    def _split_scope(self, nodeid: str) -> str:
        if not nodeid.startswith(UNIT_DIR):
            return "stack"
        if self._units_only is None:
            self._units_only = all(n.startswith(UNIT_DIR) for n in self.collection or ())
        return super()._split_scope(nodeid) if self._units_only else "unit"
