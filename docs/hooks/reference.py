"""MkDocs hook: the reference pages (Python API, CLI, settings) generated from the code at each
build, never committed. A file at one of their paths in docs/ is an error."""

from __future__ import annotations

from typing import Any

import api_reference
import cli_reference
import settings_reference
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files


def generated_pages() -> dict[str, str]:
    """Each generated page's path under docs/ and its Markdown."""
    from outboxkit.cli import build_parser

    pages = {"reference/api/index.md": api_reference.index()}
    for package in api_reference.PACKAGES:
        pages[f"reference/api/{package}.md"] = api_reference.page(package)
    pages["reference/cli.md"] = cli_reference.page(build_parser())
    pages["reference/settings.md"] = settings_reference.page()
    return pages


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    """Add the generated pages to the site."""
    for path, markdown in generated_pages().items():
        if files.get_file_from_path(path) is not None:
            raise PluginError(f"docs/{path} is generated from the code: delete the file")
        files.append(File.generated(config, path, content=markdown))
    return files
