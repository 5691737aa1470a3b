"""deploy/kubernetes/: the manifests `outboxkit dev kubernetes render` writes, checked against the
resources' published schemas (tests/schemas/kubernetes/README.md) and against the compose
file's shape; no cluster runs here."""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from cdc.config import build_connector_config
from outboxkit_workshop.commands import kubernetes as command
from outboxkit_workshop.devstack.artifacts import pinned_versions
from outboxkit_workshop.devstack.settings import default_cache_dir
from outboxkit_workshop.kubernetes import Shape, manifests, render_yaml
from outboxkit_workshop.kubernetes.connect import connector_settings
from outboxkit_workshop.saga.common import SERVICES

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
STRIMZI = "kafka.strimzi.io"
SPARK_OPERATOR = "sparkoperator.k8s.io"
INSTALL = "run: bash scripts/install-schemas.sh"


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


@functools.cache
def installed_schemas() -> Path:
    """The custom resources' schemas scripts/install-schemas.sh installed for the current pins
    (sources.toml, package-lock.json); fails, never skips, when they are not there."""
    pins = (SCHEMAS / "sources.toml").read_bytes() + (SCHEMAS / "package-lock.json").read_bytes()
    cache = Path(os.environ.get("OUTBOXKIT_CACHE_DIR") or default_cache_dir())
    path = cache / "schemas" / hashlib.sha256(pins).hexdigest()[:16]
    if not (path / "complete").is_file():
        pytest.fail(f"the custom resources' schemas are not installed in {path}; {INSTALL}")
    return path


@functools.cache
def core_validator(name: str) -> Any:
    schema = json.loads((SCHEMAS / "core" / f"{name}.json").read_text())
    return jsonschema.validators.validator_for(schema)(schema)


