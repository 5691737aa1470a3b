"""deploy/kubernetes/: the manifests `outboxkit kubernetes render` writes, checked against the
resources' published schemas (tests/schemas/kubernetes/README.md) and against the compose
file's shape; no cluster runs here."""

from __future__ import annotations

import argparse
import copy
import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from cdc.config import build_connector_config
from outboxkit.commands import kubernetes as command
from outboxkit.devstack.artifacts import pinned_versions
from outboxkit.kubernetes import Shape, manifests, render_yaml
from outboxkit.kubernetes.connect import connector_settings
from outboxkit.saga.common import SERVICES

ROOT = Path(__file__).resolve().parents[2]
RENDERED = ROOT / "deploy/kubernetes"
SCHEMAS = ROOT / "tests/schemas/kubernetes"
CORE = {
    ("apps/v1", "Deployment"): "deployment-apps-v1",
    ("v1", "Service"): "service-v1",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudget-policy-v1",
    ("v1", "Secret"): "secret-v1",
    ("batch/v1", "Job"): "job-batch-v1",
    ("v1", "ConfigMap"): "configmap-v1",
    ("v1", "ServiceAccount"): "serviceaccount-v1",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaim-v1",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicy-networking-v1",
}


def strict(node: Any) -> Any:
    """A CRD's structural schema as the API server applies it with strict field validation:
    an unknown field is an error, except under x-kubernetes-preserve-unknown-fields."""
    if isinstance(node, list):
        return [strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: strict(v) for k, v in node.items()}
    keeps_unknown = node.get("x-kubernetes-preserve-unknown-fields")
    typed = node.get("type") == "object" and "properties" in node  # not a oneOf branch
    if typed and not keeps_unknown and "additionalProperties" not in node:
        node["additionalProperties"] = False
    return node


def crd_schema_file(obj: dict[str, Any]) -> Path:
    group, version = obj["apiVersion"].split("/")
    return SCHEMAS / "crds" / f"{obj['kind'].lower()}-{group.split('.')[0]}-{version}.json"


@functools.cache
def schema_text(path: Path) -> str:
    return path.read_text()


def validator(obj: dict[str, Any]) -> Any:
    """The validator of ``obj``'s kind; skips a custom resource whose schema is not vendored."""
    name = CORE.get((obj["apiVersion"], obj["kind"]))
    if name is not None:
        schema = json.loads(schema_text(SCHEMAS / "core" / f"{name}.json"))
    else:
        path = crd_schema_file(obj)
        if not path.exists():
            pytest.skip(
                f"{path.relative_to(ROOT)} not vendored (tests/schemas/kubernetes/README.md)"
            )
        schema = strict(json.loads(schema_text(path)))
    return jsonschema.validators.validator_for(schema)(schema)


def every_object() -> list[tuple[str, dict[str, Any]]]:
    return [(f, o) for f, objs in manifests(Shape()).items() for o in objs]


@pytest.mark.parametrize(
    "obj",
    [o for _, o in every_object()],
    ids=[f"{o['kind']}/{o['metadata']['name']}" for _, o in every_object()],
)
def test_every_manifest_is_valid_against_its_published_schema(obj: dict[str, Any]):
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator(obj).iter_errors(obj)]
    assert not errors, errors[:5]


@pytest.mark.parametrize("kind", ["Deployment", "KafkaConnect", "SparkApplication"])
def test_a_broken_manifest_fails_validation(kind: str):
    """The check can fail: a typo'd field and a missing required field are both caught."""
    obj = next(o for _, o in every_object() if o["kind"] == kind)
    checked = validator(obj)
    typo = copy.deepcopy(obj)
    typo["spec"]["replicaz" if kind != "SparkApplication" else "sparkVersoin"] = 1
    assert list(checked.iter_errors(typo)), "an unknown field passed"
    missing = copy.deepcopy(obj)
    if kind == "Deployment":
        del missing["spec"]["selector"]
    elif kind == "KafkaConnect":
        del missing["spec"]["bootstrapServers"]
    else:
        del missing["spec"]["driver"]["cores"]
        missing["spec"]["mode"] = "sideways"
    assert list(checked.iter_errors(missing)), "a missing or wrong required field passed"


