"""The integration tests share the session's stack; each module isolates itself (its own
databases, topics, consumer names). What a module's tests registered on the stack's Connect
for their service databases (`Stack.add_service`) is removed after the module: those connectors'
idle tasks would take CPU from every later test and restart with every Connect restart."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import remove_added_connectors, running_session_stack


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    if "/tests/integration/" not in item.path.as_posix():
        return
    if nextitem is not None and nextitem.path == item.path:
        return  # the module goes on
    stack = running_session_stack()
    if stack is not None:
        remove_added_connectors(stack)