@functools.cache
def spark_operator_validator(version: str) -> Any:
    """The SparkApplication CRD's schema of ``version``, strict."""
    crd_path = tomllib.loads((SCHEMAS / "sources.toml").read_text())["spark_operator_crd"]
    crd_file = installed_schemas() / "spark-operator" / Path(crd_path).name
    crd = yaml.load(crd_file.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    served = {v["name"]: v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"]}
    if version not in served:
        pytest.fail(f"{crd_file} has no {version} (it has {sorted(served)})")
    schema = strict(served[version])
    return jsonschema.validators.validator_for(schema)(schema)


def strimzi_errors(objs: list[dict[str, Any]]) -> list[list[str]]:
    """Each Strimzi object's errors, from the npm package's validators (strimzi.mjs), all in one
    node process."""
    if not objs:
        return []
    modules = installed_schemas() / "npm" / "node_modules"
    node = shutil.which("node")
    if node is None:
        pytest.fail(f"node is not on PATH; {INSTALL}")
    run = subprocess.run(
        [node, str(SCHEMAS / "strimzi.mjs"), str(modules)],
        input=json.dumps(objs),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    found: list[list[str]] = json.loads(run.stdout)
    assert len(found) == len(objs), run.stdout
    return found


def validation_errors(objs: list[dict[str, Any]]) -> list[list[str]]:
    """Each object's errors against the published schema of its kind (strict: an unknown field
    is one); an object of a kind with no schema here is an error too."""
    errors: list[list[str]] = [[] for _ in objs]
    strimzi = [i for i, o in enumerate(objs) if o["apiVersion"].startswith(f"{STRIMZI}/")]
    for i, found in zip(strimzi, strimzi_errors([objs[i] for i in strimzi]), strict=True):
        errors[i] = found
    for i, obj in enumerate(objs):
        api_version, kind = obj["apiVersion"], obj["kind"]
        if (api_version, kind) in CORE:
            checked = core_validator(CORE[(api_version, kind)])
        elif api_version.startswith(f"{SPARK_OPERATOR}/") and kind == "SparkApplication":
            checked = spark_operator_validator(api_version.split("/")[1])
        elif i in strimzi:
            continue
        else:
            errors[i] = [f"no schema for {api_version} {kind} (tests/schemas/kubernetes/README.md)"]
            continue
        errors[i] = [f"{list(e.absolute_path)}: {e.message}" for e in checked.iter_errors(obj)]
    return errors


def every_object() -> list[tuple[str, dict[str, Any]]]:
    return [(f, o) for f, objs in manifests(Shape()).items() for o in objs]


@functools.cache
def every_objects_errors() -> list[list[str]]:
    return validation_errors([o for _, o in every_object()])


@pytest.mark.parametrize(
    "index",
    range(len(every_object())),
    ids=[f"{o['kind']}/{o['metadata']['name']}" for _, o in every_object()],
)
def test_every_manifest_is_valid_against_its_published_schema(index: int):
    errors = every_objects_errors()[index]
    assert not errors, errors[:5]


def first(kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(o for _, o in every_object() if o["kind"] == kind))


@pytest.mark.parametrize("kind", ["Deployment", "KafkaConnect", "SparkApplication"])
def test_a_broken_manifest_fails_validation(kind: str):
    """The check can fail: a typo'd field, a missing required field and a wrong type are each
    caught."""
    typo = first(kind)
    typo["spec"]["replicaz" if kind != "SparkApplication" else "sparkVersoin"] = 1
    missing = first(kind)
    wrong = first(kind)
    if kind == "Deployment":
        del missing["spec"]["selector"]
        wrong["spec"]["replicas"] = "two"
    elif kind == "KafkaConnect":
        del missing["spec"]["bootstrapServers"]
        wrong["spec"]["replicas"] = "two"
    else:
        del missing["spec"]["driver"]["cores"]
        missing["spec"]["mode"] = "sideways"
        wrong["spec"]["driver"]["cores"] = "one"
    found = validation_errors([first(kind), typo, missing, wrong])
    assert found[0] == [], found[0]
    assert found[1], "an unknown field passed"
    assert found[2], "a missing or wrong required field passed"
    assert found[3], "a wrong type passed"


def test_strimzi_unknown_fields_are_errors_outside_open_maps():
    """Strict field validation of the Strimzi validators (strimzi.mjs) reaches nested objects
    and list items, and leaves maps the CRD keeps open (a Kafka's config, labels) open."""
    nested = first("Kafka")
    nested["spec"]["kafka"]["listeners"][0]["authentication"]["tipe"] = "x"
    template = first("Kafka")
    template["spec"]["kafka"]["template"] = {"pod": {"affinity": {"nodeAffinityy": {}}}}
    top = first("KafkaTopic")
    top["spek"] = {}
    opened = first("Kafka")
    opened["spec"]["kafka"]["config"]["log.retention.hours"] = 1
    opened["metadata"].setdefault("labels", {})["team"] = "payments"
    found = strimzi_errors([nested, template, top, opened])
    assert found[0] == ["/spec/kafka/listeners/0/authentication/tipe: unknown field"]
    assert found[1] == ["/spec/kafka/template/pod/affinity/nodeAffinityy: unknown field"]
    assert found[2] == ["/spek: unknown field"]
    assert found[3] == [], found[3]


def test_a_kind_without_a_schema_here_is_an_error():
    unknown = {"apiVersion": f"{STRIMZI}/v1", "kind": "KafkaWidget", "metadata": {"name": "x"}}
    other = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "x"}}
    assert all(validation_errors([unknown, other]))


def test_the_committed_manifests_equal_a_fresh_render():
    rendered = {name: render_yaml(objs) for name, objs in manifests(Shape()).items()}
    committed = {p.name: p.read_text() for p in RENDERED.glob("*.yaml")}
    assert committed == rendered, "run: outboxkit dev kubernetes render --out deploy/kubernetes"


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


def test_the_command_defaults_are_the_shapes():
    shape = Shape()
    written = {k: v for k, v in command.DEFAULTS.items() if k != "image"}
    assert written == {k: getattr(shape, k) for k in written}
    assert shape.image.startswith("outboxkit:")


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
        assert app["arguments"][0] == f"outboxkit_workshop.saga.jobs:{service}"
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


def test_the_console_is_the_compose_files():
    """The operator console: the compose file's command, its own Kafka user with the grants of
    deploy/kafka/init.sh, each job's database password, its users and session key from a
    Secret of their own, /healthz probes, reachable inside the cluster only."""
    shape = Shape()
    objs = {(o["kind"], o["metadata"]["name"]): (f, o) for f, o in every_object()}
    _, deployment = objs[("Deployment", "console")]
    compose = yaml.safe_load((ROOT / "deploy/docker-compose.yml").read_text())["services"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == compose["console"]["command"]
    assert deployment["spec"]["replicas"] == 1
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["OUTBOXKIT_KAFKA_SASL_USERNAME"] == "console"
    assert env["OUTBOXKIT_CONSOLE_HOST"] == "0.0.0.0"
    (port,) = container["ports"]
    assert int(env["OUTBOXKIT_CONSOLE_PORT"]) == port["containerPort"] == 8089
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert env["OUTBOXKIT_CONNECT_URL"] == f"http://{shape.connect_name}-connect-api:8083"
    for service in SERVICES:
        assert env[f"{service.upper()}_DATABASE_URL"].startswith(f"postgresql+psycopg://{service}@")
    # Every file the environment names is in the pod's secrets volume.
    (volume,) = deployment["spec"]["template"]["spec"]["volumes"]
    files = {
        item["path"]: (source["secret"]["name"], item["key"])
        for source in volume["projected"]["sources"]
        for item in source["secret"]["items"]
    }
    named = {Path(v).name for k, v in env.items() if k.endswith("_FILE")}
    assert named == set(files), named ^ set(files)
    assert files["kafka-console.password"] == ("console", "password")  # Strimzi's Secret
    assert files["console.users"][0] == files["console-session.key"][0] != "console"
    # No port beyond the cluster; Connect's REST API lets it in.
    _, service = objs[("Service", "console")]
    assert service["spec"].get("type", "ClusterIP") == "ClusterIP"
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    _, policy = objs[("NetworkPolicy", "console-to-connect")]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": deployment["spec"]["selector"]}]
    # Its KafkaUser has exactly the `grant console ...` lines of deploy/kafka/init.sh.
    _, user = objs[("KafkaUser", "console")]
    granted = {
        (
            acl["resource"]["type"],
            acl["resource"].get("patternType"),
            acl["resource"].get("name"),
            frozenset(acl["operations"]),
        )
        for acl in user["spec"]["authorization"]["acls"]
    }
    init = (ROOT / "deploy/kafka/init.sh").read_text().replace("$TOPIC_PREFIX", shape.topic_prefix)
    script = {
        (kind, {"prefixed": "prefix"}.get(pattern, pattern), name, frozenset(ops))
        for line in init.splitlines()
        if line.startswith("grant console ")
        for kind, pattern, name, *ops in [line.replace('"', "").split()[2:]]
    }
    assert script and granted == script


def test_every_pod_runs_as_the_image_user_and_can_read_its_secret_files():
    """The image's user by number (runAsNonRoot cannot verify a user name) and the secret files'
    group its own: projected secrets are root's, mounted 0440, read through the group."""
    from outboxkit_workshop.kubernetes.workloads import IMAGE_UID

    pods = []
    for _, obj in every_object():
        if obj["kind"] in ("Deployment", "Job"):
            pods.append(
                (obj["metadata"]["name"], obj["spec"]["template"]["spec"]["securityContext"])
            )
        elif obj["kind"] == "SparkApplication":
            for role in ("driver", "executor"):
                pods.append(
                    (f"{obj['metadata']['name']} {role}", obj["spec"][role]["podSecurityContext"])
                )
    assert len(pods) >= 8
    for name, security in pods:
        assert security["runAsNonRoot"] and security["runAsUser"] == IMAGE_UID, name
        assert security["fsGroup"] == IMAGE_UID, name
    for _, obj in every_object():
        for volume in _volumes(obj):
            if "projected" in volume:
                assert volume["projected"]["defaultMode"] == 0o440, obj["metadata"]["name"]


def _volumes(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] in ("Deployment", "Job"):
        return list(obj["spec"]["template"]["spec"].get("volumes", []))
    return list(obj.get("spec", {}).get("volumes", [])) if obj["kind"] == "SparkApplication" else []


def test_every_spark_application_authenticates_and_encrypts_its_executors():
    """Spark makes each application's secret on Kubernetes: with spark.authenticate its
    executors prove it (no other pod joins the application) and their RPC is encrypted."""
    applications = [o for _, o in every_object() if o["kind"] == "SparkApplication"]
    assert applications
    for app in applications:
        conf = app["spec"]["sparkConf"]
        assert conf.get("spark.authenticate") == "true", app["metadata"]["name"]
        assert conf.get("spark.network.crypto.enabled") == "true", app["metadata"]["name"]
