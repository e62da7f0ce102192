"""`mlxnet node`: turns command-line flags into a running node agent."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from contracts.models import ModelSpec
from node_agent.agent import AgentSettings, NodeAgent
from node_agent.hardware.discover import discover_host, simulated_profile
from node_agent.identity import load_or_create_identity
from node_agent.inference.engine import Engine, device_info
from node_agent.model_files import describe_model

log = logging.getLogger(__name__)


def parse_model_flag(value: str) -> tuple[str, Path]:
    """`ID=PATH` serves PATH under ID; a bare PATH is served under its absolute path."""
    model_id, _, path = value.rpartition("=")
    directory = Path(path).expanduser().resolve()
    return (model_id or str(directory)), directory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--coordinator", required=True, help="coordinator HOST:PORT")
    parser.add_argument("--model", action="append", default=[], metavar="[ID=]PATH",
                        help="a local MLX model directory to serve (repeatable)")
    parser.add_argument("--profile", help="declare a simulated Mac, e.g. m3-ultra-512 "
                        "(for demos and tests; the coordinator marks the node simulated)")
    parser.add_argument("--operator", help="operator account credited for this node's work "
                        "(default: the node id)")
    parser.add_argument("--name", default="", help="display name shown in MLX World")
    parser.add_argument("--data-dir", type=Path, default=Path("~/.mlxnet/node").expanduser(),
                        help="where the node's identity key lives")
    parser.add_argument("--max-concurrent-jobs", type=int, default=1)


def run(args: argparse.Namespace) -> int:
    if not args.model:
        log.error("no --model given: serve at least one model directory "
                  "(build one with `mlxnet model build-tiny DIR`)")
        return 2
    identity = load_or_create_identity(args.data_dir / "identity.pem")
    hardware = (simulated_profile(args.profile) if args.profile
                else discover_host(device_info=device_info()))
    models: list[tuple[ModelSpec, Path]] = []
    for flag in args.model:
        model_id, directory = parse_model_flag(flag)
        models.append((describe_model(model_id, directory), directory))
    settings = AgentSettings(
        coordinator=args.coordinator, identity=identity, hardware=hardware,
        models=tuple(models), operator_id=args.operator or identity.node_id,
        display_name=args.name or identity.node_id, max_concurrent_jobs=args.max_concurrent_jobs)
    agent = NodeAgent(settings, Engine())
    signal.signal(signal.SIGTERM, lambda *_: agent.stop())
    threading.Thread(target=_announce_registration, args=(agent,), daemon=True).start()
    log.info("node %s starting: %s, %d GiB, serving %s", identity.node_id, hardware.chip,
             hardware.memory_bytes >> 30, ", ".join(spec.model_id for spec, _ in models))
    try:
        agent.run()
    except KeyboardInterrupt:
        agent.stop()
    return 0


def _announce_registration(agent: NodeAgent) -> None:
    """One line on stdout once the node has joined, for scripts that wait on it."""
    agent.registered.wait()
    sys.stdout.write(f"node {agent.settings.identity.node_id} registered\n")
    sys.stdout.flush()
