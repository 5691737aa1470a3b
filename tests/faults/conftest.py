"""Fault campaigns share the integration stack fixtures."""

from tests.integration.conftest import (  # noqa: F401
    aggregate_type,
    engine,
    spark,
    spark_effects_table,
    stack,
)
