"""spark-submit's primary resource: `outboxkit consume JOB...` in the driver (client mode).

`python consume.py --alive` exits 0 while a driver runs in this container (the health check)."""

import os
import sys
from pathlib import Path


def alive() -> bool:
    """True when another process runs this file as a driver (not as a health check)."""
    me = str(Path(__file__).resolve()).encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        if cmdline.parent.name == str(os.getpid()):
            continue
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:  # the process ended while we looked
            continue
        if me in argv and b"--alive" not in argv:
            return True
    return False


if __name__ == "__main__":
    if sys.argv[1:] == ["--alive"]:
        sys.exit(0 if alive() else 1)
    from outboxkit.cli import main

    sys.exit(main(["consume", *sys.argv[1:]]))
