"""`mlxnet`: one command for every part of MLX Network.

    mlxnet coordinator            run the coordinator (gRPC, and the HTTP API)
    mlxnet keys create|revoke|deposit|list   API keys and prepaid balances
    mlxnet node --coordinator A   lend this Mac: run a node agent
    mlxnet submit ...             submit a job and stream its tokens
    mlxnet jobs get|explain JOB   a job's status, or why it went where it did
    mlxnet checks --job J|--node N   why a job was or was not paid; a node's trust record
    mlxnet place --dry-run ...    where a job would go now, and why
    mlxnet db upgrade             apply database migrations
    mlxnet model build-tiny DIR   build the project's small test model
    mlxnet demo                   the whole network on this machine, end to end
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

from mlxnet import log_format, log_lines, tracing

DATABASE_URL_ENV = "MLXNET_DATABASE_URL"
log = logging.getLogger("mlxnet")


def _database_url(args: argparse.Namespace) -> str:
    from coordinator.storage.database import default_sqlite_url, make_private_dir

    if args.database_url:
        return args.database_url
    if os.environ.get(DATABASE_URL_ENV):
        return os.environ[DATABASE_URL_ENV]
    make_private_dir(args.data_dir)
    return default_sqlite_url(args.data_dir)


def _add_database_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", help=f"any SQLAlchemy URL (or ${DATABASE_URL_ENV}); "
                        "default: SQLite in --data-dir")
    parser.add_argument("--data-dir", type=Path, default=Path("~/.mlxnet/coordinator").expanduser())


def _registration_limits(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from coordinator.config import RegistrationLimits

    defaults = RegistrationLimits()
    return RegistrationLimits(
        per_address_burst=args.registrations_per_address_burst or defaults.per_address_burst,
        per_address_per_minute=(args.registrations_per_address_per_minute
                                or defaults.per_address_per_minute),
        per_operator_burst=args.registrations_per_operator_burst or defaults.per_operator_burst,
        per_operator_per_minute=(args.registrations_per_operator_per_minute
                                 or defaults.per_operator_per_minute))


def _peer_checks(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from coordinator.verification.peers import PeerCheckPolicy

    if args.peer_pair_cooldown_s is None:
        return PeerCheckPolicy()
    if args.peer_pair_cooldown_s < 0:
        raise SystemExit("--peer-pair-cooldown-s must be 0 or more seconds")
    return PeerCheckPolicy(pair_cooldown_ms=int(args.peer_pair_cooldown_s * 1000))


def _add_chain_flags(parser: argparse.ArgumentParser) -> None:
    """Where epoch roots are anchored (ledger.chain_settings checks them before the coordinator starts)."""
    from ledger.api import CONFIRMATIONS_MAX, KEYSTORE_PASSWORD_ENV_DEFAULT, PUBLISHER_KEY_ENV_DEFAULT

    chain = parser.add_argument_group("payout chain", "default: the coordinator's own anvil in --data-dir")
    chain.add_argument("--chain-rpc-url", default=os.environ.get("MLXNET_PAYOUT_RPC_URL"), metavar="URL",
                       help="a real network's JSON-RPC URL (or $MLXNET_PAYOUT_RPC_URL)")
    chain.add_argument("--chain-id", default=os.environ.get("MLXNET_PAYOUT_CHAIN_ID"), metavar="N",
                       help="the chain id that URL must report, e.g. 8453 for Base (or $MLXNET_PAYOUT_CHAIN_ID)")
    chain.add_argument("--chain-distributor", default=os.environ.get("MLXNET_PAYOUT_DISTRIBUTOR"), metavar="0x…",
                       help="the payout distributor's address on that network (or $MLXNET_PAYOUT_DISTRIBUTOR)")
    chain.add_argument("--chain-key-env", metavar="NAME",
                       help=f"the environment variable holding the publisher's key (default {PUBLISHER_KEY_ENV_DEFAULT})")
    chain.add_argument("--chain-keystore", metavar="FILE",
                       help="an encrypted keystore file with the publisher's key instead")
    chain.add_argument("--chain-keystore-password-env", metavar="NAME",
                       help=f"the variable holding the keystore's password (default {KEYSTORE_PASSWORD_ENV_DEFAULT})")
    chain.add_argument("--chain-confirmations", default=os.environ.get("MLXNET_PAYOUT_CONFIRMATIONS"), metavar="N",
                       help=f"blocks an anchor waits for before it counts, 1 to {CONFIRMATIONS_MAX} (default 1)")
    chain.add_argument("--chain-max-fee-gwei", metavar="GWEI",
                       help="the most paid per gas for an anchor; while the base fee is above it, anchoring waits")
    chain.add_argument("--chain-priority-fee-gwei", metavar="GWEI", help="the most tipped per gas")


def _chain_settings(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """(settings, publisher key) from the flags; ChainSettingsError names the first bad one."""
    from ledger.api import chain_settings, publisher_key

    settings = chain_settings(
        rpc_url=args.chain_rpc_url, chain_id=args.chain_id, distributor=args.chain_distributor,
        confirmations=args.chain_confirmations, max_fee_gwei=args.chain_max_fee_gwei,
        priority_fee_gwei=args.chain_priority_fee_gwei, key_env=args.chain_key_env, keystore=args.chain_keystore,
        keystore_password_env=args.chain_keystore_password_env)
    return settings, publisher_key(settings)


def _coordinator(args: argparse.Namespace) -> int:
    from contracts import hop_trace
    from contracts.tls import TransportRefused
    from coordinator.config import CoordinatorConfig
    from coordinator.server import start
    from coordinator.tls import TlsSetupError
    from mlxnet.coordinator_tls import server_tls
    from mlxnet.heap import freeze_start_up_heap
    from mlxnet.verifier import child_checker, verified_specs
    from mlxnet.ledger_cli import LEDGER_KEY_FILE

    from ledger.api import ChainSettingsError

    hop_trace.open_from_environment()
    tracing.start_from_environment("mlxnet-coordinator")
    try:
        tls = server_tls(args)
        chain, key = _chain_settings(args)
    except (TransportRefused, TlsSetupError, ChainSettingsError) as error:
        log.error("%s", error)
        return 2
    config = CoordinatorConfig(database_url=_database_url(args),
                               heartbeat_interval_ms=args.heartbeat_interval_ms,
                               node_offline_after_ms=5 * args.heartbeat_interval_ms,
                               allow_anonymous=args.allow_anonymous,
                               trust_simulated_hardware=args.trust_simulated_hardware,
                               ledger_key_path=args.data_dir / LEDGER_KEY_FILE,
                               chain_dir=args.data_dir / "anvil", chain=chain,
                               registration_limits=_registration_limits(args),
                               peer_checks=_peer_checks(args),
                               challenge_mean_interval_s=args.challenge_mean_interval_s,
                               challenge_pass_interval_s=min(10.0, args.challenge_mean_interval_s))
    verified = verified_specs(args.verify_model)
    try:
        running = start(config, args.host, args.port, http_port=args.http_port,
                        checker=child_checker(verified, args.data_dir / "reference-model"),
                        pinned_models=tuple(spec for _, spec in verified.values()), tls=tls, publisher_key=key)
    except ChainSettingsError as error:
        log.error("%s", error)
        return 2
    freeze_start_up_heap()
    if args.port_file:
        args.port_file.write_text(f"{running.port}\n")
    sys.stdout.write(f"coordinator listening on {args.host}:{running.port}\n")
    assert running.gateway is not None
    sys.stdout.write(f"gateway listening on {args.host}:{running.gateway.port}\n")
    # The third line: `coordinator certificate FINGERPRINT PATH`, or `... none` in plaintext.
    sys.stdout.write(f"coordinator certificate {tls.fingerprint} {tls.cert_path}\n" if tls
                     else "coordinator certificate none (plaintext on loopback)\n")
    sys.stdout.flush()
    signal.signal(signal.SIGTERM, lambda *_: running.server.stop(2))
    try:
        running.server.wait_for_termination()
    except KeyboardInterrupt:
        pass
    running.stop()
    return 0


def _db_upgrade(args: argparse.Namespace) -> int:
    from coordinator.storage.database import upgrade_schema

    upgrade_schema(_database_url(args))
    return 0


def _build_tiny(args: argparse.Namespace) -> int:
    from node_agent.tiny_model import build_tiny_model

    path = build_tiny_model(args.directory, architecture=args.architecture, seed=args.seed)
    sys.stdout.write(f"built {args.architecture} model in {path}\n")
    return 0


def _node(args: argparse.Namespace) -> int:
    from mlxnet.node_main import run

    return run(args)


def _submit(args: argparse.Namespace) -> int:
    from mlxnet.submit import run

    return run(args)


def _demo(args: argparse.Namespace) -> int:
    from mlxnet.demo import run

    return run(args)


def add_log_format_flag(parser: argparse.ArgumentParser, default: object = argparse.SUPPRESS) -> None:
    """--log-format, before or after the command (a command's own leaves the top one alone)."""
    parser.add_argument("--log-format", choices=log_format.FORMATS, default=default,
                        help="text (default), or json: one JSON line per event with job, node "
                             "and request ids")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlxnet", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    add_log_format_flag(parser, "text")
    commands = parser.add_subparsers(dest="command", required=True)

    coordinator = commands.add_parser("coordinator", help="run the coordinator")
    add_log_format_flag(coordinator)
    coordinator.add_argument("--host", default="127.0.0.1")
    coordinator.add_argument("--port", type=int, default=50051, help="0 picks a free port")
    coordinator.add_argument("--port-file", type=Path, help="write the bound port here")
    coordinator.add_argument("--heartbeat-interval-ms", type=int, default=2000)
    coordinator.add_argument("--http-port", type=int, default=8080,
                             help="the OpenAI-compatible HTTP API's port; 0 picks a free port")
    coordinator.add_argument("--registrations-per-address-burst", type=int, metavar="N",
                             help="registrations one address may make at once (default 60; a lab "
                             "behind one NAT needs one per Mac); then the per-minute rate")
    coordinator.add_argument("--registrations-per-address-per-minute", type=int, metavar="N",
                             help="registrations one address may make a minute after its burst (default 30)")
    coordinator.add_argument("--registrations-per-operator-burst", type=int, metavar="N",
                             help="registrations one operator's nodes may make at once (default 200; "
                             "a farm of Macs joining together needs one per Mac); then the per-minute rate")
    coordinator.add_argument("--registrations-per-operator-per-minute", type=int, metavar="N",
                             help="registrations one operator's nodes may make a minute after its "
                             "burst (default 60)")
    coordinator.add_argument("--challenge-mean-interval-s", type=_positive_seconds, default=6 * 3600.0,
                             metavar="S", help="how often, on average, each verified Mac gets a challenge "
                             "benchmark at a random time (default 6 h)")
    coordinator.add_argument("--trust-simulated-hardware", action="store_true",
                             help="demos only: place nodes declaring a simulated Mac (--profile) by "
                             "the chip they declare; other claims wait for a benchmark that fits")
    coordinator.add_argument("--tls-cert", type=Path, help="the certificate chain (PEM), e.g. "
                             "from an ACME client; default: a self-signed one kept in --data-dir")
    coordinator.add_argument("--tls-key", type=Path, help="the certificate's private key (PEM)")
    coordinator.add_argument("--insecure", action="store_true",
                             help="plaintext gRPC and HTTP, allowed only on a loopback --host")
    coordinator.add_argument("--allow-anonymous", action="store_true",
                             help="accept consumers without an API key (the network pays)")
    coordinator.add_argument("--verify-model", action="append", default=[], metavar="[ID=]PATH",
                             help="replay sampled jobs of this model with a verifier worker "
                                  "(repeatable); without it, nodes of other operators that serve "
                                  "the same weights check them (checks by peers)")
    coordinator.add_argument("--peer-pair-cooldown-s", type=float, metavar="S",
                             help="checks by peers: a node and its last checker are not paired "
                             "again for this long (default 600); a smaller fleet waits less")
    _add_chain_flags(coordinator)
    _add_database_flags(coordinator)
    coordinator.set_defaults(handler=_coordinator)

    from mlxnet import node_main, submit

    node = commands.add_parser("node", help="run a node agent that lends this machine")
    node_main.add_arguments(node)
    node.set_defaults(handler=_node)

    submit_parser = commands.add_parser("submit", help="submit a job and stream its tokens")
    submit.add_arguments(submit_parser)
    submit_parser.set_defaults(handler=_submit)

    database = commands.add_parser("db", help="database maintenance")
    db_commands = database.add_subparsers(dest="db_command", required=True)
    upgrade = db_commands.add_parser("upgrade", help="apply every pending migration")
    _add_database_flags(upgrade)
    upgrade.set_defaults(handler=_db_upgrade)

    model = commands.add_parser("model", help="model utilities")
    model_commands = model.add_subparsers(dest="model_command", required=True)
    tiny = model_commands.add_parser("build-tiny", help="write the project's small test model")
    tiny.add_argument("directory", type=Path)
    tiny.add_argument("--architecture", choices=("llama", "qwen2"), default="llama")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.set_defaults(handler=_build_tiny)

    from mlxnet import checks_view, jobs_cli, keys_cli, ledger_cli

    checks_view.add_subcommands(commands)
    jobs_cli.add_subcommands(commands)
    keys_cli.add_subcommands(commands)
    ledger_cli.add_subcommands(commands)

    demo = commands.add_parser("demo", help="run a coordinator, three nodes and a few jobs")
    demo.add_argument("--work-dir", type=Path, help="keep the demo's files here")
    demo.set_defaults(handler=_demo)
    return parser


def _positive_seconds(text: str) -> float:
    value = float(text) if text.replace(".", "", 1).isdigit() else 0.0
    if not 0 < value < 1e9:
        raise argparse.ArgumentTypeError(f"{text[:32]!r} is not a positive number of seconds")
    return value


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(log_format.formatter(args.log_format))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, handlers=[handler])
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    log_lines.install()  # request values in log messages are escaped and truncated
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
