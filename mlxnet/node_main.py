"""`mlxnet node`: turns command-line flags and node.toml into a running node agent.

Flags override the config file (`--data-dir`/node.toml, written by `mlxnet node
config`). The subcommands (config, status, leave, install-service, hardware,
pod) live in mlxnet.node_cli.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from contracts import hop_trace
from contracts.benchmarks import REFERENCE_MODEL_ID
from contracts.hardware import ChipTier, HardwareReport
from contracts.ids import NodeId
from contracts.failover import parse_addresses, parse_fingerprints
from contracts.lending import LendingMode
from contracts.models import ModelSpec
from contracts.tls import CoordinatorTrust, is_loopback, normalize_fingerprint
from mlxnet import tracing
from mlxnet.heap import freeze_start_up_heap
from node_agent.agent import AgentSettings, NodeAgent
from node_agent.coordinator_client import CallRejected, Challenge
from node_agent.hardware.discover import discover_host, simulated_profile
from node_agent.identity import load_or_create_identity
from node_agent.inference.engine import Engine, device_info
from node_agent.lending.activity import file_activity_source, host_activity_source
from node_agent.lending.config import (
    CONFIG_FILE_NAME, ConfigError, NodeConfig, load_config, save_config,
)
from node_agent.lending.monitor import LendingMonitor
from node_agent.model_files import describe_model
from node_agent.operator_hooks import OperatorHooks
from node_agent.status_file import PID_FILE_NAME, STATUS_FILE_NAME, write_pid

log = logging.getLogger(__name__)

DEFAULT_DATA_DIR = Path("~/.mlxnet/node").expanduser()
EXIT_UNTRUSTED = 3  # the coordinator's certificate was refused


OPERATOR_KEY_ENV = "MLXNET_OPERATOR_KEY"


def parse_model_flag(value: str) -> tuple[str, Path]:
    """`ID=PATH` serves PATH under ID; a bare PATH is served under its absolute path."""
    model_id, _, path = value.rpartition("=")
    directory = Path(path).expanduser().resolve()
    return (model_id or str(directory)), directory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mlxnet import node_cli

    parser.add_argument("--coordinator", help="coordinator HOST:PORT, or several coordinators "
                        "of one network separated by commas (the node fails over between them); "
                        "default: from node.toml")
    parser.add_argument("--coordinator-fingerprint", metavar="SHA256",
                        help="the coordinator's certificate fingerprint, as it prints it (several "
                        "coordinators: one they share, or one per address in --coordinator's "
                        "order, comma-separated); without one the system's CAs vouch for it, or "
                        "the first join trusts and remembers it in node.toml (a changed "
                        "certificate is then refused)")
    parser.add_argument("--insecure", action="store_true",
                        help="plaintext to a coordinator on loopback (nowhere else)")
    parser.add_argument("--model", action="append", default=[], metavar="[ID=]PATH|HUB_ID",
                        help="a local MLX model directory, or a Hugging Face hub id fetched "
                        "into the model cache (repeatable; default: from node.toml)")
    parser.add_argument("--profile", help="declare a simulated Mac, e.g. m3-ultra-512 "
                        "(for demos and tests; the coordinator marks the node simulated)")
    parser.add_argument("--operator", help="operator account credited for this node's work "
                        "(default: node.toml, else the node id)")
    parser.add_argument("--operator-key", default=os.environ.get(OPERATOR_KEY_ENV, ""),
                        help=f"the operator's key (mlxo_..., or ${OPERATOR_KEY_ENV}), which proves "
                        "--operator to the coordinator; its admin makes one with `mlxnet keys "
                        "create --operator NAME`. Without it the node is its own operator")
    parser.add_argument("--name", default="", help="display name shown in MLX World")
    parser.add_argument("--region", help="where MLX World's map shows this Mac: coordinates "
                        "(\"38.72, -9.13\") or a time zone or city (\"Europe/Lisbon\"); "
                        "default: node.toml's region")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                        help="identity key, node.toml, status and the reference model live here")
    parser.add_argument("--max-concurrent-jobs", type=int, default=1,
                        help="jobs this Mac runs at once, decoding together in one batch per model "
                             "(each adds its KV cache; the model's weights are loaded once)")
    parser.add_argument("--log-format", choices=("text", "json"), default=argparse.SUPPRESS,
                        help="text (default), or json: one JSON line per event with job, node "
                             "and request ids")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve this node's Prometheus metrics at http://HOST:PORT/metrics "
                             "(off unless given; 0 picks a free port)")
    parser.add_argument("--metrics-host", default="127.0.0.1",
                        help="address the metrics port listens on (default: loopback only)")
    parser.add_argument("--mode", choices=[m.value for m in LendingMode],
                        help="lending mode for this run (default: from node.toml, else idle)")
    parser.add_argument("--benchmark", choices=("auto", "on", "off"),
                        help="self-benchmark at join time and at intervals (auto: not for --profile)")
    node_cli.add_subcommands(parser)


def run(args: argparse.Namespace) -> int:
    from mlxnet import node_cli

    if getattr(args, "node_command", None):
        return node_cli.dispatch(args)
    try:
        config = load_config(args.data_dir / CONFIG_FILE_NAME)
    except ConfigError as error:
        log.error("%s", error)
        return 2
    coordinator = args.coordinator or config.coordinator
    model_flags = args.model or list(config.models)
    if not coordinator or not model_flags:
        log.error("give --coordinator and at least one --model (or set them with `mlxnet node "
                  "config --coordinator HOST:PORT --model PATH`); build a model with "
                  "`mlxnet model build-tiny DIR`")
        return 2
    identity = load_or_create_identity(args.data_dir / "identity.pem")
    hardware = (simulated_profile(args.profile) if args.profile
                else discover_host(device_info=device_info()))
    problem = _setup_problem(config, args, identity.node_id, hardware)
    if problem is not None:
        log.error("%s", problem)
        return 2
    models = _models(model_flags, config)
    if models is None:
        return 2
    trusts = coordinator_trusts(args, config, coordinator)
    if trusts is None:
        return 2
    settings = AgentSettings(
        coordinator=coordinator, identity=identity, hardware=hardware, models=tuple(models),
        operator_id=args.operator or config.operator or identity.node_id,
        display_name=args.name or config.name or identity.node_id,
        max_concurrent_jobs=args.max_concurrent_jobs, trust_by_address=trusts,
        on_first_use=lambda address, fingerprint: remember_coordinator(args.data_dir, address,
                                                                       fingerprint),
        region=args.region if args.region is not None else config.region,
        operator_key=args.operator_key)
    hooks = _hooks(args, config, settings)
    agent = NodeAgent(settings, Engine(), hooks)
    if args.metrics_port is not None:
        port = agent.metrics.serve(args.metrics_port, args.metrics_host)
        log.info("node metrics on http://%s:%d/metrics", args.metrics_host, port)
    hooks.monitor.on_change = lambda _state: agent.heartbeat_now()
    hooks.benchmark_ready = agent.heartbeat_now
    # SIGTERM (a service stop) stops at once: the coordinator hands running work back.
    # SIGUSR1 (`mlxnet node leave`) drains first: finish or hand back, deregister, stop.
    signal.signal(signal.SIGTERM, lambda *_: agent.stop())
    signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(
        target=drain_and_leave, args=(agent, hooks), daemon=True, name="leave").start())
    write_pid(args.data_dir / PID_FILE_NAME)
    threading.Thread(target=hooks.monitor.run, args=(agent.stopping,), daemon=True,
                     name="lending").start()
    threading.Thread(target=_announce_registration, args=(agent,), daemon=True).start()
    log.info("node %s starting: %s, %d GiB, %s lending, serving %s", identity.node_id,
             hardware.chip, hardware.memory_bytes >> 30, hooks.monitor.state.mode.value,
             ", ".join(spec.model_id for spec, _ in models))
    hop_trace.open_from_environment()
    tracing.start_from_environment("mlxnet-node")
    freeze_start_up_heap()
    code = 0
    try:
        agent.run()
    except KeyboardInterrupt:
        agent.stop()
    except CallRejected as refused:  # the coordinator refuses this node as it is: say why, stop
        log.error("the coordinator refused this node: %s", refused)
        agent.stop()
        code = 2
    (args.data_dir / PID_FILE_NAME).unlink(missing_ok=True)
    # MLX's and gRPC's native threads may still be winding down; tearing the interpreter
    # down under them can abort the process, so a finished agent exits here, cleanly.
    tracing.flush()
    logging.shutdown()
    sys.stdout.flush()
    os._exit(EXIT_UNTRUSTED if agent.untrusted is not None else code)


def coordinator_trusts(args: argparse.Namespace, config: NodeConfig,
                       coordinators: str) -> dict[str, CoordinatorTrust] | None:
    """coordinator_trust for each address of --coordinator; None: a bad flag (logged)."""
    try:
        addresses = parse_addresses(coordinators)
        given = parse_fingerprints(args.coordinator_fingerprint or "", addresses)
    except ValueError as error:
        log.error("%s", error)
        return None
    trusts = {}
    for address in addresses:
        trust = coordinator_trust(args, config, address, given.get(address, ""))
        if trust is None:
            return None
        trusts[address] = trust
    return trusts


def coordinator_trust(args: argparse.Namespace, config: NodeConfig, coordinator: str,
                      fingerprint: str = "") -> CoordinatorTrust | None:
    """--insecure, the fingerprint given for it, node.toml's pin, else CAs or first use;
    None: bad flag."""
    if args.insecure:
        host = coordinator.rpartition(":")[0].removeprefix("[").removesuffix("]")
        if not is_loopback(host):
            log.error("--insecure (plaintext) is only allowed to a coordinator on loopback, "
                      "not %s", coordinator)
            return None
        return CoordinatorTrust(insecure=True)
    pinned = config.fingerprint_for(coordinator)
    if fingerprint:
        given = normalize_fingerprint(fingerprint)
        if pinned and given != pinned:
            log.warning("--coordinator-fingerprint %s replaces the pin %s remembered for %s",
                        given, pinned, coordinator)
        if given != pinned:
            remember_coordinator(args.data_dir, coordinator, given)
        pinned = given
    return CoordinatorTrust(fingerprint=pinned, trust_on_first_use=not pinned)


def remember_coordinator(data_dir: Path, coordinator: str, fingerprint: str) -> None:
    """Pin the coordinator's fingerprint in node.toml, as SSH's known_hosts does."""
    path = data_dir / CONFIG_FILE_NAME
    save_config(path, load_config(path).knowing(coordinator, fingerprint))
    log.info("remembered the coordinator %s as %s in %s", coordinator, fingerprint, path)


def _setup_problem(config: NodeConfig, args: argparse.Namespace, node_id: str,
                   hardware: HardwareReport) -> str | None:
    """What in node.toml cannot work on this node, said so the operator can fix it before joining."""
    mode = LendingMode(args.mode) if args.mode else config.lending.mode
    if mode is LendingMode.ULTRA_SEAT and hardware.chip_tier is not ChipTier.ULTRA:
        return (f"mode ultra_seat needs an Ultra chip and this is {hardware.chip!r}; run "
                "`mlxnet node config --mode dedicated`")
    if config.pod is not None and config.pod.members[0] != node_id:
        return (f"[pod] members must start with this node, the pod's leader ({node_id}); "
                "only the leader declares a pod")
    return None


def _models(flags: list[str], config: NodeConfig) -> list[tuple[ModelSpec, Path]] | None:
    from node_agent.model_cache import ModelCache, ModelCacheError, is_hub_id

    cache = ModelCache(Path(config.cache.directory).expanduser(),
                       int(config.cache.quota_gb * 2**30))
    models: list[tuple[ModelSpec, Path]] = []
    for flag in flags:
        try:
            if is_hub_id(flag):
                directory = cache.fetch(flag, _log_progress())
                models.append((describe_model(flag, directory), directory))
                continue
            model_id, directory = parse_model_flag(flag)
            models.append((describe_model(model_id, directory), directory))
        except (ModelCacheError, OSError, ValueError) as error:
            log.error("cannot serve %s: %s", flag, error)
            return None
    return models


def _log_progress():  # type: ignore[no-untyped-def]
    """A download progress line in the log at every tenth (the agent runs without a terminal)."""
    reported = [-1]

    def progress(name: str, done: int, total: int) -> None:
        tenth = done * 10 // max(total, 1)
        if tenth != reported[0]:
            reported[0] = tenth
            log.info("downloading %s: %d%% of %.1f MiB", name, tenth * 10, total / 2**20)
    return progress


def _hooks(args: argparse.Namespace, config: NodeConfig, settings: AgentSettings) -> OperatorHooks:
    lending = config.lending
    if args.mode:
        lending = dataclasses.replace(lending, mode=LendingMode(args.mode))
    source = (file_activity_source(Path(lending.activity_file).expanduser())
              if lending.activity_file else host_activity_source())
    monitor = LendingMonitor(lending, source, config.memory_cap_bytes)
    enabled = args.benchmark or config.benchmark.enabled
    benchmark, challenge = None, None
    if enabled == "on" or (enabled == "auto" and not settings.hardware.simulated):
        benchmark = _benchmark_runner(args.data_dir / "reference-model", args.max_concurrent_jobs)
        challenge = _challenge_runner(args.data_dir / "reference-model", settings.identity.node_id)
    pod, pod_runner = None, None
    if config.pod is not None:
        from node_agent.pods.runner import pod_declaration, pod_job_runner

        pod = pod_declaration(config.pod, settings.identity.node_id)
        pod_runner = pod_job_runner(config.pod, {spec.model_id: path for spec, path in settings.models},
                                    args.data_dir / "pod-runs")
    return OperatorHooks(settings.identity.node_id, settings.coordinator, monitor,
                         args.data_dir / STATUS_FILE_NAME, benchmark,
                         config.benchmark.interval_minutes * 60, pod, pod_runner, challenge)


def _benchmark_runner(reference_dir: Path, slots: int):  # type: ignore[no-untyped-def]
    def run_once():  # type: ignore[no-untyped-def]
        from node_agent.inference.benchmark import run_benchmark
        from node_agent.tiny_model import build_tiny_model

        if not (reference_dir / "config.json").exists():
            build_tiny_model(reference_dir)  # the same bytes on every node: a fair yardstick
        return run_benchmark(reference_dir, REFERENCE_MODEL_ID, slots=slots)  # batches up to its slots
    return run_once


def _challenge_runner(reference_dir: Path, node_id: NodeId):  # type: ignore[no-untyped-def]
    engine = Engine()  # its own, so the reference model stays warm between challenges

    def run(challenge: Challenge):  # type: ignore[no-untyped-def]
        from node_agent.inference.benchmark import run_challenge

        model = describe_model(REFERENCE_MODEL_ID, reference_dir)  # built by the benchmark first
        return run_challenge(engine, model, reference_dir, node_id, challenge)
    return run


def drain_and_leave(agent: NodeAgent, hooks: OperatorHooks) -> None:
    """Stop taking work, let the running job finish or hand it back within the bound, deregister, exit."""
    hooks.monitor.leave()  # the heartbeat this triggers tells the coordinator at once
    bound_s = hooks.monitor.config.handback_after_s
    if not hooks.wait_until_no_job(bound_s + 30.0):
        log.warning("a job is still running %.0fs after leaving began; leaving anyway", bound_s + 30)
    handed_back = agent.leave()
    log.info("left the network; the coordinator handed back %s job(s)", handed_back)
    sys.stdout.write(f"node {agent.settings.identity.node_id} left\n")
    sys.stdout.flush()
    agent.stop()


def _announce_registration(agent: NodeAgent) -> None:
    """One line on stdout once the node has joined, for scripts that wait on it."""
    agent.registered.wait()
    sys.stdout.write(f"node {agent.settings.identity.node_id} registered\n")
    sys.stdout.flush()
