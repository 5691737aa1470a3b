"""deploy/ runs the saga as production would, scaled out (3 Kafka brokers, 2 Connect workers, a
Spark standalone cluster, 2 replicas per service behind a load balancer), with the versions the
embedded stack runs (one set of pins: cdc/java/pom.xml). Checked without Docker: the
compose file, the Dockerfile, the load balancer's config and the scripts are read, and the settings
classes are built from each container's environment."""

from __future__ import annotations

import ast
import base64
import functools
import importlib
import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from outboxkit_workshop.devstack.artifacts import pinned_versions
from outboxkit_workshop.saga.common import SERVICES
from spark_consumers.session import FORKLESS_FS_CLASS, FORKLESS_FS_JAR, SPECULATION

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SECRETS = "/run/secrets"
ONE_SHOT = ("kafka-init", "setup")
SUPERVISOR = "cdc-supervisor"  # polls Connect's REST API: no traced work
CONSOLE = "console"  # serves the operator console's pages: no traced work
CONSUMERS = {f"{service}-consumer": service for service in SERVICES}
# Read by spark_consumers.session from the environment directly (no settings class).
PLAIN_ENVIRONMENT = {"OUTBOXKIT_SPARK_MASTER"}


# -- reading deploy/ -------------------------------------------------------------------------
@functools.cache
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    return loaded


def services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose()["services"]
    return found


def example_env() -> dict[str, str]:
    """deploy/.env.example, as make-secrets.sh turns it into .env (a cluster id filled in)."""
    lines = (DEPLOY / ".env.example").read_text().splitlines()
    pairs = dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))
    return {**pairs, "KAFKA_CLUSTER_ID": pairs.get("KAFKA_CLUSTER_ID") or "MkU3OEVBNTcwNTJENDM2Qk"}


def interpolate(value: Any, env: dict[str, str] | None = None) -> str:
    """Compose's variable substitution with deploy/.env.example (or ``env``): ${V},
    ${V:-default}, ${V:?err}, and $$ for a literal dollar."""
    env = example_env() if env is None else env

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group(1), match.group(2), match.group(3) or ""
        if env.get(name):
            return env[name]
        if op == ":?":
            raise AssertionError(f"${{{name}}} is required: {arg}")
        return arg if op == ":-" else ""

    return re.sub(r"\$\$|\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", substitute, str(value))


def environment(service: str) -> dict[str, str]:
    env = services()[service].get("environment", {})
    return {name: interpolate(value) for name, value in env.items()}


def mounted_secrets(service: str) -> dict[str, str]:
    """Where each of the service's secrets is mounted -> the file it comes from."""
    defined = compose()["secrets"]
    mounted = {}
    for secret in services()[service].get("secrets", []):
        source = secret["source"] if isinstance(secret, dict) else secret
        target = secret.get("target", source) if isinstance(secret, dict) else source
        path = target if target.startswith("/") else f"{SECRETS}/{target}"
        mounted[path] = defined[source]["file"]
    return mounted


def mounted_files(service: str) -> dict[str, Path]:
    """Bind-mounted files of deploy/ (``./x:/container/path:ro``): container path -> file."""
    mounts = {}
    for volume in services()[service].get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            mounts[target] = DEPLOY / source
    return mounts


def command(service: str) -> list[str]:
    return [interpolate(part) for part in services()[service]["command"]]


def properties(env: dict[str, str], prefix: str) -> dict[str, str]:
    """Properties from variables as the images derive them (PREFIX_FOO_BAR -> foo.bar)."""
    return {
        name[len(prefix) :].lower().replace("_", "."): value
        for name, value in env.items()
        if name.startswith(prefix)
    }


def image(service: str) -> tuple[str, str]:
    name, _, tag = services()[service]["image"].split("@")[0].rpartition(":")
    return (name, tag) if name and "/" not in tag else (services()[service]["image"], "")


def worker_properties(service: str) -> dict[str, str]:
    """A Connect worker's properties, as Debezium's image entrypoint writes them."""
    env = environment(service)
    named = {
        "bootstrap.servers": env["BOOTSTRAP_SERVERS"],
        "group.id": env["GROUP_ID"],
        "config.storage.topic": env["CONFIG_STORAGE_TOPIC"],
        "offset.storage.topic": env["OFFSET_STORAGE_TOPIC"],
        "status.storage.topic": env["STATUS_STORAGE_TOPIC"],
        "rest.advertised.host.name": env.get("ADVERTISED_HOST_NAME", ""),
    }
    return {**named, **properties(env, "CONNECT_")}


def connect_workers() -> dict[str, dict[str, str]]:
    """Every Connect worker (a service of Debezium's image with outboxkit's transform, built
    from deploy/connect/Dockerfile) -> its properties."""
    names = sorted(n for n in services() if image(n)[0] == "outboxkit-connect")
    return {name: worker_properties(name) for name in names}


def connect_worker() -> dict[str, str]:
    """The Connect cluster's properties (its workers agree on them, see the scale-out tests)."""
    return next(iter(connect_workers().values()))


def brokers() -> dict[str, dict[str, str]]:
    """Every Kafka node (Kafka's image with a KRaft role) -> its server properties."""
    found = {}
    for name in sorted(services()):
        props = properties(environment(name), "KAFKA_CFG_")
        if image(name)[0] == "apache/kafka" and "process.roles" in props:
            found[name] = props
    return found


