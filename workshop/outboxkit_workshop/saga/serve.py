"""`python -m outboxkit_workshop.saga.serve SERVICE --port N`: one saga service under uvicorn."""

from __future__ import annotations

import argparse

import uvicorn

from outboxkit_workshop.saga.common import SERVICES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("service", choices=SERVICES)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        f"outboxkit_workshop.saga.{args.service}:app",
        factory=True,
        host=args.host,
        port=args.port,
        log_config=None,
        access_log=False,
    )


if __name__ == "__main__":
    main()