def test_the_committed_manifests_equal_a_fresh_render():
    rendered = {name: render_yaml(objs) for name, objs in manifests(Shape()).items()}
    committed = {p.name: p.read_text() for p in RENDERED.glob("*.yaml")}
    assert committed == rendered, "run: outboxkit kubernetes render --out deploy/kubernetes"


def test_the_command_renders_with_its_defaults(tmp_path: Path):
    parser = argparse.ArgumentParser()
    command.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["kubernetes", "render", "--out", str(tmp_path), "--replicas", "3"])
    assert args.run(args, None) == 0
    deployments = yaml.safe_load_all((tmp_path / "40-services.yaml").read_text())
    assert {d["spec"]["replicas"] for d in deployments if d["kind"] == "Deployment"} == {3}
    assert "(default: outboxkit)" in " ".join(
        command_help(parser, ["kubernetes", "render", "--help"]).split()
    )


def command_help(parser: argparse.ArgumentParser, argv: list[str]) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parser.parse_args(argv)
    return out.getvalue()


def test_connectors_are_the_cli_builders_config():
    connectors = [o for _, o in every_object() if o["kind"] == "KafkaConnector"]
    assert len(connectors) == len(SERVICES)
    for service, obj in zip(SERVICES, connectors, strict=True):
        built = build_connector_config(connector_settings(Shape(), service))
        spec = obj["spec"]
        assert spec["config"] == {
            k: v for k, v in built.items() if k not in ("connector.class", "tasks.max")
        }
        assert spec["class"] == built["connector.class"] and spec["tasksMax"] == 1
        assert spec["config"]["exactly.once.support"] == "required"
        assert spec["config"]["database.password"].startswith("${dir:/mnt/")


def test_the_shape_is_the_compose_files():
    objs = {(o["kind"], o["metadata"]["name"]): o for _, o in every_object()}
    versions = pinned_versions()
    kafka = objs[("Kafka", "outboxkit")]["spec"]["kafka"]
    assert kafka["version"] == versions.kafka
    assert kafka["config"]["default.replication.factor"] == 3
    assert kafka["config"]["min.insync.replicas"] == 2
    assert kafka["config"]["unclean.leader.election.enable"] is False
    assert all(
        listener["authentication"]["type"] == "scram-sha-512" for listener in kafka["listeners"]
    )
    pool = objs[("KafkaNodePool", "combined")]["spec"]
    assert pool["replicas"] == 3 and set(pool["roles"]) == {"broker", "controller"}
    connect = objs[("KafkaConnect", "outboxkit-connect")]["spec"]
    assert (
        connect["replicas"] == 2 and connect["config"]["exactly.once.source.support"] == "enabled"
    )
    artifacts = [a for p in connect["build"]["plugins"] for a in p["artifacts"]]
    assert {"artifact": "debezium-connector-postgres", "version": versions.debezium}.items() <= {
        **artifacts[0]
    }.items()
    for service in SERVICES:
        app = objs[("SparkApplication", f"{service}-consumer")]["spec"]
        assert app["sparkVersion"] == versions.spark
        assert app["arguments"][0] == f"outboxkit.saga.jobs:{service}"
        deployment = objs[("Deployment", service)]["spec"]
        container = deployment["template"]["spec"]["containers"][0]
        assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
        assert container["livenessProbe"]["httpGet"]["path"] == "/health"
        assert container["resources"]["limits"] and container["resources"]["requests"]
        assert deployment["replicas"] == 2 and ("PodDisruptionBudget", service) in objs


def test_no_secret_value_is_rendered():
    """Secrets are referenced by name (created out of band or by Strimzi's User Operator)."""
    assert not [o for _, o in every_object() if o["kind"] == "Secret"]
    for _, obj in every_object():
        for key, value in leaves(obj):
            if "password" in key.lower() or "password" in value.lower():
                assert value in ("password", "ORDERS_DATABASE_PASSWORD_FILE") or (
                    value.endswith(("password", "PASSWORD_FILE", "password}"))
                ), f"{obj['metadata']['name']}: {key}={value}"


def leaves(node: Any, key: str = "") -> list[tuple[str, str]]:
    """Every (key, scalar) of a manifest."""
    if isinstance(node, dict):
        return [leaf for k, v in node.items() for leaf in leaves(v, str(k))]
    if isinstance(node, list):
        return [leaf for v in node for leaf in leaves(v, key)]
    return [(key, str(node))]
