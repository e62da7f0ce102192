"""`mlxnet node <command>`: the operator's tools around a node agent.

    mlxnet node config [--mode idle ...]   show or change node.toml
    mlxnet node status                     mode, current job, earnings today, why (not) working
    mlxnet node leave                      drain: finish or hand back work, deregister, stop
    mlxnet node install-service            write a launchd plist (macOS) or systemd unit (Linux)
    mlxnet node hardware                   what this machine reports, as JSON
    mlxnet node pod propose FILE...        a [pod] section from the members' `hardware` JSON
    mlxnet node models fetch|list          the model cache
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import signal
import sys
import time
from pathlib import Path

from contracts.lending import LendingMode
from node_agent.lending.config import (
    CONFIG_FILE_NAME, ConfigError, NodeConfig, dump_config, load_config, save_config,
)
from node_agent.status_file import (
    PID_FILE_NAME, STATUS_FILE_NAME, format_mlx, read_status, running_agent_pid,
)

log = logging.getLogger(__name__)

LEAVE_TIMEOUT_S_DEFAULT = 120.0


def _data_dir_flag(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS keeps `mlxnet node --data-dir D <command>` working as well.
    parser.add_argument("--data-dir", type=Path, default=argparse.SUPPRESS,
                        help="the node's data directory (default ~/.mlxnet/node)")


def add_subcommands(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="node_command", required=False, metavar="COMMAND")
    config = commands.add_parser("config", help="show or change the lending settings (node.toml)")
    _data_dir_flag(config)
    config.add_argument("--coordinator")
    config.add_argument("--operator")
    config.add_argument("--name")
    config.add_argument("--region", help="where MLX World's map shows this Mac: coordinates "
                        "(\"38.72, -9.13\") or a time zone or city (\"Europe/Lisbon\"); \"\" clears it")
    config.add_argument("--model", action="append", help="serve this model (replaces the list)")
    config.add_argument("--mode", choices=[m.value for m in LendingMode])
    config.add_argument("--idle-minutes", type=float)
    config.add_argument("--require-ac-power", action=argparse.BooleanOptionalAction, default=None)
    config.add_argument("--pause-when-throttled", action=argparse.BooleanOptionalAction, default=None)
    config.add_argument("--schedule", action="append", metavar="'DAYS HH:MM-HH:MM'",
                        help="a lending window, e.g. 'Mon-Fri 22:00-07:00' (repeatable; replaces)")
    config.add_argument("--any-time", action="store_true", help="remove every schedule window")
    config.add_argument("--memory-cap-gb", type=float, help="0 removes the cap")
    config.add_argument("--handback-after-s", type=float,
                        help="when the owner returns: finish within this or hand the job back")
    config.add_argument("--benchmark", choices=("auto", "on", "off"))
    config.add_argument("--benchmark-interval-minutes", type=float)
    config.add_argument("--cache-dir")
    config.add_argument("--cache-quota-gb", type=float)
    for name, help_text in (("status", "mode, current job, earnings today, and why"),
                            ("leave", "finish or hand back running work, deregister and stop"),
                            ("hardware", "print this machine's hardware report as JSON")):
        sub = commands.add_parser(name, help=help_text)
        _data_dir_flag(sub)
    commands.choices["leave"].add_argument("--timeout-s", type=float, default=LEAVE_TIMEOUT_S_DEFAULT)
    commands.choices["hardware"].add_argument("--profile", help="a simulated profile instead")
    service = commands.add_parser("install-service", help="run the agent at login or boot")
    _data_dir_flag(service)
    service.add_argument("--system", action="store_true",
                         help="macOS: a LaunchDaemon that runs at boot (dedicated seats)")
    service.add_argument("--print", action="store_true", help="print the file instead of writing it")
    service.add_argument("--platform", choices=("macos", "linux"), help="default: this machine's")
    pod = commands.add_parser("pod", help="pods of cabled Macs")
    pod_commands = pod.add_subparsers(dest="pod_command", required=True)
    propose = pod_commands.add_parser("propose", help="a [pod] section from the members' "
                                      "`mlxnet node hardware` JSON files")
    propose.add_argument("files", nargs="+", type=Path, metavar="HARDWARE_JSON")
    propose.add_argument("--pod-id", default="desk-pod")
    models = commands.add_parser("models", help="the model cache")
    _data_dir_flag(models)
    model_commands = models.add_subparsers(dest="models_command", required=True)
    fetch = model_commands.add_parser("fetch", help="download a model by hub id (resumes)")
    fetch.add_argument("hub_id")
    model_commands.add_parser("list", help="cached models, least recently used first")


def dispatch(args: argparse.Namespace) -> int:
    handlers = {"config": _config, "status": _status, "leave": _leave, "hardware": _hardware,
                "install-service": _install_service, "pod": _pod, "models": _models}
    try:
        return handlers[args.node_command](args)
    except ConfigError as error:
        log.error("%s", error)
        return 2


# --- config ------------------------------------------------------------------

def _config(args: argparse.Namespace) -> int:
    path = args.data_dir / CONFIG_FILE_NAME
    config = load_config(path)
    changed = _apply_flags(config, args)
    if changed != config or not path.exists():
        save_config(path, changed)
        log.info("wrote %s; restart the agent to apply it", path)
    sys.stdout.write(dump_config(changed))
    return 0


def _apply_flags(config: NodeConfig, args: argparse.Namespace) -> NodeConfig:
    top = {key: value for key, value in (("coordinator", args.coordinator), ("operator", args.operator),
                                         ("name", args.name), ("region", args.region))
           if value is not None}
    if args.model:
        top["models"] = tuple(args.model)
    lending = {key: value for key, value in (
        ("idle_minutes", args.idle_minutes), ("require_ac_power", args.require_ac_power),
        ("pause_when_throttled", args.pause_when_throttled), ("memory_cap_gb", args.memory_cap_gb),
        ("handback_after_s", args.handback_after_s)) if value is not None}
    if args.mode:
        lending["mode"] = LendingMode(args.mode)
    if args.any_time or args.schedule:
        lending["schedule"] = tuple(args.schedule or ())
    benchmark = {key: value for key, value in (("enabled", args.benchmark),
                                               ("interval_minutes", args.benchmark_interval_minutes))
                 if value is not None}
    cache = {key: value for key, value in (("directory", args.cache_dir), ("quota_gb", args.cache_quota_gb))
             if value is not None}
    return dataclasses.replace(
        config, **top, lending=dataclasses.replace(config.lending, **lending),
        benchmark=dataclasses.replace(config.benchmark, **benchmark),
        cache=dataclasses.replace(config.cache, **cache))


# --- status and leave ------------------------------------------------------------

def _status(args: argparse.Namespace) -> int:
    pid = running_agent_pid(args.data_dir / PID_FILE_NAME)
    report = read_status(args.data_dir / STATUS_FILE_NAME)
    config = load_config(args.data_dir / CONFIG_FILE_NAME)
    lines = [f"agent:        {'running (pid %d)' % pid if pid else 'not running'}"]
    if report is None:
        lines.append(f"mode:         {config.lending.mode.value} (from {CONFIG_FILE_NAME}; "
                     "the agent has not reported yet)")
    else:
        working = "yes" if report.accepting_jobs else f"no: {report.reason}"
        lines += [f"node:         {report.node_id} -> {report.coordinator}",
                  f"mode:         {report.mode}",
                  f"taking work:  {working if pid else 'no: the agent is not running'}",
                  f"current job:  {report.current_job or 'none'}",
                  f"today:        {format_mlx(report.earned_today_base_units)} earned from "
                  f"{report.jobs_today} job(s); {report.unfinished_today} handed back or failed"]
        if report.benchmark:
            bench = report.benchmark
            lines.append(f"benchmark:    {bench['memory_bandwidth_gb_s']} GB/s, decode "
                         f"{bench['decode_tokens_per_s']} tok/s, prefill "
                         f"{bench['prefill_tokens_per_s']} tok/s")
        age_s = (time.time_ns() // 1_000_000 - report.updated_at_ms) / 1000
        lines.append(f"updated:      {age_s:.0f}s ago")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _leave(args: argparse.Namespace) -> int:
    """Ask the running agent to drain and deregister (SIGUSR1), and wait until it has exited."""
    pid = running_agent_pid(args.data_dir / PID_FILE_NAME)
    if pid is None:
        log.error("no agent is running for %s; nothing to drain", args.data_dir)
        return 1
    os.kill(pid, signal.SIGUSR1)
    sys.stdout.write(f"asked agent {pid} to leave; waiting up to {args.timeout_s:.0f}s\n")
    deadline = time.monotonic() + args.timeout_s
    while time.monotonic() < deadline:  # the agent is another process: nothing to wait on but its pid
        if running_agent_pid(args.data_dir / PID_FILE_NAME) is None:
            sys.stdout.write("the node has left the network\n")
            return 0
        time.sleep(0.5)
    log.error("agent %d is still running after %.0fs; see its log", pid, args.timeout_s)
    return 1


# --- hardware, pods, models, services ----------------------------------------------

def _hardware(args: argparse.Namespace) -> int:
    """This node's id, host name and hardware: the input `pod propose` reads from each member."""
    from node_agent.hardware.discover import discover_host, simulated_profile
    from node_agent.identity import load_or_create_identity

    if args.profile:
        hardware = simulated_profile(args.profile)
    else:
        from node_agent.inference.engine import device_info

        hardware = discover_host(device_info=device_info())
    identity = load_or_create_identity(args.data_dir / "identity.pem")
    report = {"node_id": identity.node_id, "hostname": platform.node(),
              "hardware": dataclasses.asdict(hardware)}
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    return 0


