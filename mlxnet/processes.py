"""Starts coordinator and node-agent processes and waits until each is ready.

Used by `mlxnet demo` and the end-to-end tests. Readiness is a line each
process writes on stdout, read as it arrives (no polling).
"""

from __future__ import annotations

import os
import selectors
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from contracts.tls import CoordinatorTrust

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0
OPERATOR_KEY_ENV = "MLXNET_OPERATOR_KEY"
# Coordinators this process started: address -> database URL, so the operators of nodes
# started against them get keys as the coordinator's admin would issue them.
_COORDINATOR_DATABASES: dict[str, str] = {}
_OPERATOR_KEYS: dict[tuple[str, str], str] = {}


class ProcessStartError(RuntimeError):
    """A child process exited or stayed silent before it was ready."""


@dataclass
class Child:
    name: str
    process: subprocess.Popen
    log_path: Path
    ready_line: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode

    @property
    def trust(self) -> CoordinatorTrust:
        """How a client trusts this coordinator: its fingerprint pinned, or plaintext on loopback."""
        fingerprint = self.extra.get("fingerprint", "")
        return CoordinatorTrust(fingerprint=fingerprint) if fingerprint else CoordinatorTrust(insecure=True)

    def ssl_context(self) -> ssl.SSLContext:
        """For HTTPS clients of this coordinator's gateway: its certificate as the only CA."""
        return ssl.create_default_context(cafile=self.extra["certificate"])

    def kill(self) -> None:
        """SIGKILL: the crash case, nothing gets to clean up."""
        self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def _wait_for_line(child: Child, prefix: str, timeout_s: float) -> str:
    assert child.process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(child.process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    try:
        while (remaining := deadline - time.monotonic()) > 0:
            if not selector.select(remaining):
                break
            line = child.process.stdout.readline()
            if not line:
                raise ProcessStartError(f"{child.name} exited with {child.process.wait()} before "
                                        f"it was ready; see {child.log_path}")
            if line.startswith(prefix):
                return line.strip()
    finally:
        selector.close()
    raise ProcessStartError(f"{child.name} was not ready within {timeout_s:.0f}s; "
                            f"see {child.log_path}")


def _spawn(name: str, argv: list[str], log_path: Path, env: dict[str, str] | None,
           program: str = "mlxnet.cli") -> Child:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", program, *argv], stdout=subprocess.PIPE,
            stderr=log_file, stdin=subprocess.DEVNULL, text=True, bufsize=1,
            env={**os.environ, **(env or {})})
    return Child(name, process, log_path)


def start_coordinator(work_dir: Path, *, database_url: str | None = None, port: int = 0,
                      heartbeat_interval_ms: int = 1000, env: dict[str, str] | None = None,
                      http_port: int = 0, allow_anonymous: bool = False,
                      trust_simulated_hardware: bool = False,
                      verify_models: tuple[str, ...] = (), tls: bool = True,
                      certificate: tuple[Path, Path] | None = None,
                      extra_args: tuple[str, ...] = (), program: str = "mlxnet.cli") -> Child:
    """extra["address"] is the gRPC HOST:PORT, extra["http_address"] the HTTP gateway's,
    extra["url"] the gateway's base URL; with TLS (its self-signed certificate in its data
    dir), extra["fingerprint"] and extra["certificate"] (the PEM's path) say how to trust it.

    verify_models ("ID=PATH") run a verifier worker that replays sampled jobs of those models.
    tls=False serves plaintext (--insecure, on loopback); certificate: (cert, key) PEM files
    to serve instead of the self-signed one.
    """
    argv = ["coordinator", "--port", str(port), "--data-dir", str(work_dir / "coordinator"),
            "--heartbeat-interval-ms", str(heartbeat_interval_ms), "--http-port", str(http_port),
            *extra_args]
    if not tls:
        argv.append("--insecure")
    if certificate is not None:
        argv += ["--tls-cert", str(certificate[0]), "--tls-key", str(certificate[1])]
    if database_url:
        argv += ["--database-url", database_url]
    if allow_anonymous:
        argv.append("--allow-anonymous")
    if trust_simulated_hardware:
        argv.append("--trust-simulated-hardware")
    for model in verify_models:
        argv += ["--verify-model", model]
    child = _spawn("coordinator", argv, work_dir / "logs" / "coordinator.log", env, program)
    try:
        child.ready_line = _wait_for_line(child, "coordinator listening on", READY_TIMEOUT_S)
        # Written and flushed with the line above, so it may already sit in the read buffer,
        # where select() would not see it.
        gateway_line = child.process.stdout.readline().strip() if child.process.stdout else ""
        if not gateway_line.startswith("gateway listening on"):
            raise ProcessStartError(f"coordinator did not report its HTTP gateway; see {child.log_path}")
        certificate_line = child.process.stdout.readline().strip() if child.process.stdout else ""
        if not certificate_line.startswith("coordinator certificate "):
            raise ProcessStartError(f"coordinator did not report its certificate; see {child.log_path}")
    except ProcessStartError:
        child.stop()
        raise
    child.extra["address"] = child.ready_line.rsplit(" ", 1)[1]
    child.extra["http_address"] = gateway_line.rsplit(" ", 1)[1]
    fingerprint, _, certificate = certificate_line.removeprefix("coordinator certificate ").partition(" ")
    if fingerprint != "none":
        child.extra["fingerprint"], child.extra["certificate"] = fingerprint, certificate
    scheme = "https" if fingerprint != "none" else "http"
    child.extra["url"] = f"{scheme}://{child.extra['http_address']}"
    from coordinator.storage.database import default_sqlite_url

    child.extra["database_url"] = database_url or default_sqlite_url(work_dir / "coordinator")
    _COORDINATOR_DATABASES[child.extra["address"]] = child.extra["database_url"]
    return child


