"""The saga's processes on a stack: service databases, migrations and connectors, topics and
stock; the three services (each in one or more replicas) and the Spark jobs' driver, started and
stopped by PID. Load and invariant checks live in `outboxkit_workshop.saga_harness.load` and
`outboxkit_workshop.saga_harness.invariants`; `Saga` delegates to them."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from sqlalchemy.engine import Engine

from cdc.settings import per_database
from outboxkit.kernel import retry
from outboxkit.kernel.engines import engine_for
from outboxkit.kernel.wire.record import topic_for
from outboxkit_workshop.devstack.network import address_of
from outboxkit_workshop.devstack.processes import (
    LOOPBACK_ADDRESS,
    alive,
    free_port,
    gone,
    released,
    start,
    stop,
    tail,
    wait_until,
)
from outboxkit_workshop.devstack.stack import Stack
from outboxkit_workshop.saga import rules, shipping
from outboxkit_workshop.saga.common import SERVICES, SagaServiceSettings, migrations_of
from outboxkit_workshop.saga.jobs import ALL as JOBS
from outboxkit_workshop.saga_harness import invariants, load
from outboxkit_workshop.saga_harness.invariants import Report
from outboxkit_workshop.saga_harness.load import Placed

# The saga's consumers: 0.25 s between micro-batches. A micro-batch of the saga takes 0.3-0.45 s
# on 2 cores since the workers froze their objects, so at 0.25 s the next batch starts as soon as
# the last one ends while orders flow, and an event arriving at an idle query waits 0.125 s on
# average instead of 0.25 s: hop p50 at 10 orders/s 0.38-0.46 s against 0.52-0.56 s at 0.5 s,
# for 2-4% more of a core of idle driver CPU; 0.1 s was no faster (its idle checks compete for
# the cores).
SAGA_TRIGGER_SECONDS = 0.25

ROOT = Path(__file__).resolve().parents[1]
SKUS = {"widget": 10_000, "gadget": 10_000, "gizmo": 25}  # gizmo runs out: stock-outs
# Partitions of each saga topic: as many as the consumers' tasks (one per core of local[2]). Each
# partition a micro-batch reads costs its task a Kafka fetch (Spark's source also asks for the
# partition's earliest and latest offsets with every poll: three broker round trips) and each
# job reading it an inbox transaction, whatever its records: at 10 orders/s a batch took
# 275-302 ms with 2 partitions against 342-359 ms with 4, and POST -> final p99 2.49-2.54 s
# against 2.78-3.03 s (alternating runs).
PARTITIONS = 2
PROCESSES = (*SERVICES, "consumers")  # the processes of a saga with one replica per service


def replica_names(service: str, replicas: int) -> list[str]:
    """The process names of ``service``'s replicas: ``orders``, ``orders-2``, ``orders-3``..."""
    return [service, *(f"{service}-{n}" for n in range(2, replicas + 1))]


def service_of(name: str) -> str | None:
    """The service that process ``name`` is a replica of (``orders-2``: ``orders``); None for
    the consumer driver and for names that are no replica's."""
    if name in SERVICES:
        return name
    service, _, number = name.rpartition("-")
    return service if service in SERVICES and number.isdigit() and int(number) >= 2 else None


