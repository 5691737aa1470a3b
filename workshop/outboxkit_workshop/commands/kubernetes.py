"""`outboxkit dev kubernetes render --out DIR`: the saga's Kubernetes manifests (Strimzi Kafka and
Connect, the outbox connectors, the services, the Spark consumer jobs, the set-up Job)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outboxkit.parsers import HelpFormatter

if TYPE_CHECKING:
    from outboxkit_workshop.kubernetes.shape import Shape

# The renderer's defaults (`Shape`'s), written out so that building the parser imports no
# renderer: `outboxkit --help` stays fast. A test checks they equal Shape()'s.
DEFAULTS: dict[str, Any] = {
    "namespace": "outboxkit",
    "image": "outboxkit:<the installed version>",
    "service_replicas": 2,
    "service_workers": 2,
    "connect_replicas": 2,
    "connect_image": "registry.example.com/outboxkit/connect",
    "transform_url": "https://artifacts.example.com/outboxkit/outboxkit-smt-1.jar",
    "database_host": "postgres",
    "database_port": 5432,
    "topic_prefix": "outbox.event.",
}


def shape_of(args: argparse.Namespace) -> Shape:
    """The Shape the command line asks for."""
    from outboxkit_workshop.kubernetes.shape import Shape

    return Shape(
        namespace=args.namespace,
        image=args.image or Shape().image,
        service_replicas=args.replicas,
        service_workers=args.workers,
        connect_replicas=args.connect_replicas,
        connect_image=args.connect_image,
        transform_url=args.transform_url,
        database_host=args.database_host,
        database_port=args.database_port,
        topic_prefix=args.topic_prefix,
    )


def _render(args: argparse.Namespace, settings: Any) -> int:
    from outboxkit_workshop.kubernetes.render import write_manifests

    for path in write_manifests(shape_of(args), args.out):
        print(path)
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    about = "the saga's Kubernetes manifests"
    group = sub.add_parser(
        "kubernetes", help=about, description=about, formatter_class=HelpFormatter
    )
    actions = group.add_subparsers(dest="action", required=True)
    render = actions.add_parser(
        "render",
        help="write the manifests as YAML files into a directory",
        formatter_class=HelpFormatter,
    )
    render.add_argument("--out", type=Path, required=True, help="directory written into")
    render.add_argument(
        "--namespace", default=DEFAULTS["namespace"], help="every object's namespace"
    )
    render.add_argument("--image", help=f"the outboxkit image (default: {DEFAULTS['image']})")
    render.add_argument(
        "--replicas", type=int, default=DEFAULTS["service_replicas"], help="replicas per service"
    )
    render.add_argument(
        "--workers",
        type=int,
        default=DEFAULTS["service_workers"],
        help="uvicorn workers per replica",
    )
    render.add_argument(
        "--connect-replicas",
        type=int,
        default=DEFAULTS["connect_replicas"],
        help="Kafka Connect workers",
    )
    render.add_argument(
        "--connect-image",
        default=DEFAULTS["connect_image"],
        help="where Strimzi pushes the Connect image it builds (tagged with Debezium's version)",
    )
    render.add_argument(
        "--transform-url",
        default=DEFAULTS["transform_url"],
        help="where Strimzi downloads outboxkit's Connect transform: the jar that outboxkit "
        "cdc plugin --into DIR writes, served by your artifact host (its SHA-512 is pinned)",
    )
    render.add_argument(
        "--database-host", default=DEFAULTS["database_host"], help="the Postgres host"
    )
    render.add_argument(
        "--database-port", type=int, default=DEFAULTS["database_port"], help="the Postgres port"
    )
    render.add_argument(
        "--topic-prefix", default=DEFAULTS["topic_prefix"], help="the outbox topics' prefix"
    )
    render.set_defaults(run=_render)
