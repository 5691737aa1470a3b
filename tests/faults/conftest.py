"""Fault campaigns share the integration stack fixtures."""

from tests.integration.conftest import aggregate_type, engine, stack  # noqa: F401