def operator_key(coordinator: str, operator: str) -> str | None:
    """A key for the operator on a coordinator this process started (as `mlxnet keys create
    --operator` would make it), made once per database; None for any other coordinator.
    coordinator may list several, comma-separated (one network): the first names the database."""
    database_url = _COORDINATOR_DATABASES.get(coordinator.split(",")[0].strip())
    if database_url is None:
        return None
    if (database_url, operator) not in _OPERATOR_KEYS:
        from coordinator.storage.database import Database
        from coordinator.world.operator_keys import create_operator_key

        db = Database(database_url)
        try:
            with db.transaction() as session:
                _, key = create_operator_key(session, operator, "started with its nodes",
                                             time.time_ns() // 1_000_000)
        finally:
            db.dispose()
        _OPERATOR_KEYS[(database_url, operator)] = key
    return _OPERATOR_KEYS[(database_url, operator)]


def spawn_node(work_dir: Path, name: str, coordinator: str, models: list[str], *,
               profile: str | None = None, operator: str | None = None,
               env: dict[str, str] | None = None, max_concurrent_jobs: int = 1,
               trust: CoordinatorTrust | None = None, extra_args: tuple[str, ...] = (),
               program: str = "mlxnet.cli") -> Child:
    """Start a node agent without waiting; pass it to wait_until_registered.

    trust: the coordinator's pinned fingerprint, or plaintext; None trusts it on first use.
    program: the module run with `python -m` (tests run altered agents this way).
    """
    argv = ["node", "--coordinator", coordinator, "--data-dir", str(work_dir / "nodes" / name),
            "--name", name, "--max-concurrent-jobs", str(max_concurrent_jobs), *extra_args]
    if trust is not None and trust.insecure:
        argv.append("--insecure")
    elif trust is not None and trust.fingerprint:
        argv += ["--coordinator-fingerprint", trust.fingerprint]
    for model in models:
        argv += ["--model", model]
    if profile:
        argv += ["--profile", profile]
    if operator:
        argv += ["--operator", operator]
        key = operator_key(coordinator, operator)
        if key is not None and OPERATOR_KEY_ENV not in (env or {}):
            env = {**(env or {}), OPERATOR_KEY_ENV: key}  # not in argv, where ps shows it
    return _spawn(name, argv, work_dir / "logs" / f"{name}.log", env, program)


def wait_until_registered(child: Child) -> Child:
    try:
        child.ready_line = _wait_for_line(child, "node ", READY_TIMEOUT_S)
    except ProcessStartError:
        child.stop()
        raise
    child.extra["node_id"] = child.ready_line.split()[1]
    return child


def start_nodes(work_dir: Path, coordinator: str,
                nodes: list[tuple[str, list[str], str | None, str | None]],
                trust: CoordinatorTrust | None = None) -> list[Child]:
    """Start (name, models, profile, operator) agents together; return once all registered."""
    children = [spawn_node(work_dir, name, coordinator, models, profile=profile, operator=operator,
                           trust=trust)
                for name, models, profile, operator in nodes]
    try:
        return [wait_until_registered(child) for child in children]
    except ProcessStartError:
        for child in children:
            child.stop()
        raise
