"""python serve_tree.py TREE ENV_PID PORT: the orders service from source tree TREE, with the
ORDERS_* environment of the running service ENV_PID (its database, role and password file).
LOOP and HTTP choose uvicorn's event loop and HTTP parser (default: auto)."""

import importlib
import os
import sys
from pathlib import Path


def main() -> None:
    tree, env_pid, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sys.path.insert(0, tree)
    os.chdir(tree)
    for line in Path(f"/proc/{env_pid}/environ").read_bytes().split(b"\0"):
        key, _, value = line.decode().partition("=")
        if key.startswith(("ORDERS_", "OUTBOXKIT_")):
            os.environ[key] = value
    uvicorn = importlib.import_module("uvicorn")
    orders = importlib.import_module("saga.orders")
    assert orders.__file__.startswith(tree), orders.__file__
    uvicorn.run(
        "saga.orders:app",
        factory=True,
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        loop=os.environ.get("LOOP", "auto"),
        http=os.environ.get("HTTP", "auto"),
    )


if __name__ == "__main__":
    main()
