"""The documentation pages marked `<!-- snippets: stack -->` run against the real stack."""

from __future__ import annotations

from pathlib import Path

import pytest

from outboxkit_workshop.devstack.stack import Stack
from tests.doc_snippets import ROOT, needs_stack, pages, python_blocks, run_page

pytestmark = pytest.mark.integration

STACK_PAGES = [p for p in pages() if python_blocks(p) and needs_stack(p)]


@pytest.mark.parametrize("page", STACK_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_stack_page_runs(page: Path, stack: Stack, empty_database: str) -> None:
    run_page(
        page,
        env={
            "DATABASE_URL": empty_database,
            "KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap_servers(),
            "CONNECT_URL": stack.connect_url(),
        },
    )
