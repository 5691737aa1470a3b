"""Fault campaigns use the session's stack fixtures from tests/conftest.py."""
