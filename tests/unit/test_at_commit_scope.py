"""Delete mode's write at commit listens only on the engines given to `outbox.attach_at_commit`
(the framework's publishing engines among them), never on SQLAlchemy's Engine class: another
engine of the process keeps no listener of ours and runs none of our code."""

from __future__ import annotations

import ast
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, event, text

import outbox
from outbox import at_commit
from service_template import ServiceSettings, create_app
from tests.unit.test_layers import MAY_IMPORT, ROOT, python_files

URL = "postgresql+psycopg://app@db.invalid/orders"


def ours(target: Any) -> list[str]:
    """The events on which ``target`` has one of at-commit's listeners."""
    return [name for name, fn in at_commit._LISTENERS if event.contains(target, name, fn)]


def class_wide_listeners(path: Path) -> list[int]:
    """Lines of ``path`` that listen on SQLAlchemy's Engine or Connection class: every engine of
    the process, the user's own included, would run the listener."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        name = node.func.id if isinstance(node.func, ast.Name) else name
        target = node.args[0]
        target_name = target.attr if isinstance(target, ast.Attribute) else ""
        target_name = target.id if isinstance(target, ast.Name) else target_name
        if name in ("listen", "listens_for") and target_name in ("Engine", "Connection"):
            found.append(node.lineno)
    return found


def test_no_framework_module_listens_on_the_engine_class() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in MAY_IMPORT
        for path in python_files(package)
        for line in class_wide_listeners(path)
    ]
    assert offenders == []
    assert ours(Engine) == [] and ours(Connection) == []


def test_the_check_sees_a_class_wide_listener(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        "from sqlalchemy import Engine, event, engine\n"
        "@event.listens_for(Engine, 'commit')\ndef f(conn): pass\n"
        "event.listen(engine.Engine, 'rollback', f)\n"
    )
    assert class_wide_listeners(wrong) == [2, 4]


def test_a_users_engine_is_untouched() -> None:
    """With the framework imported and its engines attached, the user's own engine has no
    listener of ours, and its commits and rollbacks run none of our code."""
    framework = at_commit.attach(create_engine("sqlite://"))
    app = create_app(ServiceSettings(name="orders", database_url=URL, log_json=False))
    users = create_engine("sqlite://")
    assert ours(users) == [] and not at_commit.is_attached(users)
    assert len(ours(framework)) == len(ours(app.state.service.engine)) == len(at_commit._LISTENERS)
    ran: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(at_commit, "_write_waiting", lambda conn, commit: ran.append("write"))
        patch.setattr(at_commit, "_drop", lambda conn: ran.append("drop"))
        for engine in (users, users.execution_options(isolation_level="SERIALIZABLE")):
            with engine.begin() as conn:
                conn.execute(text("SELECT 1"))
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
                conn.rollback()
        assert ran == []
        with framework.begin() as conn:  # the same on an attached engine runs the listeners
            conn.execute(text("SELECT 1"))
        assert ran == ["write"]


def test_attach_is_idempotent_and_covers_the_engines_options_make() -> None:
    engine = create_engine(URL)
    barrier = threading.Barrier(8)

    def attach(_: int) -> Engine:
        barrier.wait()
        return outbox.attach_at_commit(engine)

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(attach, range(8))) == {engine}
    assert list(engine.dispatch.commit).count(at_commit._on_commit) == 1
    serializable = engine.execution_options(isolation_level="SERIALIZABLE")
    assert at_commit.is_attached(serializable)
    assert list(serializable.dispatch.commit).count(at_commit._on_commit) == 1
    other = create_engine(URL).execution_options(isolation_level="SERIALIZABLE")
    at_commit.attach(other)  # attaching through an options engine attaches its parent
    assert ours(other._proxied) != [] and ours(other) == []  # type: ignore[attr-defined]