@dataclass
class Saga:
    """The saga's processes on ``stack`` (already up); everything stopped by PID in `stop`.

    Each service's database is named ``database_prefix + service`` on the stack's Postgres
    (a prefix keeps two sagas sharing one Postgres apart). Each service runs in ``replicas``
    processes on ports of their own (`replica_names`), all on the service's one database."""

    stack: Stack
    workdir: Path
    echo: Callable[[str], None] = print
    database_prefix: str = ""
    # The consumers append every applied event to their inbox ledger, for `audit`.
    ledger: bool = True
    # Processes per service; replica 1 keeps the service's name (``orders``), the others are
    # ``orders-2``...; ``urls["orders"]`` is replica 1's, `service_urls` gives every replica's.
    replicas: int = 1
    # OTEL_* settings of every process (e.g. OTEL_EXPORTER_OTLP_ENDPOINT), over the ones in the
    # environment; each process gets its own OTEL_SERVICE_NAME (orders, ..., consumers).
    telemetry: dict[str, str] = field(default_factory=dict)
    # Variables of one process over all the others, by process name (the service benchmark
    # runs ``orders-2`` with ``{"ORDERS_HTTP_ROUTES": "sync"}`` beside the async ``orders``).
    environment: dict[str, dict[str, str]] = field(default_factory=dict)
    # Time in the saga: the orders' timeouts (None: the services' defaults), how late the card
    # gateway answers for `slow-` customers, and the share of orders `place_orders` gives them.
    payment_timeout: float | None = None
    shipping_timeout: float | None = None
    slow_gateway: float | None = None
    slow_share: float = 0.0
    # How long past its timeout an order may wait before the invariants call it stuck.
    timeout_bound: float = 30.0
    urls: dict[str, str] = field(default_factory=dict)
    database_urls: dict[str, str] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    # Each process's port, kept across restarts: clients holding its URL keep working.
    ports: dict[str, int] = field(default_factory=dict)
    engines: dict[str, Engine] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be 1 or more (got {self.replicas})")

    # -- the processes: every service's replicas, then the consumer driver -------------------
    @property
    def processes(self) -> list[str]:
        """Every process name of this saga, and any other one still recorded as running."""
        names = [n for s in SERVICES for n in self.replicas_of(s)] + ["consumers"]
        return names + sorted(set(self.pids) - set(names))

    def replicas_of(self, service: str) -> list[str]:
        """The process names of ``service``'s replicas (``orders``, ``orders-2``, ...)."""
        return replica_names(service, self.replicas)

    def service_urls(self, service: str) -> list[str]:
        """The URLs of ``service``'s started replicas, replica 1's first."""
        urls = [self.urls[n] for n in self.replicas_of(service) if n in self.urls]
        if not urls:
            raise LookupError(f"{service} has no replica started (start it: outboxkit dev saga up)")
        return urls

    def _check(self, names: Sequence[str]) -> None:
        """Refuse names that are none of this saga's processes."""
        unknown = [n for n in names if n not in self.processes]
        if unknown:
            raise ValueError(
                f"unknown saga process(es) {unknown}: this saga runs {self.processes} "
                f"({self.replicas} replica(s) per service)"
            )

    def scale(self, replicas: int) -> None:
        """``replicas`` processes per service from now on: the replicas beyond it are stopped
        and forgotten; new ones are started by `start` / `start_services`."""
        if replicas < 1:
            raise ValueError(f"replicas must be 1 or more (got {replicas})")
        extra = [
            n
            for n in self.processes
            if (s := service_of(n)) and n not in replica_names(s, replicas)
        ]
        self.stop(extra, dispose=False)
        for name in extra:
            self.ports.pop(name, None)
            self.urls.pop(name, None)
        self.replicas = replicas
        self._save()

    # -- the record of what runs (`outboxkit dev saga status`, `stack status`) ---------------------
    @property
    def state_file(self) -> Path:
        return self.workdir / "processes.json"

    def _save(self) -> None:
        """Record each process (PID, port, log) where `attach` and the CLI find it."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        record = {
            "database_prefix": self.database_prefix,
            "ledger": self.ledger,
            "replicas": self.replicas,
            "processes": {
                name: {"pid": self.pids.get(name), "port": self.ports.get(name)}
                for name in self.processes
                if name in self.pids or name in self.ports
            },
        }
        scratch = self.state_file.with_suffix(".tmp")
        scratch.write_text(json.dumps(record, indent=2))
        scratch.replace(self.state_file)

    @classmethod
    def attach(cls, stack: Stack, workdir: Path, echo: Callable[[str], None] = print) -> Saga:
        """The saga recorded in ``workdir`` (by `outboxkit dev saga up` or `demo --keep-running`),
        with its databases, ports and the PIDs of the processes still running."""
        state = workdir / "processes.json"
        if not state.exists():
            raise LookupError(f"no saga recorded in {workdir} (start one: outboxkit dev saga up)")
        record = json.loads(state.read_text())
        saga = cls(
            stack,
            workdir,
            echo,
            database_prefix=record["database_prefix"],
            ledger=record["ledger"],
            replicas=record.get("replicas", 1),  # records written before replicas: one each
        )
        for name, proc in record["processes"].items():
            if proc.get("port"):
                saga.ports[name] = proc["port"]
                address = address_of(stack.state.network, name)  # read only: no node made
                saga.urls[name] = f"http://{address}:{proc['port']}"
            if _runs(proc.get("pid"), name, proc.get("port")):
                saga.pids[name] = proc["pid"]
        for service in SERVICES:
            saga._connect_database(service, stack.service_database_url(saga._database(service)))
        return saga

    def _database(self, service: str) -> str:
        return f"{self.database_prefix}{service}"

    def _connect_database(self, service: str, url: str) -> None:
        self.database_urls[service] = url
        self.engines[service] = engine_for(url, "service", pool_size=4)

    # -- set-up ----------------------------------------------------------------------------
    def prepare(self, stock: dict[str, int] | None = None) -> None:
        """Each service's database, migrations and connector; topics; stock levels."""
        for service in SERVICES:
            url = self.stack.add_service(self._database(service))
            migrations_of(service).upgrade(url)
            self._connect_database(service, url)
        admin = AdminClient(self.stack.kafka_client_config())
        prefix = self.stack.settings.topic_prefix
        wanted = [topic_for(t, topic_prefix=prefix) for t in rules.AGGREGATES]
        existing = set(admin.list_topics(timeout=10).topics)
        # The brokers' default replication factor: 3 on the cluster shape, 1 on a single node.
        missing = [
            NewTopic(t, PARTITIONS, replication_factor=-1) for t in wanted if t not in existing
        ]
        for _name, done in admin.create_topics(missing).items() if missing else []:
            try:
                done.result(30)
            except Exception as exc:  # created concurrently by the connector: fine
                if "exist" not in str(exc).lower():
                    raise
        # A given stock is set; the default one only seeds SKUs not stocked yet, so a
        # deployment's set-up job, run again, leaves live stock levels alone.
        shipping.set_stock(self.engines["shipping"], stock or SKUS, overwrite=stock is not None)

    def publishers(self, service: str) -> dict[str, list[str]]:
        """Who may publish each aggregate type ``service`` reads: the source name (server
        name) of the connector of the service that publishes it."""
        settings = self.stack.settings
        return rules.publishers(
            service, lambda producer: per_database(settings, self._database(producer)).server_name
        )

    def env(self) -> dict[str, str]:
        """The child processes' environment: per service, its database, Kafka, the stack's
        topic prefix, whether its Connect worker is exactly-once and the outbox mode
        (``ORDERS_*`` etc.)."""
        env = {
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
            ),
        }
        settings = self.stack.settings
        for service in self.database_urls:
            upper = service.upper()
            # Each service and its consumer job log in as the service's own role, the password
            # read from its file (as a container's mounted secret is).
            url, password_file = self.stack.service_connection(self._database(service))
            env[f"{upper}_DATABASE_URL"] = url
            env[f"{upper}_DATABASE_PASSWORD_FILE"] = str(password_file)
            env[f"{upper}_KAFKA_BOOTSTRAP_SERVERS"] = self.stack.bootstrap_servers()
            env[f"{upper}_TOPIC_PREFIX"] = settings.topic_prefix
            env[f"{upper}_EXACTLY_ONCE_SOURCE"] = str(settings.connect_exactly_once).lower()
            env[f"{upper}_LEDGER"] = str(self.ledger).lower()
            env[f"{upper}_OUTBOX__MODE"] = settings.outbox_mode
            env[f"{upper}_API_DOCS"] = "true"  # on loopback, for whoever runs the demo
            env[f"{upper}_PUBLISHERS"] = json.dumps(self.publishers(service))
            if settings.message_prefix is not None:
                env[f"{upper}_OUTBOX__MESSAGE_PREFIX"] = settings.message_prefix
            for name, value in (
                ("PAYMENT_TIMEOUT_SECONDS", self.payment_timeout),
                ("SHIPPING_TIMEOUT_SECONDS", self.shipping_timeout),
                ("SLOW_GATEWAY_SECONDS", self.slow_gateway),
            ):
                if value is not None:
                    env[f"{upper}_{name}"] = str(value)
        master = self.stack.spark_master()
        if master:  # the stack's Spark cluster: the driver submits its jobs' tasks there
            env["OUTBOXKIT_SPARK_MASTER"] = master
        return env

    def start_services(self, names: Sequence[str] | None = None) -> None:
        """Start the named service replicas (default: every replica of every service), each on
        its recorded port, else a free one, and wait until each answers /ready."""
        names = [n for n in self.processes if service_of(n)] if names is None else list(names)
        self._check(names)
        for name in names:
            self._start_service(name)
        for name in names:
            wait_until(
                f"{name} service",
                functools.partial(self._ready, name),
                timeout=60,
                pid=self.pids[name],
                log=self.workdir / f"{name}.log",
            )
            self.echo(f"{name:10} {self.urls[name]} ready (pid {self.pids[name]})")

    def _start_service(self, name: str) -> None:
        service = service_of(name)
        if service is None:
            raise ValueError(f"{name} is no service replica")
        if alive(self.pids.get(name)):
            raise RuntimeError(f"{name} is running (pid {self.pids[name]})")
        host = self.stack.host(name)
        port = self._port(name, host.address)
        pid = start(
            name,
            [
                *(sys.executable, "-m", "outboxkit_workshop.saga.serve", service),
                *("--host", host.address, "--port", str(port)),
            ],
            log=self.workdir / f"{name}.log",
            env={
                **self.env(),
                **self.telemetry,
                "OTEL_SERVICE_NAME": service,
                **self.environment.get(name, {}),
            },
            cwd=ROOT,
            host=host,
        )
        self.pids[name], self.ports[name] = pid, port
        self.urls[name] = f"http://{host.address}:{port}"
        self._save()

    def _port(self, name: str, address: str = LOOPBACK_ADDRESS) -> int:
        """The process's recorded port once its last process let go of it, else a free one
        (not one recorded for another process: that one may not have bound it yet)."""
        port = self.ports.get(name)
        others = {p for n, p in self.ports.items() if n != name}
        while port is None or port in others:
            port = free_port()
        with contextlib.suppress(retry.WaitTimeout):  # then the start fails and says why
            retry.wait_until(
                released(port, address), timeout=30, poll=0.2, what=f"port {port} free"
            )
        return port

    def _ready(self, service: str) -> bool:
        return self.health(service) == "ready"

    def health(self, name: str) -> str:
        """``ready``, ``not ready`` (/ready answers 503: e.g. its database is down),
        ``unreachable``, ``stopped``; the consumer driver: ``running`` or ``stopped``."""
        if not alive(self.pids.get(name)):
            return "stopped"
        if name == "consumers":
            return "running"
        try:
            code = httpx.get(f"{self.urls[name]}/ready", timeout=2).status_code
        except httpx.HTTPError:
            return "unreachable"
        return "ready" if code == 200 else "not ready"

    def start_consumers(
        self, trigger: float | None = SAGA_TRIGGER_SECONDS, env: Mapping[str, str] | None = None
    ) -> int:
        """The three Spark jobs in one driver process (its own process group), serving its
        metrics on its recorded port, else a free one (``urls["consumers"]``/metrics);
        ``trigger``: seconds between micro-batches (None: `outboxkit consume`'s default);
        ``env``: more environment for the driver (``JAVA_TOOL_OPTIONS`` for its JVM...)."""
        if alive(self.pids.get("consumers")):
            raise RuntimeError(f"the consumers are running (pid {self.pids['consumers']})")
        log = self.workdir / "consumers.log"
        host = self.stack.host("consumers")
        port = self._port("consumers", host.address)
        # On the partitionable network the driver binds its own address: executors on other
        # nodes connect back to it there, and the tools read its metrics there.
        where = {"SPARK_LOCAL_IP": host.address} if host.namespace else {}
        pid = start(
            "consumers",
            [
                sys.executable,
                "-m",
                "outboxkit.cli",
                "consume",
                *JOBS,
                *(["--trigger", str(trigger)] if trigger is not None else []),
                "--checkpoint",
                str(self.workdir / "checkpoints"),
                "--metrics-port",
                str(port),
                *(("--metrics-host", host.address) if host.namespace else ()),
            ],
            log=log,
            env={
                **self.env(),
                **self.telemetry,
                "OTEL_SERVICE_NAME": "consumers",
                **where,
                **(env or {}),
            },
            cwd=ROOT,
            host=host,
        )
        self.pids["consumers"], self.ports["consumers"] = pid, port
        self.urls["consumers"] = f"http://{host.address}:{port}"
        self._save()
        self.echo(
            f"consumers saga_payments, saga_shipping, saga_orders (pid {pid}), "
            f"metrics {self.urls['consumers']}/metrics"
        )
        return pid

    def start(self, names: Sequence[str] | None = None) -> None:
        """Start the named processes (default: all) that are not running (services on their
        ports)."""
        names = self.processes if names is None else names
        self._check(names)
        replicas = [n for n in names if service_of(n) and not alive(self.pids.get(n))]
        if replicas:
            self.start_services(replicas)
        if "consumers" in names and not alive(self.pids.get("consumers")):
            self.start_consumers()

    def kill(self, name: str) -> None:
        """kill -9 of one process (one service replica; the consumer driver with everything it
        started)."""
        self._check([name])
        if name not in self.pids:
            raise LookupError(f"{name} is not running")
        pid = self.pids.pop(name)
        if name == "consumers":
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
        gone(pid, 10)
        self._save()

    def restart(self, names: Sequence[str]) -> None:
        """Stop, then start the named processes; a service comes back on its port."""
        self.stop(names, dispose=False)
        self.start(names)

    def status(self) -> list[dict[str, Any]]:
        """Each process (every replica of every service, then the consumer driver): its service,
        PID, whether it runs, port and URL, log, health."""
        return [
            {
                "name": name,
                "service": service_of(name) or name,
                "pid": self.pids.get(name),
                "running": alive(self.pids.get(name)),
                "port": self.ports.get(name),
                "url": self.urls.get(name),
                "log": str(self.workdir / f"{name}.log"),
                "health": self.health(name),
            }
            for name in self.processes
        ]

    def kill_consumers(self) -> None:
        """kill -9 of the driver and everything it started (JVM, Python workers)."""
        self.kill("consumers")

    def stop(self, names: Sequence[str] | None = None, *, dispose: bool = True) -> None:
        """Stop the named processes (default: all) by PID (SIGTERM, then SIGKILL); ``dispose``:
        the saga is done with (its record removed, its database engines closed)."""
        for name in self.processes if names is None else names:
            pid = self.pids.pop(name, None)
            if pid is None:
                continue
            if stop(pid, timeout=30):
                self.echo(f"{name:10} stopped (pid {pid})")
            if name == "consumers":
                with contextlib.suppress(ProcessLookupError):  # the JVM is in its group
                    os.killpg(pid, signal.SIGKILL)
        if dispose:  # done with: a later `saga up` prepares a new one
            self.state_file.unlink(missing_ok=True)
            for engine in self.engines.values():
                engine.dispose()
        else:
            self._save()

    # -- load and checks (outboxkit_workshop.saga_harness.load,
    # outboxkit_workshop.saga_harness.invariants)
    # ---------------------------
    def place_orders(
        self,
        count: int,
        *,
        seed: int = 7,
        concurrency: int = 8,
        retry_share: float = 0.1,
        rate: float | None = None,
    ) -> list[Placed]:
        """`load.place_orders` on this saga's orders service, spread over its replicas."""
        return load.place_orders(
            self.service_urls("orders"),
            count,
            seed=seed,
            concurrency=concurrency,
            retry_share=retry_share,
            rate=rate,
            slow_share=self.slow_share,
        )

    def warm_up(self, timeout: float = 300) -> Placed:
        """`load.warm_up`; when the order does not finish, the error shows the logs' tails."""
        try:
            urls = self.service_urls("orders")
            return load.warm_up(urls, self.engines["orders"], timeout=timeout)
        except TimeoutError as exc:
            raise RuntimeError(f"{exc}:\n{self.logs_tail()}") from exc

    def wait_final(
        self,
        placed: list[Placed],
        *,
        timeout: float = 600,
        progress: Callable[[int], None] | None = None,
    ) -> list[str]:
        """`load.wait_final` on this saga's orders database, then, within the same ``timeout``,
        until the late replies are in and compensated (`invariants.unsettled`): a final order
        may still have a late capture to refund. Returns what is still pending (empty: all
        final and settled)."""
        started = time.monotonic()
        pending = load.wait_final(
            self.engines["orders"], placed, timeout=timeout, progress=progress
        )
        if pending:
            return pending
        ids = [p.order_id for p in placed]
        left: list[str] = []

        def settled() -> bool:
            nonlocal left
            left = invariants.unsettled(self.engines, ids)
            return not left

        with contextlib.suppress(retry.WaitTimeout):
            rest = max(1.0, timeout - (time.monotonic() - started))
            retry.wait_until(settled, timeout=rest, what="the late replies compensated")
        return left

    def report(self, placed: list[Placed], *, warm: list[Placed] | None = None) -> Report:
        """`invariants.check` across this saga's three databases."""
        return invariants.check(self.engines, placed, warm=warm, timeouts=self.timeouts())

    def timeouts(self) -> invariants.Timeouts:
        """The orders' timeouts these processes run with, and the bound past them."""
        defaults = SagaServiceSettings.model_fields
        return invariants.Timeouts(
            self.payment_timeout or float(defaults["payment_timeout_seconds"].default),
            self.shipping_timeout or float(defaults["shipping_timeout_seconds"].default),
            self.timeout_bound,
        )

    def audit(self) -> list[dict[str, Any]]:
        """`outboxkit audit` of the three consumer jobs (as JSON): every event on their topics
        applied once, parked, or pending; none lost, none applied twice."""
        done = subprocess.run(
            [sys.executable, "-m", "outboxkit.cli", "audit", *JOBS, "--json"],
            capture_output=True,
            text=True,
            env={**os.environ, **self.env()},
            cwd=ROOT,
            timeout=300,
        )
        if done.returncode not in (0, 1):  # 1: the audit found something; the JSON says what
            raise RuntimeError(f"outboxkit audit failed ({done.returncode}): {done.stderr}")
        result: list[dict[str, Any]] = json.loads(done.stdout)
        return result

    # -- inspection ------------------------------------------------------------------------
    def timeline(self, order_id: str) -> dict[str, Any]:
        view: dict[str, Any] = httpx.get(
            f"{self.urls['orders']}/orders/{order_id}", timeout=10
        ).json()
        return view

    def logs_tail(self) -> str:
        return "\n".join(
            f"--- {name}\n{tail(self.workdir / f'{name}.log')}" for name in self.processes
        )


def drop_checkpoints(workdir: Path) -> None:
    """Remove the consumer driver's Spark checkpoints in ``workdir``: they hold Kafka offsets,
    meaningless once the stack's Kafka data is deleted (a saga started again on new topics would
    plan offset ranges that are not there, and fail every batch)."""
    shutil.rmtree(workdir / "checkpoints", ignore_errors=True)


def _command_marks(name: str, port: int | None) -> tuple[str, ...]:
    """Words the command line of recorded process ``name`` holds (a replica's: its port)."""
    if name == "consumers":
        return ("outboxkit.cli", "consume")
    service = service_of(name)
    if service is None:
        return ("\0",)  # no process of ours: never matched
    return ("outboxkit_workshop.saga.serve", service, *((str(port),) if port else ()))


def _runs(pid: int | None, name: str, port: int | None = None) -> bool:
    """True when ``pid`` is alive and its command line is the recorded process ``name``'s: a
    PID is trusted only while it still runs that (a PID reused by another program after a
    reboot must never be signalled)."""
    if not alive(pid):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    words = {a.decode(errors="replace") for a in argv}
    return all(mark in words for mark in _command_marks(name, port))
