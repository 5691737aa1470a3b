"""deploy/ runs the versions the embedded stack runs (one set of pins: devstack/java/pom.xml)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from devstack.artifacts import pinned_versions

ROOT = Path(__file__).resolve().parents[2]


def _images() -> dict[str, str]:
    text = (ROOT / "deploy" / "docker-compose.yml").read_text()
    return dict(re.findall(r"image:\s*([\w./-]+):([\w.-]+)", text))


def test_compose_images_use_the_pinned_kafka_and_debezium_versions():
    pins = pinned_versions()
    images = _images()
    assert images["apache/kafka"] == pins.kafka
    assert images["quay.io/debezium/connect"] == pins.debezium


def test_pyspark_is_pinned_to_the_spark_kafka_connector_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    spark = [d for d in project["optional-dependencies"]["spark"] if d.startswith("pyspark")]
    assert spark == [f"pyspark=={pinned_versions().spark}"]


def test_kraft_cluster_ids_never_look_like_an_option():
    from devstack.broker import cluster_id

    ids = [cluster_id() for _ in range(2000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def _environment(service: str) -> dict[str, str]:
    """A compose service's environment, names turned into the properties the images derive
    from them (``KAFKA_MESSAGE_MAX_BYTES`` -> ``message.max.bytes``, ``CONNECT_`` likewise)."""
    text = (ROOT / "deploy" / "docker-compose.yml").read_text()
    block = re.search(rf"(?ms)^  {service}:\n(.*?)(?=^  \w|\Z)", text)
    assert block, f"no service {service!r} in deploy/docker-compose.yml"
    env = dict(re.findall(r"(?m)^      (KAFKA_\w+|CONNECT_\w+):\s*(\S+)", block.group(1)))
    return {name.split("_", 1)[1].lower().replace("_", "."): value for name, value in env.items()}


def test_compose_sets_the_kafka_record_limits_of_cdc_limits():
    from cdc.limits import BROKER_SETTINGS, WORKER_SETTINGS

    broker, worker = _environment("kafka"), _environment("connect")
    assert {k: broker.get(k) for k in BROKER_SETTINGS} == BROKER_SETTINGS
    assert {k: worker.get(k) for k in WORKER_SETTINGS} == WORKER_SETTINGS


def test_the_embedded_stack_sets_the_same_record_limits():
    from cdc.limits import BROKER_SETTINGS, WORKER_SETTINGS
    from devstack.broker import server_properties
    from devstack.connect import worker_properties

    def parse(props: str) -> dict[str, str]:
        return dict(line.split("=", 1) for line in props.splitlines() if line)

    broker = parse(server_properties(Path("/data"), 9092, 9093))
    worker = parse(worker_properties("127.0.0.1:9092", 8083, exactly_once=True))
    assert BROKER_SETTINGS.items() <= broker.items()
    assert WORKER_SETTINGS.items() <= worker.items()


def test_limits_are_kafkas_defaults_and_leave_room_above_the_publish_limit():
    import importlib

    from cdc import limits

    assert limits.PRODUCER_MAX_REQUEST_SIZE == 1 << 20
    assert limits.BROKER_MESSAGE_MAX_BYTES == (1 << 20) + 12  # + the log's record overhead
    publish_limit = getattr(
        importlib.import_module("outbox.envelope"), "DEFAULT_MAX_RECORD_BYTES", 0
    )
    if publish_limit:  # the publish-side record limit (issue 14) once outbox.envelope has it
        assert publish_limit < limits.PRODUCER_MAX_REQUEST_SIZE <= limits.BROKER_MESSAGE_MAX_BYTES