def listener_addresses(value: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port,...`` -> {NAME: (host, port)} (host empty: every interface)."""
    found = {}
    for entry in value.split(","):
        name, address = entry.split("://")
        host, _, port = address.rpartition(":")
        found[name] = (host, int(port))
    return found


def every_broker() -> str:
    """The bootstrap list naming every Kafka node's client listener, in node order."""
    clients = [listener_addresses(p["advertised.listeners"])["CLIENT"] for p in brokers().values()]
    return ",".join(f"{host}:{port}" for host, port in clients)


def replicas(service: str, env: dict[str, str] | None = None) -> int:
    """How many containers Compose runs for ``service`` (deploy.replicas, 1 unless set), with
    deploy/.env.example or ``env`` (``{}``: the compose file's defaults)."""
    return int(interpolate(services()[service].get("deploy", {}).get("replicas", 1), env))


def rest_address(worker: str) -> str:
    """Where a Connect worker's REST API listens (the image's REST_PORT, 8083 unless set)."""
    return f"{worker}:{environment(worker).get('REST_PORT', '8083')}"


def spark_nodes(role: str) -> list[str]:
    """The services running a Spark standalone ``Master`` or ``Worker`` (spark-class)."""
    main = ["spark-class", f"org.apache.spark.deploy.{role.lower()}.{role}"]
    return sorted(n for n in services() if services()[n].get("command", [])[:2] == main)


def option(argv: list[str], flag: str) -> str:
    """The value after ``flag`` in a command line."""
    assert flag in argv, f"{flag} missing from {argv}"
    return argv[argv.index(flag) + 1]


def spark_conf(argv: list[str]) -> dict[str, str]:
    """spark-submit's ``--conf key=value`` pairs."""
    pairs = [argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--conf"]
    return {key: value for key, value in pairs}


@functools.cache
def haproxy() -> dict[str, list[list[str]]]:
    """deploy/lb/haproxy.cfg: each section ("backend orders") -> its directives, split in words."""
    sections: dict[str, list[list[str]]] = {}
    current = ""
    for raw in (DEPLOY / "lb/haproxy.cfg").read_text().splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if raw[0].isspace():
            sections[current].append(line.split())
        else:
            current = " ".join(line.split()[:2])
            sections[current] = []
    return sections


def directives(section: str, keyword: str) -> list[list[str]]:
    """The directives of a haproxy.cfg section that start with ``keyword`` (its words after)."""
    return [d[1:] for d in haproxy()[section] if d[0] == keyword]


def balancing(address: str) -> tuple[str, str]:
    """The lb's frontend and backend sections whose servers are ``address``'s replicas."""
    for section in haproxy():
        if not section.startswith("frontend ") or not directives(section, "default_backend"):
            continue
        backend = f"backend {directives(section, 'default_backend')[0][0]}"
        servers = directives(backend, "server-template")  # prefix, slots, address, options
        servers += [[d[0], "1", *d[1:]] for d in directives(backend, "server")]
        if any(s[2] == address for s in servers):
            return section, backend
    raise AssertionError(f"no load balancer frontend in front of {address}")


def load_balanced(address: str) -> str:
    """The port of the lb frontend (``lb:PORT``) that spreads over ``address``'s replicas."""
    frontend, _ = balancing(address)
    return directives(frontend, "bind")[0][0].rsplit(":", 1)[1]


def dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text()


# -- settings built from a container's environment -------------------------------------------
@pytest.fixture
def container_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """``apply(service)``: the process environment of that container, its mounted secrets as
    files under tmp_path (an unmounted secret is missing, as in the container)."""

    def apply(service: str) -> dict[str, str]:
        for name in list(os.environ):
            if name.startswith(("OUTBOXKIT_", *(f"{s.upper()}_" for s in SERVICES))):
                monkeypatch.delenv(name)
        secrets = tmp_path / service / "secrets"
        secrets.mkdir(parents=True)
        for target in mounted_secrets(service):
            (secrets / Path(target).name).write_text(f"secret-of-{Path(target).name}")
        env = environment(service)
        for name, value in env.items():
            monkeypatch.setenv(name, value.replace(SECRETS, str(secrets)))
        return env

    monkeypatch.chdir(tmp_path)  # no stray .env file is read
    yield apply


def known_variable(name: str, settings: Any) -> bool:
    """Whether ``name`` (with its prefix cut) is a field (``a__b``: a nested field) of
    ``settings``."""
    field, _, nested = name.lower().partition("__")
    if field not in type(settings).model_fields:
        return False
    return not nested or nested in type(getattr(settings, field)).model_fields


# -- images and versions ---------------------------------------------------------------------
def test_every_image_is_pinned_to_a_version():
    for name in services():
        repository, tag = image(name)
        assert tag, f"{name}: image {repository} has no tag"
        assert tag != "latest" and re.search(r"\d", tag), f"{name}: {repository}:{tag}"
    for line in re.findall(r"(?m)^FROM\s+(\S+)", dockerfile()):
        assert re.fullmatch(r"[\w./-]+:[\w.-]*\d[\w.-]*", line), f"Dockerfile: FROM {line}"


# Third-party images whose digest could not be established from public sources (deploy/README.md).
TAG_PINNED_ONLY = {"postgres", "prom/prometheus"}


def test_every_third_party_image_is_pinned_to_a_digest():
    for name, service in services().items():
        repository, _ = image(name)
        if "build" in service or repository in TAG_PINNED_ONLY:
            continue  # built here from pinned bases, or see TAG_PINNED_ONLY
        digest = service["image"].partition("@")[2]
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), f"{name}: {service['image']}"


def test_every_service_has_cpu_and_memory_limits():
    for name, service in services().items():
        limits = service.get("deploy", {}).get("resources", {}).get("limits", {})
        assert float(limits.get("cpus", 0)) > 0, f"{name}: no cpus limit"
        assert re.fullmatch(r"\d+[mg]", str(limits.get("memory", ""))), f"{name}: no memory limit"
    # A Spark worker offers --memory to executors: its limit must hold that and its own JVM.
    for worker in spark_nodes("Worker"):
        offered = int(option(command(worker), "--memory").rstrip("g"))
        limit = services()[worker]["deploy"]["resources"]["limits"]["memory"]
        assert limit.endswith("g") and int(limit[:-1]) > offered, f"{worker}: {limit}"


def test_images_run_the_pinned_versions():
    pins = pinned_versions()
    assert brokers() and connect_workers()
    for name in [*brokers(), "kafka-init"]:
        assert image(name) == ("apache/kafka", pins.kafka), name
    for name in connect_workers():
        assert image(name) == ("outboxkit-connect", pins.debezium), name
        assert services()[name]["build"]["dockerfile"] == "deploy/connect/Dockerfile", name
    connect_image = (DEPLOY / "connect/Dockerfile").read_text()
    assert f"FROM quay.io/debezium/connect:{pins.debezium}\n" in connect_image
    assert re.search(r"mvn .*-f /\S+/java/pom\.xml -pl smt package", connect_image)
    repository, tag = image("postgres")
    assert repository == "postgres" and tag.split(".")[0].split("-")[0] == "15"


def test_one_image_built_from_this_repository_runs_every_python_process():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    ours = [*SERVICES, *CONSUMERS, "setup", *spark_nodes("Master"), *spark_nodes("Worker")]
    ours += [SUPERVISOR, CONSOLE]
    for name in ours:
        assert image(name) == ("outboxkit", project["version"]), name
        build = services()[name]["build"]
        assert (DEPLOY / build["context"]).resolve() == ROOT
        assert (ROOT / build["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
    text = dockerfile()
    minimum = re.search(r">=\s*(\d+\.\d+)", project["requires-python"])
    assert minimum and f"FROM python:{minimum.group(1)}." in text
    extras = re.search(r"pip install \"?/\S+\[([\w,]+)\]", text)
    assert extras and set(extras.group(1).split(",")) == {"service", "spark", "console"}
    users = re.findall(r"(?m)^USER\s+(\S+)", text)
    assert users and users[-1] not in ("root", "0"), "the image must run as a non-root user"


def test_the_build_context_lets_in_every_package_the_project_installs():
    """The image runs `pip install` on the context: a package missing from it is missing from
    the image (the setup job would fail on its first import)."""
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["packages"]
    allowed = {
        line[1:].strip("/")
        for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    for package in mypy:
        folder = "workshop" if package == "outboxkit_workshop" else package  # its distribution
        assert (ROOT / folder).is_dir(), package
        assert folder in allowed, f"{folder}/ is not in the image's build context"


def test_pyspark_is_pinned_to_the_spark_kafka_connector_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    spark = [d for d in project["optional-dependencies"]["spark"] if d.startswith("pyspark")]
    assert spark == [f"pyspark=={pinned_versions().spark}"]


def test_spark_kafka_connector_comes_from_the_pinned_pom():
    """The image resolves Spark's Kafka connector from cdc/java (spark.version) into
    the directory the consumer jobs put on spark-submit's --jars; no other version is named."""
    text = dockerfile()
    assert re.search(
        r"mvn .*-f /\S+/java/pom\.xml -pl spark -am package dependency:copy-dependencies", text
    )
    assert "COPY cdc/java " in text
    module = (ROOT / "cdc/java/spark/pom.xml").read_text()
    assert re.search(
        r"<artifactId>spark-sql-kafka-0-10_2\.13</artifactId>\s*<version>\$\{spark\.version\}",
        module,
    )
    jars = re.search(r"COPY --from=spark-jars /\S+/spark/ (\S+)", text)
    assert jars
    for name in CONSUMERS:
        argv = command(name)
        assert argv[argv.index("--jars") + 1].startswith(jars.group(1).rstrip("/") + "/")
    everything = "\n".join(p.read_text() for p in DEPLOY.rglob("*") if p.is_file())
    for version in re.findall(r"spark-sql-kafka-0-10_2\.13[:-](\d[\w.]*\d)", everything):
        assert version == pinned_versions().spark


def test_kraft_cluster_ids_never_look_like_an_option():
    from outboxkit_workshop.devstack.broker import cluster_id

    ids = [cluster_id() for _ in range(2000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


# -- record limits (cdc/limits.py) -----------------------------------------------------------
def test_compose_sets_the_kafka_record_limits_of_cdc_limits():
    from cdc.limits import BROKER_SETTINGS, WORKER_SETTINGS

    for props in brokers().values():
        assert {k: props.get(k) for k in BROKER_SETTINGS} == BROKER_SETTINGS
    for worker in connect_workers().values():
        assert {k: worker.get(k) for k in WORKER_SETTINGS} == WORKER_SETTINGS


def test_the_embedded_stack_sets_the_same_record_limits():
    from cdc.limits import BROKER_SETTINGS, WORKER_SETTINGS
    from outboxkit_workshop.devstack.broker import server_properties
    from outboxkit_workshop.devstack.connect import worker_properties

    def parse(props: str) -> dict[str, str]:
        return dict(line.split("=", 1) for line in props.splitlines() if line)

    embedded_broker = parse(server_properties(Path("/data"), 9092, 9093))
    worker = parse(worker_properties("127.0.0.1:9092", 8083, exactly_once=True))
    assert BROKER_SETTINGS.items() <= embedded_broker.items()
    assert WORKER_SETTINGS.items() <= worker.items()


def test_limits_are_kafkas_defaults_and_leave_room_above_the_publish_limit():
    from cdc import limits

    assert limits.PRODUCER_MAX_REQUEST_SIZE == 1 << 20
    assert limits.BROKER_MESSAGE_MAX_BYTES == (1 << 20) + 12  # + the log's record overhead
    publish_limit = getattr(
        importlib.import_module("outboxkit.kernel.envelope"), "DEFAULT_MAX_RECORD_BYTES", 0
    )
    if (
        publish_limit
    ):  # the publish-side record limit (issue 14) once outboxkit.kernel.envelope has it
        assert publish_limit < limits.PRODUCER_MAX_REQUEST_SIZE <= limits.BROKER_MESSAGE_MAX_BYTES


# -- lifecycle: health checks, restart policies, the one-shot jobs ---------------------------
def test_every_long_running_service_has_a_health_check_and_a_restart_policy():
    for name, service in services().items():
        if name in ONE_SHOT:
            continue
        check = service.get("healthcheck", {})
        assert check.get("test") and not check.get("disable"), f"{name}: no health check"
        assert service.get("restart") in ("always", "unless-stopped", "on-failure"), name


def test_one_shot_jobs_never_restart_and_what_needs_them_waits_for_their_success():
    for name in ONE_SHOT:
        assert services()[name]["restart"] == "no", name
    for name in [*SERVICES, *CONSUMERS]:
        assert services()[name]["depends_on"]["setup"] == {
            "condition": "service_completed_successfully"
        }
    for name in [*connect_workers(), "setup"]:
        assert services()[name]["depends_on"]["kafka-init"] == {
            "condition": "service_completed_successfully"
        }
    for name in [*connect_workers(), "postgres", "lb"]:
        assert services()["setup"]["depends_on"][name]["condition"] == "service_healthy", name
    for name in brokers():
        assert services()["kafka-init"]["depends_on"][name]["condition"] == "service_healthy"


def test_the_connector_supervisor_watches_every_connector_through_the_load_balancer():
    assert command(SUPERVISOR)[:3] == ["outboxkit", "cdc", "supervise"]
    assert "--connector" not in command(SUPERVISOR)  # every connector of the cluster
    env = services()[SUPERVISOR]["environment"]
    assert env["OUTBOXKIT_CONNECT_URL"] == "http://lb:8083"
    assert env["OUTBOXKIT_CONNECT_PASSWORD_FILE"] == "/run/secrets/connect-rest.password"
    alive = command(SUPERVISOR)[command(SUPERVISOR).index("--alive-file") + 1]
    assert alive in " ".join(services()[SUPERVISOR]["healthcheck"]["test"])
    assert services()[SUPERVISOR]["depends_on"]["setup"] == {
        "condition": "service_completed_successfully"
    }


def test_the_setup_job_prepares_the_saga():
    assert command("setup") == ["outboxkit", "dev", "saga", "prepare"]


def test_services_run_uvicorn_workers_on_the_app_factory_and_report_readiness():
    for service in SERVICES:
        argv = command(service)
        assert (
            argv[:2] == ["uvicorn", f"outboxkit_workshop.saga.{service}:app"]
            and "--factory" in argv
        )
        assert callable(importlib.import_module(f"outboxkit_workshop.saga.{service}").app)
        assert int(argv[argv.index("--workers") + 1]) >= 1
        port = argv[argv.index("--port") + 1]
        assert argv[argv.index("--host") + 1] == "0.0.0.0"
        check = " ".join(services()[service]["healthcheck"]["test"])
        assert re.search(rf"http://127\.0\.0\.1:{port}/(ready|health)\b", check), check


def test_a_straggling_consumer_task_gets_a_speculative_copy_in_compose_and_kubernetes():
    # The framework's settings, as the local stack's cluster runs them: on every deployment.
    for name in CONSUMERS:
        confs = spark_conf(command(name))
        assert {k: confs.get(k) for k in SPECULATION} == SPECULATION, name
    applications = [
        doc
        for doc in yaml.safe_load_all((DEPLOY / "kubernetes/50-consumers.yaml").read_text())
        if doc and doc["kind"] == "SparkApplication"
    ]
    assert len(applications) == len(CONSUMERS)
    for app in applications:
        conf = app["spec"]["sparkConf"]
        assert {k: conf.get(k) for k in SPECULATION} == SPECULATION, app["metadata"]["name"]


def test_consumer_checkpoints_are_written_without_a_chmod_process_in_compose_and_kubernetes():
    # outboxkit's local file system, built into the image beside Spark's Kafka connector and on
    # the driver's and executors' own class path (Hadoop loads it before spark.jars is read).
    jars = "/opt/outboxkit/spark-jars"
    built = dockerfile().replace("\\\n", " ")
    assert "-pl spark -am package dependency:copy-dependencies" in built
    assert f"/build/libs/spark/{FORKLESS_FS_JAR}*.jar" in built  # checked after the build
    assert f"COPY --from=spark-jars /build/libs/spark/ {jars}/" in dockerfile()
    applications = [
        doc["spec"]["sparkConf"]
        for doc in yaml.safe_load_all((DEPLOY / "kubernetes/50-consumers.yaml").read_text())
        if doc and doc["kind"] == "SparkApplication"
    ]
    confs = [spark_conf(command(name)) for name in CONSUMERS] + applications
    assert len(confs) == 2 * len(CONSUMERS)
    for conf in confs:
        assert conf["spark.hadoop.fs.file.impl"] == FORKLESS_FS_CLASS
        for side in ("driver", "executor"):
            assert conf[f"spark.{side}.extraClassPath"] == f"{jars}/*", conf


def test_consumer_jobs_are_spark_submitted_in_client_mode():
    for name, service in CONSUMERS.items():
        argv = command(name)
        env = environment(name)
        assert argv[0] == "spark-submit"
        assert argv[argv.index("--deploy-mode") + 1] == "client"
        # build_session sets the master again: it must be the one spark-submit was given.
        assert argv[argv.index("--master") + 1] == env["OUTBOXKIT_SPARK_MASTER"]
        resource = next(a for a in argv if a.endswith(".py"))
        assert f"COPY deploy/spark/consume.py {resource}" in dockerfile()
        assert argv[argv.index(resource) + 1] == f"outboxkit_workshop.saga.jobs:{service}"
        checkpoint = argv[argv.index("--checkpoint") + 1]
        volumes = [v.split(":")[1] for v in services()[name].get("volumes", [])]
        assert checkpoint in volumes, f"{name}: checkpoints must outlive the container"


# -- environment: every variable the code reads, from the settings classes -------------------
@pytest.mark.parametrize("container", [*SERVICES, *CONSUMERS])
def test_each_service_process_gets_its_settings(container: str, container_env: Any):
    from outboxkit_workshop.saga.common import settings_of

    service = CONSUMERS.get(container, container)
    env = container_env(container)
    settings = settings_of(service)
    prefix = f"{service.upper()}_"
    for field, info in type(settings).model_fields.items():
        if info.is_required():
            assert f"{prefix}{field.upper()}" in env, f"{container}: {prefix}{field.upper()}"
    contract = ["DATABASE_URL", "DATABASE_PASSWORD_FILE", "KAFKA_BOOTSTRAP_SERVERS"]
    contract += ["TOPIC_PREFIX", "EXACTLY_ONCE_SOURCE", "OUTBOX__MODE", "MAX_REQUEST_BYTES"]
    for name in contract:
        assert f"{prefix}{name}" in env and known_variable(name, settings), f"{prefix}{name}"
    for name in env:
        if name.startswith(prefix):
            assert known_variable(name[len(prefix) :], settings), f"{container}: {name} unread"

    url = settings.engine_url()
    assert (url.username, url.database, url.host) == (service, service, "postgres")
    assert url.password == f"secret-of-{service}.password"  # from its mounted secret
    login = env[f"{prefix}DATABASE_URL"].split("//")[1].split("@")[0]
    assert login == service, "the URL names the role and never a password"
    assert settings.kafka_bootstrap_servers == every_broker()
    assert settings.exactly_once_source is True
    assert settings.outbox.mode == "delete"
    assert settings.topic_prefix == environment("kafka-init")["TOPIC_PREFIX"]
    # Each type it reads only from the connector of its publisher, as `dev saga prepare` names
    # the connectors (the default server name, suffixed with the service's database).
    from cdc.settings import per_database
    from outboxkit.settings import Settings
    from outboxkit_workshop.saga import rules

    def source(producer: str) -> str:
        return per_database(Settings(), producer).server_name

    assert settings.publishers == rules.publishers(service, source) != {}
    security = settings.kafka_security.resolve()
    assert security.protocol.startswith("SASL_") and security.sasl is not None
    assert security.sasl.username == service
    assert security.sasl.password == f"secret-of-kafka-{service}.password"


def test_the_setup_job_gets_the_stack_settings(container_env: Any):
    from outboxkit.kernel.kafka.security import KafkaSecuritySettings
    from outboxkit_workshop.devstack import connect
    from outboxkit_workshop.devstack.settings import StackSettings

    env = container_env("setup")
    settings = StackSettings()
    for name in env:
        rest = name.removeprefix("OUTBOXKIT_")
        assert rest.lower() in StackSettings.model_fields or (
            rest.startswith("KAFKA_")
            and rest[len("KAFKA_") :].lower() in KafkaSecuritySettings.model_fields
        ), f"setup: {name} is read by nothing"
    # Every component external: setup must never start an embedded one.
    assert settings.database_url == "postgresql+psycopg://postgres@postgres:5432/outboxkit"
    assert settings.kafka_bootstrap_servers == every_broker()
    # Connect's REST API through the load balancer, which spreads over every worker.
    assert settings.connect_url == f"http://lb:{load_balanced(rest_address('connect-1'))}"
    assert settings.connect_database_host == "postgres"
    assert settings.connect_exactly_once is True
    assert settings.outbox_mode == "delete"
    assert settings.topic_prefix == environment("kafka-init")["TOPIC_PREFIX"]
    mounted = mounted_secrets("setup")
    assert env["OUTBOXKIT_DATABASE_PASSWORD_FILE"] in mounted
    assert env["OUTBOXKIT_SECRETS_DIR"] == SECRETS
    for role in ("postgres", *SERVICES, settings.cdc_role):
        assert f"{SECRETS}/{role}.password" in mounted, f"setup: no password file for {role}"
    assert settings.connect_user and env["OUTBOXKIT_CONNECT_PASSWORD_FILE"] in mounted
    security = settings.kafka_security.resolve()
    assert security.sasl is not None and security.sasl.username == "setup"
    # The CDC password reaches the connector as a reference Connect's worker resolves.
    worker = connect_worker()
    provider = connect.SECRETS_PROVIDER
    assert worker["config.providers"] == provider
    assert worker[f"config.providers.{provider}.class"] == connect.DIRECTORY_CONFIG_PROVIDER
    directory = env["OUTBOXKIT_CONNECT_SECRETS_DIR"]
    assert directory in worker[f"config.providers.{provider}.param.allowed.paths"].split(",")
    for name in connect_workers():
        assert f"{directory}/{settings.cdc_role}.password" in mounted_secrets(name), name


def test_consumer_jobs_read_what_the_saga_jobs_consume(container_env: Any):
    import outboxkit_workshop.saga.jobs

    for name, service in CONSUMERS.items():
        container_env(name)
        job = getattr(outboxkit_workshop.saga.jobs, service)()
        assert job.consumer == service and job.exactly_once_source
        assert job.kafka_security.sasl is not None
        assert job.kafka_security.sasl.username == service
        assert Path(str(job.database_password_file)).exists()
        assert set(job.topics) == readable_topics(service), name


# -- secrets ---------------------------------------------------------------------------------
# password=... / password: ... (not a key like postgres_password: or a *_PASSWORD_FILE name)
PASSWORD_VALUE = re.compile(r"(?i)(?<![\w-])password\s*[=:]\s*\"?([^\"\s;,\]]*)")


def deploy_texts() -> dict[str, str]:
    names = ["docker-compose.yml", "Dockerfile", ".env.example", "make-secrets.sh"]
    files = [DEPLOY / n for n in names] + sorted((DEPLOY / "kafka").glob("*"))
    files += sorted((DEPLOY / "connect").glob("*")) + sorted((DEPLOY / "prometheus").glob("*"))
    files += sorted((DEPLOY / "lb").glob("*")) + sorted((DEPLOY / "spark").glob("*"))
    files += sorted(p for p in (DEPLOY / "grafana").rglob("*") if p.is_file())
    return {str(f.relative_to(DEPLOY)): f.read_text() for f in files}


def test_no_password_is_written_in_deploy():
    for name, text in deploy_texts().items():
        for value in PASSWORD_VALUE.findall(text):
            assert value in ("", "%s") or value.startswith("$"), f"{name}: password {value!r}"
    for name, service in services().items():
        for variable in service.get("environment", {}):
            if "PASSWORD" in variable:
                assert variable.endswith("_FILE"), f"{name}: {variable} must name a file"
    assert not re.search(r"(?im)^[^#]*PASSWORD\w*=", (DEPLOY / ".env.example").read_text())


def test_every_password_file_named_in_an_environment_is_mounted():
    for name in services():
        mounted = mounted_secrets(name)
        for variable, value in environment(name).items():
            if variable.endswith("_FILE") and value.startswith(SECRETS):
                assert value in mounted, f"{name}: {variable}={value} is not mounted"
        refs = re.findall(r"\$\{dir:([^:}]+):([^}]+)\}", str(services()[name]))
        for directory, file in refs:
            assert f"{directory}/{file}" in mounted, f"{name}: {directory}/{file} not mounted"


def test_secrets_are_generated_not_committed(tmp_path: Path):
    ignored = (DEPLOY / ".gitignore").read_text().split()
    assert "/.env" in ignored and "/secrets/" in ignored
    subprocess.run(["bash", str(DEPLOY / "make-secrets.sh"), str(tmp_path)], check=True)
    files = {Path(s["file"]).name for s in compose()["secrets"].values()}
    assert all(s["file"].startswith("./secrets/") for s in compose()["secrets"].values())
    values = {name: (tmp_path / "secrets" / name).read_text() for name in files}
    passwords = [v for n, v in values.items() if n.endswith(".password")]
    assert all(len(v) >= 24 and v.strip() == v for v in passwords), "weak or padded password"
    assert len(set(passwords)) == len(passwords), "every password is its own"
    env = dict(
        line.split("=", 1)
        for line in (tmp_path / ".env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    cluster = env["KAFKA_CLUSTER_ID"]
    assert len(cluster) == 22 and not cluster.startswith("-")
    (user,) = {environment(name)["OUTBOXKIT_CONNECT_USER"] for name in connect_workers()}
    assert values["connect-rest.users"].strip() == f"{user}: {values['connect-rest.password']}"


def test_published_ports_bind_loopback_only():
    for name, service in services().items():
        for port in service.get("ports", []):
            assert interpolate(port).startswith("127.0.0.1:"), f"{name}: {port}"


# -- Kafka: KRaft, SASL everywhere, ACLs -----------------------------------------------------
@pytest.mark.parametrize("node", ["kafka-1", "kafka-2", "kafka-3"])
def test_kafka_runs_kraft_with_sasl_on_every_listener_and_an_authorizer(node: str):
    props = brokers()[node]
    assert set(props["process.roles"].split(",")) == {"broker", "controller"}
    assert not any(k.startswith("zookeeper") for k in props)
    assert props["authorizer.class.name"] == (
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    )
    assert props["super.users"] == "User:admin"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    protocols = dict(p.split(":") for p in props["listener.security.protocol.map"].split(","))
    listeners = [entry.split(":")[0] for entry in props["listeners"].split(",")]
    start = (DEPLOY / "kafka/start.sh").read_text()
    for listener in listeners:
        assert protocols[listener].startswith("SASL_"), f"{listener} is {protocols[listener]}"
        assert f"listener.name.{listener.lower()}." in start, f"no JAAS for {listener}"
    mechanisms = props["sasl.enabled.mechanisms"].split(",")
    clients = [environment(n).get("OUTBOXKIT_KAFKA_SASL_MECHANISM") for n in services()]
    assert {m for m in clients if m} <= set(mechanisms)
    assert connect_worker()["sasl.mechanism"] in mechanisms
    assert services()[node]["entrypoint"][-1] in mounted_files(node)


@dataclass(frozen=True)
class Grant:
    principal: str
    resource: str
    pattern: str
    name: str
    operations: frozenset[str]

    def covers(self, resource: str, name: str) -> bool:
        if resource != self.resource:
            return False
        return name.startswith(self.name) if self.pattern == "prefixed" else name == self.name


@functools.cache
def grants() -> tuple[Grant, ...]:
    """The `grant` lines of deploy/kafka/init.sh, loops unrolled, variables substituted."""
    text = (DEPLOY / "kafka/init.sh").read_text()

    def unroll(match: re.Match[str]) -> str:
        var, values, body = match.groups()
        return "\n".join(
            body.replace(f"${{{var}}}", v).replace(f"${var}", v) for v in values.split()
        )

    text = re.sub(r"(?ms)^for (\w+) in ([^;]+); do\n(.*?)\ndone", unroll, text)
    env = environment("kafka-init")
    for name, value in env.items():
        text = text.replace(f"${{{name}}}", value).replace(f"${name}", value)
    found = []
    for line in re.findall(r"(?m)^\s*grant (\S.*)$", text):
        principal, resource, pattern, name, *ops = line.replace('"', "").split()
        found.append(Grant(principal, resource, pattern, name, frozenset(ops)))
    return tuple(found)


def allowed(principal: str, operation: str, resource: str, name: str) -> bool:
    return any(
        g.principal == principal and g.covers(resource, name) and operation in g.operations
        for g in grants()
    )


def outbox_topics() -> set[str]:
    from outboxkit.kernel.wire.record import topic_for
    from outboxkit_workshop.saga import rules

    prefix = environment("kafka-init")["TOPIC_PREFIX"]
    return {topic_for(t, topic_prefix=prefix) for t in rules.AGGREGATES}


def readable_topics(principal: str) -> set[str]:
    worker = connect_worker()
    internal = {worker[f"{k}.storage.topic"] for k in ("config", "offset", "status")}
    return {t for t in outbox_topics() | internal if allowed(principal, "Read", "topic", t)}


def test_only_connect_writes_the_outbox_and_its_own_topics():
    principals = {g.principal for g in grants()}
    worker = connect_worker()
    internal = {worker[f"{k}.storage.topic"] for k in ("config", "offset", "status")}
    for topic in outbox_topics() | internal:
        writers = {p for p in principals if allowed(p, "Write", "topic", topic)}
        assert writers == {"connect"}, f"{topic} written by {writers}"
    for topic in internal:
        assert allowed("connect", "Read", "topic", topic)
    group = worker["group.id"]
    assert allowed("connect", "Read", "group", group)
    # KIP-618: the leader's and each task's transactional ids.
    assert allowed("connect", "Write", "transactional-id", f"connect-cluster-{group}")
    assert allowed("connect", "Write", "transactional-id", f"{group}-outboxkit-orders-0")
    assert allowed("connect", "IdempotentWrite", "cluster", "kafka-cluster")
    for topic in outbox_topics():
        assert allowed("setup", "Create", "topic", topic)


def test_each_service_reads_only_what_its_job_consumes_and_its_own_groups(container_env: Any):
    import outboxkit_workshop.saga.jobs

    for service in SERVICES:
        container_env(f"{service}-consumer")
        assert readable_topics(service) == set(
            getattr(outboxkit_workshop.saga.jobs, service)().topics
        ), service
        assert not any(g.principal == service and "Write" in g.operations for g in grants())
        assert allowed(service, "Read", "group", f"outboxkit-{service}")
        for other in set(SERVICES) - {service}:
            assert not allowed(service, "Read", "group", f"outboxkit-{other}")


def test_every_client_principal_has_a_scram_user_and_its_password():
    users = re.search(r"(?m)^for principal in ([^;]+); do", (DEPLOY / "kafka/init.sh").read_text())
    assert users
    created = set(users.group(1).split())
    used = {environment(n).get("OUTBOXKIT_KAFKA_SASL_USERNAME") for n in services()} - {None}
    jaas = connect_worker()["sasl.jaas.config"]
    connect_user = re.search(r'username="([^"]+)"', jaas)
    assert connect_user
    used.add(connect_user.group(1))
    assert used == created
    for principal in created:
        assert f"{SECRETS}/kafka-{principal}.password" in mounted_secrets("kafka-init")


# -- Connect: exactly-once source, secrets provider, SASL, authenticated REST ----------------
def test_connect_runs_exactly_once_with_secrets_from_files_and_sasl():
    from outboxkit.kernel.kafka.security import CONNECT_CLIENT_PREFIXES

    worker = connect_worker()
    assert worker["exactly.once.source.support"] == "enabled"
    assert worker["config.providers"] == "dir"
    assert worker["config.providers.dir.class"] == (
        "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
    )
    assert worker["config.providers.dir.param.allowed.paths"] == SECRETS
    for prefix in CONNECT_CLIENT_PREFIXES:
        assert worker[f"{prefix}security.protocol"].startswith("SASL_"), prefix
        assert worker[f"{prefix}sasl.mechanism"] == worker["sasl.mechanism"]
        jaas = worker[f"{prefix}sasl.jaas.config"]
        assert re.search(r'password="\$\{dir:/run/secrets:[\w.-]+\}"', jaas), prefix


@pytest.mark.parametrize("name", ["connect-1", "connect-2"])
def test_connect_rest_api_asks_for_basic_authentication(name: str):
    worker = connect_workers()[name]
    assert worker["rest.extension.classes"] == (
        "org.apache.kafka.connect.rest.basic.auth.extension.BasicAuthSecurityRestExtension"
    )
    options = environment(name)["KAFKA_OPTS"]
    login = re.search(r"-Djava\.security\.auth\.login\.config=(\S+)", options)
    assert login and login.group(1) in mounted_files(name)
    jaas = mounted_files(name)[login.group(1)].read_text()
    assert re.search(r"KafkaConnect\s*\{\s*\S+\.PropertyFileLoginModule required", jaas)
    users = re.search(r'file="([^"]+)"', jaas)
    assert users and users.group(1) in mounted_secrets(name)
    check = " ".join(services()[name]["healthcheck"]["test"])
    assert " -u " in check, "the health check authenticates too"
    # The worker-to-worker endpoints, exempt from basic auth, are not offered through the lb.
    denied = [" ".join(d) for d in directives("frontend connect", "http-request")]
    assert any("POST" in d and "/tasks" in d for d in denied)
    assert any("PUT" in d and "/fence" in d for d in denied)


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_deploy_shell_scripts_parse():
    for script in [*(DEPLOY / "kafka").glob("*.sh")]:
        subprocess.run(["sh", "-n", str(script)], check=True)
    subprocess.run(["bash", "-n", str(DEPLOY / "make-secrets.sh")], check=True)


# -- the operator console ------------------------------------------------------------------
def console_jobs() -> list[str]:
    """The consumer jobs the console container serves (its command's JOB arguments)."""
    argv = command(CONSOLE)
    assert argv[:2] == ["outboxkit", "console"], argv
    return argv[2:]


def test_the_console_serves_every_saga_job_on_loopback_only(container_env: Any):
    from outboxkit.endpoints import resolve
    from outboxkit.settings import Settings, variables
    from outboxkit_workshop.saga.common import settings_of

    assert sorted(console_jobs()) == sorted(f"outboxkit_workshop.saga.jobs:{s}" for s in SERVICES)
    env = container_env(CONSOLE)
    settings = Settings()
    known = variables([Settings])
    for name in env:
        if name.startswith("OUTBOXKIT_"):
            assert name in known, f"console: {name} is read by nothing"
        service = name.split("_", 1)[0].lower()
        if service in SERVICES:
            rest = name[len(service) + 1 :]
            assert known_variable(rest, settings_of(service)), f"console: {name} unread"
    # Listens on every interface of its container, published on the host's loopback only.
    assert settings.console_host == "0.0.0.0"
    port = settings.console_port
    published = [interpolate(p) for p in services()[CONSOLE]["ports"]]
    assert published == [f"127.0.0.1:{example_env()['CONSOLE_PORT']}:{port}"]
    # Plain HTTP, said so, published on the host's loopback only; no Secure cookie over it.
    assert settings.console_insecure_http is True and settings.console_tls_cert_file is None
    assert not settings.console_secure_cookie, "served over HTTP on loopback"
    check = " ".join(services()[CONSOLE]["healthcheck"]["test"])
    assert f"http://127.0.0.1:{port}/healthz" in check, check
    assert services()[CONSOLE]["depends_on"]["setup"] == {
        "condition": "service_completed_successfully"
    }
    # Its users and the key signing its sessions are secrets.
    mounted = mounted_secrets(CONSOLE)
    assert env["OUTBOXKIT_CONSOLE_USERS_FILE"] in mounted
    assert env["OUTBOXKIT_CONSOLE_SECRET_FILE"] in mounted
    assert settings.console_users_file and settings.console_users_file.exists()
    # Connect's status through the load balancer, as the supervisor and setup reach it.
    endpoints = resolve(settings, fallback=False)
    assert endpoints.connect_url == f"http://lb:{load_balanced(rest_address('connect-1'))}"
    assert endpoints.connect_auth == (
        environment("connect-1")["OUTBOXKIT_CONNECT_USER"],
        "secret-of-connect-rest.password",
    )
    assert endpoints.database is None, "no superuser: the slots are read in the jobs' databases"
    # A parked record's trace in the Jaeger UI, at the port Jaeger publishes.
    jaeger = interpolate(services()["jaeger"]["ports"][0]).rsplit(":", 2)
    assert jaeger[2] == "16686"
    assert settings.console_trace_url == f"http://127.0.0.1:{jaeger[1]}/trace/{{trace_id}}"


def test_the_console_logs_in_as_each_jobs_database_role_and_its_own_kafka_principal(
    container_env: Any,
):
    from outboxkit.commands.errors import load_job
    from outboxkit.console import build_console
    from outboxkit.console.auth import user_line
    from outboxkit.endpoints import resolve
    from outboxkit.settings import Settings

    env = container_env(CONSOLE)
    jobs = [load_job(spec) for spec in console_jobs()]
    assert [job.consumer for job in jobs] == list(SERVICES)
    for job in jobs:
        url = job.engine("metrics").url
        assert (url.username, url.database, url.host) == (job.consumer, job.consumer, "postgres")
        assert url.password == f"secret-of-{job.consumer}.password"
        assert job.bootstrap_servers == every_broker()
        # The merged service blocks each name their service's Kafka login: not the console's.
        assert job.kafka_security.sasl is not None
        assert job.kafka_security.sasl.username == CONSOLE
        assert job.kafka_security.sasl.password == "secret-of-kafka-console.password"
        assert set(job.topics) <= outbox_topics()
    assert env["OUTBOXKIT_KAFKA_SASL_PASSWORD_FILE"] in mounted_secrets(CONSOLE)
    # The console starts on that environment (nothing connects before someone looks).
    settings = Settings()
    Path(str(settings.console_users_file)).write_text(user_line("ann", "operator", "pw") + "\n")
    console = build_console(settings, jobs, resolve(settings, fallback=False))
    try:
        from fastapi.testclient import TestClient

        client = TestClient(console.app)
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/login").status_code == 200
        for watched in console.reader.watched:
            assert watched.kafka["sasl.username"] == CONSOLE
    finally:
        console.close()


def test_the_console_reads_the_outbox_topics_and_writes_nothing():
    from outboxkit.console.overview import Heads
    from outboxkit.kernel.kafka.offsets import PartitionOffsets

    granted = [g for g in grants() if g.principal == CONSOLE]
    assert granted, "no grant for the console"
    for topic in outbox_topics():
        assert allowed(CONSOLE, "Read", "topic", topic), topic
        assert allowed(CONSOLE, "Describe", "topic", topic), topic
    assert readable_topics(CONSOLE) == outbox_topics(), "not Connect's own topics"
    for grant in granted:
        assert grant.resource in ("topic", "group"), grant
        if grant.resource == "topic":
            assert grant.operations <= {"Read", "Describe"}, grant
        else:  # librdkafka's coordinator lookup of a consumer's group.id; no join, no commit
            assert grant.operations == {"Describe"} and grant.pattern == "literal", grant
    # The groups are those the console's consumers name: the lag reader's and the heads'.
    used = {Heads({}).config["group.id"], PartitionOffsets("kafka:9092").config["group.id"]}
    assert {g.name for g in granted if g.resource == "group"} == used


def test_make_secrets_writes_a_console_operator_who_can_sign_in(tmp_path: Path):
    from outboxkit.console.auth import authenticate, hash_password, read_users

    def run() -> None:
        subprocess.run(
            ["bash", str(DEPLOY / "make-secrets.sh"), str(tmp_path)],
            check=True,
            capture_output=True,
        )

    run()
    secrets = tmp_path / "secrets"
    password = (secrets / "console-operator.password").read_text()
    assert len(password) >= 24 and password.strip() == password
    users = read_users(secrets / "console.users")
    assert authenticate(users, "operator", password) == ("operator", "operator")
    assert authenticate(users, "operator", password + "x") is None
    # hash_password's format, so `outboxkit console-user` lines and this one read alike.
    stored = users["operator"][1]
    _, n, r, p, salt, _ = stored.split("$")
    assert (n, r, p) == ("16384", "8", "1") and "=" not in stored
    salt_bytes = base64.urlsafe_b64decode(salt + "=" * (-len(salt) % 4))
    assert len(salt_bytes) == 16 and hash_password(password, salt=salt_bytes) == stored
    assert len((secrets / "console-session.key").read_text()) >= 32
    # Never rotated behind a running console's back; users added since are kept.
    before = {f.name: f.read_text() for f in secrets.iterdir()}
    with (secrets / "console.users").open("a") as users_file:
        users_file.write("bob viewer " + hash_password("b0b") + "\n")
    run()
    after = {f.name: f.read_text() for f in secrets.iterdir()}
    assert after["console-operator.password"] == before["console-operator.password"]
    assert after["console-session.key"] == before["console-session.key"]
    assert set(read_users(secrets / "console.users")) == {"operator", "bob"}
    # A users file deleted: written again for the operator's kept password.
    (secrets / "console.users").unlink()
    run()
    again = read_users(secrets / "console.users")
    assert authenticate(again, "operator", password) == ("operator", "operator")


def test_the_readme_tells_how_to_reach_the_console():
    readme = (DEPLOY / "README.md").read_text()
    section = readme.split("## The operator console", 1)[1].split("\n## ", 1)[0]
    assert f"http://127.0.0.1:{example_env()['CONSOLE_PORT']}" in section
    assert "deploy/secrets/console-operator.password" in section
    assert "OUTBOXKIT_CONSOLE_SECURE_COOKIE=true" in section
    assert "outboxkit console-user" in section


# -- observability: Prometheus, Grafana, Jaeger ----------------------------------------------
# Series Prometheus writes itself for every target (not defined by our code).
PROMETHEUS_OWN = {"up"}
# What the client library appends to a counter's or a histogram's name in the exposition.
EXPOSITION_SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum")
PROMQL_KEYWORDS = {"bool", "offset", "and", "or", "unless", "inf", "nan"}
METRIC_PACKAGES = (
    "service_template",
    "spark_consumers",
    "workshop/outboxkit_workshop/saga",
    "inbox",
    "outbox",
    "cdc",
)


def python_containers() -> list[str]:
    """The long-running containers of the outboxkit image (the services and consumer drivers)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    ours = ("outboxkit", project["version"])
    spark = {*spark_nodes("Master"), *spark_nodes("Worker")}  # JVMs (executors: see Spark tests)
    others = {*ONE_SHOT, *spark, SUPERVISOR, CONSOLE}
    return [n for n in services() if image(n) == ours and n not in others]


def first_string(node: ast.AST) -> str | None:
    """The string literal a call passes first, or a tuple starts with."""
    items = node.args if isinstance(node, ast.Call) else getattr(node, "elts", None)
    if isinstance(node, (ast.Call, ast.Tuple)) and items:
        first = items[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    return None


@functools.cache
def metric_names_in_code() -> frozenset[str]:
    """Metric names the Python sources define: string literals ``outboxkit_...``, and f-strings
    ``f"outboxkit_x_{name}"`` completed with the names the same module passes first, to a call
    (``counter("applied", ...)``) or in a tuple (``("lag", "help")``): how
    spark_consumers.metrics names its families."""
    names: set[str] = set()
    for package in METRIC_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text())
            names |= {
                n.value
                for n in ast.walk(tree)
                if isinstance(n, ast.Constant)
                and isinstance(n.value, str)
                and re.fullmatch(r"outboxkit_\w*[a-z]", n.value)
            }
            firsts = {
                first
                for n in ast.walk(tree)
                if (first := first_string(n)) and re.fullmatch(r"(?!outboxkit_)[a-z][a-z_]*", first)
            }
            for node in ast.walk(tree):
                if not (isinstance(node, ast.JoinedStr) and len(node.values) == 2):
                    continue
                head, tail = node.values
                if (
                    isinstance(head, ast.Constant)
                    and isinstance(tail, ast.FormattedValue)
                    and re.fullmatch(r"outboxkit_\w*_", str(head.value))
                ):
                    names |= {f"{head.value}{name}" for name in firsts}
    return frozenset(names)


def defined_in_code(series: str) -> bool:
    names = metric_names_in_code()
    return series in names or any(
        series.endswith(suffix) and series[: -len(suffix)] in names
        for suffix in EXPOSITION_SUFFIXES
    )


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not its functions, labels or keywords)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    tokens = re.findall(r"(?<![\w$.])([A-Za-z_:][\w:]*)\b(?!\s*\()", expr)
    return {t for t in tokens if t.lower() not in PROMQL_KEYWORDS}


def dashboards() -> dict[str, dict[str, Any]]:
    files = sorted((DEPLOY / "grafana/dashboards").glob("*.json"))
    return {f.name: json.loads(f.read_text()) for f in files}


def panel_targets(dashboard: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    def walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels", []))

    for panel in walk(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield panel["title"], target


def grafana_provisioning(kind: str) -> list[dict[str, Any]]:
    folder = DEPLOY / "grafana/provisioning" / kind
    return [yaml.safe_load(f.read_text()) for f in sorted(folder.glob("*.yml"))]


def scrape_configs() -> list[dict[str, Any]]:
    config = yaml.safe_load((DEPLOY / "prometheus/prometheus.yml").read_text())
    jobs: list[dict[str, Any]] = config["scrape_configs"]
    return jobs


def scrape_targets() -> dict[str, str]:
    """host:port -> the scrape job of deploy/prometheus/prometheus.yml: static targets, and the
    names of DNS discovery (every address a name resolves to, i.e. every replica)."""
    targets = {}
    for job in scrape_configs():
        for static in job.get("static_configs", []):
            targets |= {target: job["job_name"] for target in static["targets"]}
        for dns in job.get("dns_sd_configs", []):
            assert dns.get("type", "SRV") == "A", "Compose's DNS has A records, no SRV"
            targets |= {f"{name}:{dns['port']}": job["job_name"] for name in dns["names"]}
    return targets


def static_targets() -> set[str]:
    jobs = scrape_configs()
    return {
        t for job in jobs for static in job.get("static_configs", []) for t in static["targets"]
    }


def test_the_metric_names_in_code_are_found():
    """The source scan finds names of each kind: a Counter, an f-string family, a collector's."""
    names = metric_names_in_code()
    for name in ("outboxkit_http_requests", "outboxkit_consumer_applied", "outboxkit_inbox_lag"):
        assert name in names
    assert "outboxkit_consumer_" not in names and not defined_in_code("outboxkit_no_such_thing")


def test_every_metric_the_dashboard_queries_is_defined_in_the_code():
    assert dashboards(), "no dashboard in deploy/grafana/dashboards"
    for file, dashboard in dashboards().items():
        targets = list(panel_targets(dashboard))
        assert targets, file
        for title, target in targets:
            used = promql_metric_names(target["expr"])
            assert used, f"{file}: {title}: no metric in {target['expr']!r}"
            for name in used - PROMETHEUS_OWN:
                assert defined_in_code(name), f"{file}: {title}: {name} is defined nowhere"


def test_the_dashboard_shows_what_an_operator_asks_for():
    used = {
        name
        for dashboard in dashboards().values()
        for _, target in panel_targets(dashboard)
        for name in promql_metric_names(target["expr"])
    }
    assert "outboxkit_saga_order_seconds_count" in used  # orders per second by final state
    assert "outboxkit_saga_order_seconds_bucket" in used  # placed -> final
    assert "outboxkit_consumer_slice_seconds_bucket" in used  # per-hop apply time
    assert "outboxkit_consumer_lag" in used and "outboxkit_consumer_parked" in used


def test_grafana_is_provisioned_from_deploy_files():
    mounts = mounted_files("grafana")
    assert mounts["/etc/grafana/provisioning"] == DEPLOY / "grafana/provisioning"
    sources = [s for f in grafana_provisioning("datasources") for s in f["datasources"]]
    prometheus = next(s for s in sources if s["type"] == "prometheus")
    jaeger = next(s for s in sources if s["type"] == "jaeger")
    prometheus_port = services()["prometheus"]["ports"][0].rsplit(":", 1)[1]
    assert prometheus["url"] == f"http://prometheus:{prometheus_port}"
    assert re.fullmatch(r"http://jaeger:16686", jaeger["url"])
    providers = [p for f in grafana_provisioning("dashboards") for p in f["providers"]]
    paths = {p["options"]["path"] for p in providers}
    assert {mounts[path] for path in paths} == {DEPLOY / "grafana/dashboards"}
    home = environment("grafana")["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert Path(home).parent.as_posix() in paths and Path(home).name in dashboards()
    for file, dashboard in dashboards().items():
        for title, target in panel_targets(dashboard):
            assert target["datasource"]["uid"] == prometheus["uid"], f"{file}: {title}"
    assert environment("grafana")["GF_SECURITY_ADMIN_PASSWORD__FILE"] in mounted_secrets("grafana")


def test_prometheus_scrapes_every_service_and_consumer_on_the_port_it_listens_on(
    container_env: Any,
):
    from outboxkit.cli import build_parser
    from outboxkit.settings import Settings

    assert mounted_files("prometheus")["/etc/prometheus/prometheus.yml"].exists()
    expected = {}
    for service in SERVICES:
        argv = command(service)
        expected[f"{service}:{argv[argv.index('--port') + 1]}"] = "services"
    for name in CONSUMERS:
        container_env(name)
        argv = command(name)
        resource = next(a for a in argv if a.endswith(".py"))
        # deploy/spark/consume.py hands its arguments to `outboxkit consume`, which reads the
        # port and address from Settings when no --metrics-port/--metrics-host is given.
        args = build_parser().parse_args(["consume", *argv[argv.index(resource) + 1 :]])
        settings = Settings()
        port = settings.consumer_metrics_port if args.metrics_port is None else args.metrics_port
        host = args.metrics_host or settings.consumer_metrics_host
        assert port and host == "0.0.0.0", f"{name}: metrics on {host}:{port}"
        expected[f"{name}:{port}"] = "consumers"
    assert scrape_targets() == expected
    # A service with replicas is found through DNS, each replica its own target; as one static
    # target, each scrape would reach whichever replica the name resolved to.
    for service in SERVICES:
        assert replicas(service) == 1 or not any(
            t.startswith(f"{service}:") for t in static_targets()
        ), f"{service}: scrape each replica, not {service} as one target"
    job = next(j for j in scrape_configs() if j["job_name"] == "services")
    relabel = {"source_labels": ["__meta_dns_name"], "target_label": "service"}
    assert relabel in job["relabel_configs"], "every replica's series carry its service label"
    consume = (DEPLOY / "spark/consume.py").read_text()
    assert 'main(["consume", *sys.argv[1:]])' in consume


def test_every_python_container_exports_traces_to_the_collector():
    from outboxkit.kernel import tracing

    names = {}
    for name in python_containers():
        env = environment(name)
        endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
        match = re.fullmatch(r"http://([\w-]+):4318/?", endpoint)
        assert match and match.group(1) in services(), f"{name}: OTLP/HTTP endpoint {endpoint!r}"
        collector = services()[match.group(1)]
        assert image(match.group(1))[0].startswith(("jaegertracing/", "otel/")), collector
        assert tracing.exporters_wanted(env) == ("otlp",), name
        tracing._check_protocol(env)  # only OTLP/HTTP is installed
        assert env.get("OTEL_SERVICE_NAME"), f"{name}: no OTEL_SERVICE_NAME"
        names[name] = env["OTEL_SERVICE_NAME"]
    assert set(names) == {*SERVICES, *CONSUMERS}
    assert len(set(names.values())) == len(names), f"service names must differ: {names}"
    # The consumers' executors run on the Spark workers: they export to the same collector,
    # under the name of the job that started them.
    for worker in spark_nodes("Worker"):
        env = environment(worker)
        assert tracing.exporters_wanted(env) == ("otlp",), worker
        collector = environment(SERVICES[0])["OTEL_EXPORTER_OTLP_ENDPOINT"]
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == collector, worker
    for name in CONSUMERS:
        executor_env = spark_conf(command(name))
        assert executor_env["spark.executorEnv.OTEL_SERVICE_NAME"] == names[name], name


def test_metrics_read_from_tables_are_not_summed_over_replicas():
    """Every replica of a service reads the same table at scrape time: summing the replicas'
    series would count each order once per replica."""
    for dashboard in dashboards().values():
        for title, target in panel_targets(dashboard):
            expr = target["expr"]
            if "outboxkit_saga_" in expr:
                assert not re.search(r"\bsum\b", expr), f"{title}: {expr}"


def test_the_image_has_prometheus_client_for_services_and_consumer_drivers():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = re.search(r"pip install \"?/\S+\[([\w,]+)\]", dockerfile())
    assert extras
    installed = [
        d for extra in extras.group(1).split(",") for d in project["optional-dependencies"][extra]
    ]
    assert any(d.startswith("prometheus-client") for d in installed)
    # `outboxkit consume --metrics-port` needs it with the spark extra alone too.
    spark = project["optional-dependencies"]["spark"]
    assert any(d.startswith("prometheus-client") for d in spark)


# -- scale-out: Kafka --------------------------------------------------------------------------
# Replication: every topic on 3 brokers; an acks=all write is acknowledged once 2 have it.
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2


def test_kafka_is_three_kraft_nodes_in_one_three_voter_quorum():
    nodes = brokers()
    assert len(nodes) == 3, f"Kafka nodes: {sorted(nodes)}"
    ids = {name: int(props["node.id"]) for name, props in nodes.items()}
    assert len(set(ids.values())) == len(ids), f"node ids must differ: {ids}"
    quorums = {props["controller.quorum.voters"] for props in nodes.values()}
    assert len(quorums) == 1, f"one quorum for all nodes: {quorums}"
    voters = {}
    for voter in quorums.pop().split(","):
        node_id, address = voter.split("@")
        host, port = address.rsplit(":", 1)
        voters[int(node_id)] = (host, int(port))
    assert len(voters) == 3, "a 3-voter quorum keeps a majority with one node lost"
    for name, props in nodes.items():
        assert set(props["process.roles"].split(",")) == {"broker", "controller"}, name
        controller = props["controller.listener.names"]
        port = listener_addresses(props["listeners"])[controller][1]
        assert voters[ids[name]] == (name, port), f"{name} is not the voter it claims to be"
        advertised = listener_addresses(props["advertised.listeners"])
        for listener in ("CLIENT", props["inter.broker.listener.name"]):
            assert advertised[listener][0] == name, f"{name}: {listener} at {advertised[listener]}"
    # One cluster: the same id everywhere; each node its own log directory.
    assert len({environment(n)["KAFKA_CLUSTER_ID"] for n in nodes}) == 1
    data = [mounted_volume(n, props["log.dirs"]) for n, props in nodes.items()]
    assert len(set(data)) == len(data), f"log directories shared: {data}"


def mounted_volume(service: str, target: str) -> str:
    """The named volume (or path) mounted at ``target`` in ``service``."""
    for volume in services()[service].get("volumes", []):
        source, mounted = volume.split(":")[:2]
        if mounted == target:
            return str(source)
    raise AssertionError(f"{service}: nothing mounted at {target}")


def test_every_topic_has_three_replicas_and_two_in_sync():
    """RF 3 / min ISR 2 for the outbox topics and every internal topic: an acknowledged event
    survives the loss of one broker, and writes go on meanwhile."""
    from cdc.config import ConnectorSettings, build_connector_config

    assert len(brokers()) >= REPLICATION_FACTOR > MIN_INSYNC_REPLICAS > 1
    for name, props in brokers().items():
        for key in (
            "default.replication.factor",  # the outbox topics, Connect's new and heartbeat topics
            "offsets.topic.replication.factor",
            "transaction.state.log.replication.factor",
            "share.coordinator.state.topic.replication.factor",
        ):
            assert int(props[key]) == REPLICATION_FACTOR, f"{name}: {key}={props[key]}"
        for key in (
            "min.insync.replicas",  # every topic without its own setting
            "transaction.state.log.min.isr",
            "share.coordinator.state.topic.min.isr",
        ):
            assert int(props[key]) == MIN_INSYNC_REPLICAS, f"{name}: {key}={props[key]}"
    for name, worker in connect_workers().items():
        for topic in ("config", "offset", "status"):
            factor = worker[f"{topic}.storage.replication.factor"]
            assert int(factor) == REPLICATION_FACTOR, f"{name}: {topic} topic RF {factor}"
            isr = worker.get(f"{topic}.storage.min.insync.replicas", MIN_INSYNC_REPLICAS)
            assert int(isr) == MIN_INSYNC_REPLICAS, f"{name}: {topic} topic min ISR {isr}"
    # The outbox topics exist before `setup` (which waits for kafka-init), created with RF 3.
    init = (DEPLOY / "kafka/init.sh").read_text()
    prefix = environment("kafka-init")["TOPIC_PREFIX"]
    created = {
        name.replace("${TOPIC_PREFIX}", prefix)
        for name in re.findall(r'(?m)^outbox_topic "([^"]+)"$', init)
    }
    assert created == outbox_topics()
    assert int(environment("kafka-init")["TOPIC_REPLICATION_FACTOR"]) == REPLICATION_FACTOR
    assert '--replication-factor "$TOPIC_REPLICATION_FACTOR"' in init
    # Topics Connect creates itself (a new aggregate type) take the brokers' default.
    connector = build_connector_config(
        ConnectorSettings("orders", "postgres", 5432, "orders", "outboxkit_cdc")
    )
    assert connector["topic.creation.default.replication.factor"] == "-1"


def test_an_out_of_sync_replica_never_becomes_leader():
    for name, props in brokers().items():
        assert props.get("unclean.leader.election.enable") == "false", name


def test_every_kafka_client_bootstraps_from_every_broker():
    everyone = set(every_broker().split(","))
    assert len(everyone) == len(brokers())
    bootstraps = {
        f"{name}: {variable}": value
        for name in services()
        for variable, value in environment(name).items()
        if variable.endswith(("BOOTSTRAP_SERVERS", "KAFKA_BOOTSTRAP"))
    }
    assert len(bootstraps) >= len(SERVICES) * 2 + 3  # services, consumers, setup, init, Connect
    for where, value in bootstraps.items():
        assert set(value.split(",")) == everyone, f"{where}={value}"


# -- scale-out: Kafka Connect ------------------------------------------------------------------
def test_connect_is_two_workers_in_one_group_with_exactly_once_source():
    workers = connect_workers()
    assert len(workers) == 2, f"Connect workers: {sorted(workers)}"
    cluster = ("group.id", "config.storage.topic", "offset.storage.topic", "status.storage.topic")
    for key in cluster:
        assert len({w[key] for w in workers.values()}) == 1, f"workers differ in {key}"
    # The rest is one configuration too, but for where each worker's REST API is reached.
    own = "rest.advertised.host.name"
    shared = [{k: v for k, v in w.items() if k != own} for w in workers.values()]
    assert all(s == shared[0] for s in shared), "the workers' settings differ"
    for name, worker in workers.items():
        assert worker["exactly.once.source.support"] == "enabled", name
        assert worker["rest.advertised.host.name"] == name, f"{name}: unreachable by the leader"
    # Clients reach the REST API through the load balancer, which spreads over every worker.
    ports = {load_balanced(rest_address(name)) for name in workers}
    assert len(ports) == 1
    assert environment("setup")["OUTBOXKIT_CONNECT_URL"] == f"http://lb:{ports.pop()}"


def test_a_lost_connect_workers_task_moves_within_seconds():
    """A worker lost: its group membership ends after the session timeout, its task is held back
    for scheduled.rebalance.max.delay.ms (Connect's default: 5 minutes) and then moves."""
    for name, worker in connect_workers().items():
        delay = int(worker["scheduled.rebalance.max.delay.ms"])
        assert 1_000 <= delay <= 60_000, f"{name}: rebalance delay {delay} ms"
        session = int(worker["session.timeout.ms"])
        assert 6_000 <= session <= 10_000, f"{name}: session timeout {session} ms"
        assert int(worker["heartbeat.interval.ms"]) * 3 <= session, name
    compose_text = (DEPLOY / "docker-compose.yml").read_text()
    assert re.search(r"#[^\n]*zombie", compose_text), "say why moving a task early is safe"


# -- scale-out: Spark --------------------------------------------------------------------------
def spark_master_url() -> str:
    (master,) = spark_nodes("Master")
    argv = command(master)
    return f"spark://{option(argv, '--host')}:{option(argv, '--port')}"


def test_spark_is_a_standalone_master_with_two_workers():
    masters, workers = spark_nodes("Master"), spark_nodes("Worker")
    assert len(masters) == 1 and len(workers) == 2, f"master {masters}, workers {workers}"
    assert option(command(masters[0]), "--host") == masters[0]
    for worker in workers:
        argv = command(worker)
        assert argv[2] == spark_master_url(), f"{worker} registers with {argv[2]}"
        assert option(argv, "--host") == worker, f"{worker}: executors unreachable"
        assert services()[worker]["depends_on"][masters[0]]["condition"] == "service_healthy"
    # Spark's own scripts come with PySpark (the [spark] extra) in the outboxkit image.
    assert re.search(r"pip install \"?/\S+\[[\w,]*spark[\w,]*\]", dockerfile())


def test_consumer_drivers_are_submitted_to_the_standalone_master():
    import inspect

    from spark_consumers import session

    # build_session takes the master from OUTBOXKIT_SPARK_MASTER: it must be spark-submit's.
    assert "OUTBOXKIT_SPARK_MASTER" in inspect.getsource(session.build_session)
    workers = spark_nodes("Worker")
    cores = {w: int(option(command(w), "--cores")) for w in workers}
    wanted = 0
    for name in CONSUMERS:
        argv = command(name)
        env = environment(name)
        assert option(argv, "--master") == env["OUTBOXKIT_SPARK_MASTER"] == spark_master_url()
        assert services()[name]["depends_on"]["spark-master"]["condition"] == "service_healthy"
        # One 1-core executor on each worker: a lost worker leaves the job an executor.
        assert option(argv, "--executor-cores") == "1", name
        assert int(option(argv, "--total-executor-cores")) == len(workers), name
        wanted += len(workers)
        conf = spark_conf(argv)
        assert conf["spark.driver.host"] == name, f"{name}: executors cannot reach the driver"
        assert conf["spark.driver.bindAddress"] == "0.0.0.0", name
        # The executors open the inbox transactions: each worker has the job's database password
        # where the job names it (read on the executor, never sent with a task).
        password = env[f"{CONSUMERS[name].upper()}_DATABASE_PASSWORD_FILE"]
        for worker in workers:
            assert mounted_secrets(worker).get(password) == mounted_secrets(name)[password]
    # Every job gets its executors at once: otherwise a job waits for cores that never free up.
    assert wanted <= sum(cores.values())
    assert all(c >= len(CONSUMERS) for c in cores.values()), f"cores per worker: {cores}"


# -- scale-out: the services -------------------------------------------------------------------
@pytest.mark.parametrize("service", SERVICES)
def test_each_service_runs_two_replicas_behind_the_load_balancer(service: str):
    assert image("lb")[0] == "haproxy"
    assert mounted_files("lb")["/usr/local/etc/haproxy/haproxy.cfg"] == DEPLOY / "lb/haproxy.cfg"
    assert replicas(service) == 2, f"{service}: {replicas(service)} replica(s)"
    assert replicas(service, env={}) == 2, f"{service}: without SERVICE_REPLICAS in .env"
    assert not services()[service].get("ports"), f"{service}: clients must use the lb"
    port = option(command(service), "--port")
    _, backend = balancing(f"{service}:{port}")
    # Every replica: a server template with a slot per replica, addressed by the service's name,
    # re-resolved through Compose's DNS (a static server would keep one address for ever).
    (template,) = directives(backend, "server-template")
    assert int(template[1]) >= replicas(service) and template[2] == f"{service}:{port}"
    assert "check" in template
    defaults = directives("defaults", "default-server")[0]
    (resolvers,) = [s for s in haproxy() if s.startswith("resolvers ")]
    assert defaults[defaults.index("resolvers") + 1] == resolvers.split()[1]
    assert ["docker", "127.0.0.11:53"] in directives(resolvers, "nameserver")
    # A replica gets requests only while its /ready answers 200.
    assert directives(backend, "option") == [["httpchk"]]
    assert ["send", "meth", "GET", "uri", "/ready"] in directives(backend, "http-check")
    assert ["expect", "status", "200"] in directives(backend, "http-check")
    frontend_port = load_balanced(f"{service}:{port}")
    published = [interpolate(p) for p in services()["lb"]["ports"]]
    host_port = example_env()[f"{service.upper()}_PORT"]
    assert f"127.0.0.1:{host_port}:{frontend_port}" in published, "clients reach it at its port"
    # No client names one replica: nothing in the compose file addresses the service directly.
    for name in services():
        for variable, value in environment(name).items():
            assert f"{service}:{port}" not in value, f"{name}: {variable}={value}"
