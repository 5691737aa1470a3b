"""The local stack: Postgres, Apache Kafka, Kafka Connect + Debezium; embedded or external."""

from __future__ import annotations

import re
import shutil
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from cdc import roles
from cdc import settings as cdc_settings
from cdc.config import ConnectorSettings
from cdc.connect import ConnectClient, ConnectError
from migrations import runner
from outboxkit.kernel.kafka.security import KafkaSecurity, connect_worker_config, librdkafka_config
from outboxkit.kernel.secrets import read_secret
from outboxkit_workshop.devstack import (
    artifacts,
    broker,
    connect,
    connectors,
    postgres,
    spark,
    status,
    transactions,
)
from outboxkit_workshop.devstack.network import TOOLS, Network
from outboxkit_workshop.devstack.processes import (
    Host,
    StackError,
    alive,
    free_port,
    port_open,
    stop,
)
from outboxkit_workshop.devstack.secrets import SecretStore, write_pgpass
from outboxkit_workshop.devstack.settings import StackSettings
from outboxkit_workshop.devstack.state import EMBEDDED, EXTERNAL, LOCAL, Component, Node, StackState
from outboxkit_workshop.devstack.transactions import TransactionTool


class Stack:
    """Bring the stack up, report its status, and take it down, by settings."""

    def __init__(self, settings: StackSettings, *, echo: Any = print) -> None:
        self.settings = settings
        self.dir = settings.stack_dir.resolve()
        self.logs = self.dir / "logs"
        self.state_file = self.dir / "state.json"
        self.echo = echo
        self.secrets = SecretStore((settings.secrets_dir or self.dir / "secrets").resolve())
        # libpq's password file: the stack's own connections (set-up, tests, tools) find the
        # passwords there, so no URL, state file or command output carries one.
        self.pgpass = self.dir / "pgpass"

    # -- endpoints -----------------------------------------------------------------------
    @property
    def state(self) -> StackState:
        state = StackState.load(self.state_file)
        if state is None:
            raise StackError(f"no stack recorded in {self.dir}: run `outboxkit dev stack up` first")
        return state

    def database_url(self) -> str:
        """SQLAlchemy URL of the stack's database."""
        return self.state.postgres.endpoint

    def bootstrap_servers(self) -> str:
        """Kafka bootstrap servers."""
        return self.state.broker.endpoint

    def kafka_security(self) -> KafkaSecurity:
        """The Kafka clients' SASL/TLS (``OUTBOXKIT_KAFKA_*``), for an external cluster only:
        the embedded broker listens PLAINTEXT on loopback."""
        security = self.settings.kafka_security
        if security.security_protocol != "PLAINTEXT" and not self.settings.kafka_bootstrap_servers:
            raise StackError(
                f"OUTBOXKIT_KAFKA_SECURITY_PROTOCOL={security.security_protocol} needs an external "
                "Kafka (OUTBOXKIT_KAFKA_BOOTSTRAP_SERVERS): the embedded broker is PLAINTEXT"
            )
        return security.resolve()

    def kafka_client_config(self) -> dict[str, str | int | float | bool]:
        """A confluent-kafka client's bootstrap servers and security for the stack's broker."""
        return {
            "bootstrap.servers": self.bootstrap_servers(),
            **librdkafka_config(self.kafka_security()),
        }

    def connect_client(self, endpoint: str | None = None, *, timeout: float = 30) -> ConnectClient:
        """A client for the stack's Kafka Connect REST API (authenticated when configured)."""
        return ConnectClient(
            endpoint or self.connect_url(), timeout=timeout, auth=self.settings.connect_auth()
        )

    def network(self, state: StackState | None = None) -> Network | None:
        """The partitionable network the stack's nodes run on (None: loopback)."""
        raw = (state or self.state).network
        return Network.from_dict(raw) if raw else None

    def save_network(self, network: Network) -> None:
        """Record ``network``'s rules and shapers in the state file (`down` stops them)."""
        state = self.state
        state.network = network.as_dict()
        state.save(self.state_file)

    def host(self, node: str, state: StackState | None = None) -> Host:
        """Where node ``node`` (``kafka-1``, ``orders-2``, ``consumers``...) runs: its own
        namespace and address on the partitionable network (made the first time), else here on
        loopback (`spark.loopback_host`: each Spark worker on an address of its own)."""
        state = state or self.state
        network = self.network(state)
        if network is None:
            return spark.loopback_host(node)
        host = network.host(node)
        state.network = network.as_dict()
        state.save(self.state_file)
        return host

    def driver_env(self) -> dict[str, str]:
        """What a Spark driver started here (in the tools' namespace) needs in its environment:
        on the partitionable network, the address the executors reach it at."""
        network = self.network()
        return {"SPARK_LOCAL_IP": network.address(TOOLS)} if network else {}

    def connect_url(self, state: StackState | None = None) -> str:
        """The REST URL of a Connect worker that runs
        (`outboxkit_workshop.devstack.connect.live_url`)."""
        return connect.live_url(state or self.state)

    # -- up -----------------------------------------------------------------------------
    def up(self) -> StackState:
        """Start what is not running, apply migrations, register the connector. Safe to repeat."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)
        self.logs.mkdir(exist_ok=True)
        previous = StackState.load(self.state_file)
        needs_binaries = not (
            self.settings.database_url
            and self.settings.kafka_bootstrap_servers
            and self.settings.connect_url
        )
        found = artifacts.locate(self.settings.cache_dir, install=True) if needs_binaries else None
        network = self._network(previous)
        # What runs stays recorded until each engine is checked: a start that fails leaves
        # the nodes that still run where `down` finds them.
        state = StackState(
            network=network.as_dict() if network else None,
            postgres=previous.postgres if previous else Component(EXTERNAL),
            broker=previous.broker if previous else Component(EXTERNAL),
            connect=previous.connect if previous else Component(EXTERNAL),
            spark=previous.spark if previous else Component(LOCAL, "local[2]"),
            connectors=previous.connectors if previous else [],
            slots=previous.slots if previous else [],
            publications=previous.publications if previous else [],
        )
        state.save(self.state_file)
        state.postgres = self._postgres(found, previous, state)
        state.save(self.state_file)
        self.echo(f"postgres   {state.postgres.mode:8} {state.postgres.endpoint}")
        runner.upgrade(state.postgres.endpoint)
        self.echo("migrations applied (head)")
        state.broker, restarted = self._broker(found, previous, state)
        state.save(self.state_file)
        self.echo(f"broker     {state.broker.mode:8} {state.broker.endpoint}")
        if restarted and previous is not None and found is not None:
            # A broker stopped mid-transaction can leave one hanging, and a Connect worker cannot
            # start behind it: it reads its offsets topic to the end before it is ready (/health),
            # so it would wait for ever. The worker of before is stopped first (its producers
            # must be gone), the transactions healed, and only then a new worker started.
            for worker in previous.connect.nodes if previous.connect.mode == EMBEDDED else []:
                if stop(worker.pid):
                    self.echo(f"{worker.name:10} stopped (pid {worker.pid}): the broker restarted")
            tool = TransactionTool(found.java, found.broker_libs, state.broker.endpoint)
            transactions.heal(tool, echo=self.echo)
        state.connect = self._connect(found, previous, state.broker.endpoint, restarted, state)
        state.save(self.state_file)
        self.echo(f"connect    {state.connect.mode:8} {state.connect.endpoint}")
        connectors.register(self, state)
        state.save(self.state_file)
        state.spark = self._spark(previous, state)
        state.save(self.state_file)
        if state.spark.mode != LOCAL:
            self.echo(f"spark      {state.spark.mode:8} {state.spark.endpoint}")
        return state

    def _network(self, previous: StackState | None) -> Network | None:
        """The partitionable network the settings ask for: the recorded one, its links healed
        (a campaign stopped mid-fault leaves none cut), or a new one; None on loopback. A
        stack that runs on the other kind of network is refused."""
        recorded = Network.from_dict(previous.network) if previous and previous.network else None
        wanted = self.settings.network == "namespaces"
        if previous is not None and (recorded is not None) != wanted:
            runs = "the partitionable network" if recorded else "loopback"
            raise StackError(
                f"the stack in {self.dir} runs on {runs}: `outboxkit dev stack down` first, "
                f"then up with OUTBOXKIT_NETWORK={self.settings.network}"
            )
        if recorded is not None and recorded.exists():
            recorded.heal()
            return recorded
        if recorded is not None:  # its namespaces are gone (a reboot): made again
            recorded.destroy()
        if not wanted:
            return None
        network = Network.create(self.logs)
        self.echo(f"network    {network.network()} (a namespace per node)")
        return network

    def _hosts(self, state: StackState) -> Callable[[str], Host]:
        """Where each node runs, by name (`host`), for the engines' ``ensure``."""
        return lambda node: self.host(node, state)

    def _spark(self, previous: StackState | None, state: StackState) -> Component:
        """Where the consumer drivers run their tasks: an external master, an embedded
        standalone cluster of ``spark_workers`` workers, or inside each driver (local[2])."""
        if self.settings.spark_master:
            return Component(EXTERNAL, endpoint=self.settings.spark_master)
        if self.settings.spark_workers == 0:
            return Component(LOCAL, "local[2]")
        old = previous.spark if previous else None
        return spark.ensure(
            self.dir, self.logs, self.settings.spark_workers, old, self._hosts(state)
        )

    def spark_master(self) -> str | None:
        """The master URL consumer drivers submit to; None: Spark inside the driver."""
        component = self.state.spark
        return None if component.mode == LOCAL else component.endpoint

    def _postgres(
        self, found: artifacts.Artifacts | None, previous: StackState | None, state: StackState
    ) -> Component:
        if self.settings.database_url:
            return Component(EXTERNAL, endpoint=self.external_database_url())
        assert found is not None
        superuser_password = self.secrets.password(postgres.SUPERUSER)
        self.write_pgpass()
        old = previous.postgres if previous else None
        data = self.dir / "pgdata"
        host = self.host("postgres", state)
        address = host.address
        up = old and old.mode == EMBEDDED and alive(old.pid) and old.port
        if old and up and old.port and port_open(old.port, address):
            return old
        port = old.port if old and old.port and not port_open(old.port, address) else free_port()
        log = self.logs / "postgres.log"
        postgres.initdb(found.postgres_bin, data, log, superuser_password)
        network = self.network(state)
        pid = postgres.start_server(
            found.postgres_bin,
            data,
            port,
            log,
            self.pgpass,
            superuser_password,
            host,
            network.network() if network else None,
        )
        postgres.create_database(port, self.settings.database_name, self.pgpass, address)
        endpoint = postgres.url(port, self.settings.database_name, self.pgpass, address)
        return Component(EMBEDDED, endpoint, [Node("postgres", "database", pid, port, endpoint)])

    def external_database_url(self) -> str:
        """The external database's set-up URL without a password: the password (from
        database_password_file, else the URL) goes to the stack's libpq password file."""
        assert self.settings.database_url, "no external database configured"
        self.write_pgpass()
        bare = make_url(self.settings.database_url).set(password=None)
        bare = bare.update_query_dict({"passfile": str(self.pgpass)})
        return bare.render_as_string(hide_password=False)

    def _admin_password(self) -> dict[str, str]:
        """The external set-up role's password, when one is given."""
        if not self.settings.database_url:
            return {}  # embedded: the superuser's password is in the secrets directory
        url = make_url(self.settings.database_url)
        user = url.username or postgres.SUPERUSER
        if self.settings.database_password_file:
            return {user: read_secret(self.settings.database_password_file)}
        return {user: url.password} if url.password else {}

    def write_pgpass(self) -> None:
        """Every role with a password file, and the set-up role, in libpq's password file."""
        # Only Postgres roles (lower-case identifiers): a mounted secrets directory also holds
        # other secrets (Kafka's, Connect REST's), which have no place in libpq's file.
        entries = {
            role: self.secrets.password(role)
            for role in self.secrets.roles()
            if re.fullmatch(r"[a-z_][a-z0-9_]*", role)
        }
        write_pgpass(self.pgpass, {**entries, **self._admin_password()}.items())

    def _broker(
        self, found: artifacts.Artifacts | None, previous: StackState | None, state: StackState
    ) -> tuple[Component, bool]:
        """The Kafka cluster, its stopped nodes started again; True when the whole cluster was
        down (a single broker restarted), so that hanging transactions must be healed."""
        if self.settings.kafka_bootstrap_servers:
            return Component(EXTERNAL, endpoint=self.settings.kafka_bootstrap_servers), False
        assert found is not None
        old = previous.broker if previous else None
        size = self.settings.kafka_brokers
        cluster, started = broker.ensure(
            found.java, found.broker_libs, self.dir, self.logs, size, old, self._hosts(state)
        )
        return cluster, len(started) == size

    def _connect(
        self,
        found: artifacts.Artifacts | None,
        previous: StackState | None,
        bootstrap: str,
        broker_restarted: bool,
        state: StackState,
    ) -> Component:
        if self.settings.connect_url:
            return Component(EXTERNAL, endpoint=self.settings.connect_url)
        assert found is not None
        old = previous.connect if previous and previous.connect.mode == EMBEDDED else None
        size = self.settings.connect_workers
        factor, _ = broker.replication(self.settings.kafka_brokers)

        def launch(node: Node, workdir: Path, log: Path) -> int:
            assert node.port
            return connect.start_worker(
                found.java,
                found.connect_libs,
                bootstrap,
                node.port,
                workdir,
                log,
                exactly_once=self.settings.connect_exactly_once,
                group=f"{self.settings.connector_name}-connect",
                secrets_dir=self.secrets.dir,
                kafka_security=connect_worker_config(self.kafka_security()),
                replication=factor,
                wait=False,
                host=self.host(node.name, state),
            )

        return connect.ensure(
            self.dir,
            self.logs,
            size,
            old,
            launch,
            restart_all=broker_restarted,
            hosts=self._hosts(state),
        )

    def connector_settings(self, database_url: str) -> ConnectorSettings:
        """Connector settings for the stack's database, as Connect must reach it."""
        return connectors.connector_settings(self, database_url)

    def service_database_url(self, name: str) -> str:
        """The URL of service ``name``'s database on the stack's Postgres, as its own role
        (named after it, see add_service); the stack's password file holds the password."""
        url = make_url(self.state.postgres.endpoint).set(username=name, database=name)
        return url.render_as_string(hide_password=False)

    def service_connection(self, name: str) -> tuple[str, Path]:
        """What service ``name``'s processes are given: its database URL without any password,
        and the file holding its role's password (``<SERVICE>_DATABASE_PASSWORD_FILE``)."""
        url = make_url(self.service_database_url(name))
        bare = url.set(query={k: v for k, v in url.query.items() if k != "passfile"})
        return bare.render_as_string(hide_password=False), self.secrets.file(name)

    def add_service(self, name: str) -> str:
        """A service's own role and database on the stack's Postgres (the role owns the database
        and may connect to nothing else), the framework migrations run as that role, and the
        service's own outbox connector (slot, publication and server name derived from ``name``).
        Safe to repeat. Returns the database URL."""
        if not name.isidentifier() or not name.islower():
            raise StackError(f"service name {name!r}: use lower-case letters, digits, underscores")
        reserved = {
            postgres.SUPERUSER,
            self.settings.cdc_role,
            *self._admin_password(),
            "template0",
            "template1",
        }
        if name in reserved or name == self.settings.database_name:
            raise StackError(f"service name {name!r} is taken by the stack itself: choose another")
        state = self.state
        password = self.secrets.password(name)
        self.write_pgpass()
        admin = make_url(state.postgres.endpoint)
        with roles.admin_connection(admin.set(database="postgres")) as conn:
            roles.ensure_role(conn, name, password)
            roles.ensure_database(conn, name, owner=name)
        with roles.admin_connection(admin.set(database=name)) as conn:
            roles.hand_over_objects(conn, name)
            roles.restrict_messages(conn, writer=name)
        service_url = self.service_database_url(name)
        runner.upgrade(service_url)
        cs = connectors.connector_settings(
            self, service_url, cdc_settings.per_database(self.settings, name)
        )
        connectors.register(self, state, cs)
        return service_url

    # -- status -------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Each component's mode, state and endpoint, plus the connectors and slots
        (`outboxkit_workshop.devstack.status`)."""
        return status.report(self)

    # -- down ---------------------------------------------------------------------------
    def down(self, *, keep_data: bool = False) -> None:
        """Delete our connectors, stop our processes by PID, drop our slots; logs are kept."""
        state = StackState.load(self.state_file)
        if state is None:
            self.echo("stack: nothing recorded, nothing to stop")
            return
        client = self.connect_client(self.connect_url(state), timeout=10)
        if state.connect.mode == EXTERNAL or any(alive(n.pid) for n in state.connect.nodes):
            for name in state.connectors:
                try:
                    client.delete(name)
                except ConnectError as exc:
                    self.echo(f"warning: could not delete connector {name}: {exc}")
        self._stop_nodes(state.spark)
        self._stop_nodes(state.connect)
        connectors.drop_replication(state, self.echo)
        self._stop_nodes(state.broker)
        # SIGINT is Postgres's "fast" shutdown: disconnect clients, checkpoint, exit.
        if state.postgres.mode == EMBEDDED and stop(
            state.postgres.pid, sig=signal.SIGINT, timeout=30
        ):
            self.echo(f"postgres   stopped (pid {state.postgres.pid})")
        network = self.network(state)
        if network is not None:  # every process in its namespaces is stopped
            network.destroy()
            self.echo(f"network    {network.network()} removed")
        if not keep_data:
            shutil.rmtree(self.dir / "pgdata", ignore_errors=True)
            shutil.rmtree(self.dir / "kafka", ignore_errors=True)
            shutil.rmtree(self.dir / "spark", ignore_errors=True)
        self.state_file.unlink(missing_ok=True)

    def _stop_nodes(self, component: Component) -> None:
        """Stop an embedded engine's nodes by PID, all at once: one by one, the last broker of a
        cluster waits out its stop's time-out, its controller quorum gone with the others."""
        if component.mode != EMBEDDED:
            return
        with ThreadPoolExecutor(max_workers=max(1, len(component.nodes))) as pool:
            stopped = list(pool.map(lambda node: stop(node.pid), component.nodes))
        for node, was_running in zip(component.nodes, stopped, strict=True):
            if was_running:
                self.echo(f"{node.name:10} stopped (pid {node.pid})")