def _pod(args: argparse.Namespace) -> int:
    from node_agent.pods.proposal import PodProposalError, propose_pod_config

    try:
        reports = [json.loads(path.read_text(encoding="utf-8")) for path in args.files]
        config = propose_pod_config(args.pod_id, reports)
    except (OSError, ValueError, PodProposalError) as error:
        log.error("cannot propose a pod: %s", error)
        return 2
    text = dump_config(dataclasses.replace(NodeConfig(), pod=config))
    sys.stdout.write(text[text.index("[pod]"):])
    return 0


def _models(args: argparse.Namespace) -> int:
    from node_agent.model_cache import ModelCache, ModelCacheError

    config = load_config(args.data_dir / CONFIG_FILE_NAME).cache
    cache = ModelCache(Path(config.directory).expanduser(), int(config.quota_gb * 2**30))
    if args.models_command == "list":
        for model in cache.models():
            sys.stdout.write(f"{model.hub_id}\t{model.revision[:12]}\t{model.size_bytes / 2**30:.2f} GiB"
                             f"\t{model.directory}\n")
        return 0
    from tqdm import tqdm

    with tqdm(unit="B", unit_scale=True, desc=args.hub_id, file=sys.stderr) as bar:
        def progress(_name: str, done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)
        try:
            directory = cache.fetch(args.hub_id, progress)
        except ModelCacheError as error:
            log.error("%s", error)
            return 1
    sys.stdout.write(f"{directory}\n")
    return 0


def _install_service(args: argparse.Namespace) -> int:
    from node_agent import service_files

    config = load_config(args.data_dir / CONFIG_FILE_NAME)
    spec = service_files.ServiceSpec(python=Path(sys.executable), data_dir=args.data_dir.resolve(),
                                     home=Path.home(), handback_after_s=config.lending.handback_after_s,
                                     user=os.environ.get("USER", ""))
    target = args.platform or ("macos" if platform.system() == "Darwin" else "linux")
    if target == "macos":
        text, path = service_files.launchd_plist(spec, args.system), service_files.launchd_plist_path(spec, args.system)
        next_step = service_files.launchd_load_command(spec, args.system)
        if not args.print:  # launchd does not create the folders of its log paths
            service_files.launchd_log_dir(spec).mkdir(parents=True, exist_ok=True)
    else:
        text, path = service_files.systemd_unit(spec), service_files.systemd_unit_path(spec)
        next_step = service_files.systemd_enable_command()
    if args.print:
        sys.stdout.write(text)
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    sys.stdout.write(f"wrote {path}\nstart it with: {next_step}\n")
    return 0
