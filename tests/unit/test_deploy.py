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
