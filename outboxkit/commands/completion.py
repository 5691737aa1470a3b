"""`outboxkit completion bash`: a shell completion script for the command line, generated from
its parser (the commands of installed distributions included). Load it with
``eval "$(outboxkit completion bash)"`` in ~/.bashrc (zsh: after ``autoload -U bashcompinit &&
bashcompinit``)."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable, Iterator

from outboxkit.parsers import NO_SETTINGS, SubParsers, command

FUNCTION = "_outboxkit_complete"


def words(parser: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, list[str]]]:
    """Each command path (``/db/upgrade``) with what may follow it: sub-commands and options."""
    following: list[str] = []
    subs: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            subs += list(action.choices.items())
        elif action.help != argparse.SUPPRESS:
            following += action.option_strings
    yield path, [name for name, _ in subs] + following
    for name, sub in subs:
        yield from words(sub, f"{path}/{name}")


def bash_script(parser: argparse.ArgumentParser) -> str:
    """The bash completion function for ``parser``'s command tree."""
    tree = dict(words(parser))
    cases = "\n".join(
        f"    {shlex.quote(path or '/')}) opts={shlex.quote(' '.join(sorted(after)))} ;;"
        for path, after in tree.items()
    )
    paths = " ".join(path for path in tree if path)
    return f"""{FUNCTION}() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" path="" i w opts=""
  local paths={shlex.quote(f" {paths} ")}
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${{COMP_WORDS[i]}}"
    [[ "$paths" == *" $path/$w "* ]] && path="$path/$w"
  done
  case "${{path:-/}}" in
{cases}
  esac
  COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}}
complete -o default -F {FUNCTION} outboxkit
"""


def add_parser(sub: SubParsers, whole: Callable[[], argparse.ArgumentParser]) -> None:
    """Add `completion`; ``whole`` builds the whole command line it completes."""

    def _completion(args: argparse.Namespace, settings: object) -> int:
        print(bash_script(whole()), end="")
        return 0

    completion = command(
        sub,
        "completion",
        _completion,
        help="print the shell completion script (bash; zsh with bashcompinit)",
        description='Print a completion script for bash: eval "$(outboxkit completion bash)" in '
        "~/.bashrc. zsh: autoload -U bashcompinit && bashcompinit first.",
        settings=NO_SETTINGS,
    )
    completion.add_argument("shell", choices=["bash"], help="the shell")
