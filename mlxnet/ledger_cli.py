"""`mlxnet ledger ...`: audit the ledger, print an operator's statement, verify a payout proof on chain.

    mlxnet ledger audit [--rpc-url URL --distributor ADDR] [--coordinator-key HEX ...] [--statement FILE ...]
    mlxnet ledger statement --operator X [--epoch N] [--json | --signed]
    mlxnet ledger key
    mlxnet ledger verify-proof --proof FILE --rpc-url URL --distributor ADDR
    mlxnet ledger claim --proof FILE --rpc-url URL --distributor ADDR   (sends from $MLXNET_CLAIM_KEY)
    mlxnet ledger chain                  the coordinator's own anvil: its RPC URL and contract addresses
    mlxnet ledger deploy --rpc-url URL --chain-id N [--key-env NAME | --keystore FILE]   once, on a real network
    mlxnet ledger close-epoch [--rpc-url URL --distributor ADDR]
    mlxnet ledger set-payout-address --operator X --address 0x...

audit, statement, close-epoch and set-payout-address read the coordinator's database
(--database-url or $MLXNET_DATABASE_URL); verify-proof needs only the proof and a chain.
The coordinator's ledger key (--data-dir/ledger_key.pem) signs each closed epoch's journal
head and `statement --signed`; `key` prints its public half, which the audit trusts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

EXIT_DIFFERENCES = 1
EXIT_USAGE = 2
DATABASE_URL_ENV = "MLXNET_DATABASE_URL"
LEDGER_KEY_FILE = "ledger_key.pem"  # in the coordinator's --data-dir
CLAIM_KEY_ENV = "MLXNET_CLAIM_KEY"  # the payout address's private key (hex); without it, the node's first account


def add_subcommands(commands: argparse._SubParsersAction) -> None:
    ledger = commands.add_parser("ledger", help="audit the MLX ledger, statements and payout proofs")
    sub = ledger.add_subparsers(dest="ledger_command", required=True)
    audit = sub.add_parser("audit", help="check the hash chain, balances, epochs, credits and anchored roots")
    _database_flags(audit)
    _chain_flags(audit, required=False)
    audit.add_argument("--coordinator-key", action="append", default=[], metavar="HEX",
                       help="a trusted coordinator public key (`mlxnet ledger key`); repeatable; default: "
                            "the key in --data-dir, if there is one")
    audit.add_argument("--statement", action="append", default=[], type=Path, metavar="FILE",
                       help="a signed statement an operator kept (`statement --signed`); repeatable")
    audit.set_defaults(handler=_audit)
    statement = sub.add_parser("statement", help="an operator's transfers, seat bonus, payout and proof")
    _database_flags(statement)
    statement.add_argument("--operator", required=True, help="the operator id (as given to `mlxnet node`)")
    statement.add_argument("--epoch", type=int, help="a closed epoch; default: the open one")
    statement.add_argument("--json", action="store_true", help="machine-readable, with the proof bundle")
    statement.add_argument("--signed", action="store_true",
                           help="the statement signed by the coordinator's key, naming the journal head: keep it")
    statement.set_defaults(handler=_statement)
    key = sub.add_parser("key", help="print the coordinator's ledger public key (created on first use)")
    key.add_argument("--data-dir", type=Path, default=Path("~/.mlxnet/coordinator").expanduser())
    key.set_defaults(handler=_key)
    verify = sub.add_parser("verify-proof", help="check a payout proof against the root on chain")
    verify.add_argument("--proof", type=Path, required=True,
                        help="a proof bundle (statement --json's `proof`, or the whole statement); - for stdin")
    _chain_flags(verify, required=True)
    verify.set_defaults(handler=_verify_proof)
    claim = sub.add_parser("claim", help="claim a payout on chain with its proof (MLX tokens to the leaf's address)")
    claim.add_argument("--proof", type=Path, required=True, help="a proof bundle, or the whole statement; - for stdin")
    _chain_flags(claim, required=True)
    claim.set_defaults(handler=_claim)
    chain = sub.add_parser("chain", help="where the coordinator's own anvil chain listens, and its contracts")
    chain.add_argument("--data-dir", type=Path, default=Path("~/.mlxnet/coordinator").expanduser())
    chain.set_defaults(handler=_chain_info)
    deploy = sub.add_parser("deploy", help="deploy the MLX token and the payout distributor on a real network, once")
    deploy.add_argument("--rpc-url", required=True, help="the network's JSON-RPC URL")
    deploy.add_argument("--chain-id", required=True, help="the chain id that URL must report")
    deploy.add_argument("--key-env", help="the variable holding the publisher's key (default "
                        "MLXNET_PAYOUT_PUBLISHER_KEY); this account alone may publish roots")
    deploy.add_argument("--keystore", help="an encrypted keystore file with the publisher's key instead")
    deploy.add_argument("--keystore-password-env", help="the variable holding its password "
                        "(default MLXNET_PAYOUT_KEYSTORE_PASSWORD)")
    deploy.set_defaults(handler=_deploy)
    close = sub.add_parser("close-epoch", help="close the latest finished epoch and anchor its root")
    _database_flags(close)
    _chain_flags(close, required=False)
    close.set_defaults(handler=_close_epoch)
    address = sub.add_parser("set-payout-address", help="where an operator's epoch payouts are claimable")
    _database_flags(address)
    address.add_argument("--operator", required=True)
    address.add_argument("--address", required=True, help="an Ethereum address, 0x + 40 hex digits")
    address.set_defaults(handler=_set_payout_address)


def _database_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", help=f"any SQLAlchemy URL (or ${DATABASE_URL_ENV}); "
                        "default: SQLite in --data-dir")
    parser.add_argument("--data-dir", type=Path, default=Path("~/.mlxnet/coordinator").expanduser())


def _chain_flags(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument("--rpc-url", required=required, help="JSON-RPC URL of the payout chain")
    parser.add_argument("--distributor", required=required, help="the payout distributor contract's address")


def _database(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from coordinator.storage.database import Database, default_sqlite_url

    url = args.database_url or os.environ.get(DATABASE_URL_ENV) or default_sqlite_url(args.data_dir)
    return Database(url)


def _chain(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    if not args.rpc_url:
        return None
    if not args.distributor:
        raise SystemExit("--rpc-url needs --distributor, the payout distributor contract's address")
    from ledger.api import connect_chain

    return connect_chain(args.rpc_url, args.distributor, os.environ.get("MLXNET_PAYOUT_PUBLISHER_KEY"))


def _signer(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from contracts.keyfile import signer_from_file

    return signer_from_file(args.data_dir / LEDGER_KEY_FILE)


def _trusted_keys(args: argparse.Namespace) -> frozenset[str] | None:
    """The keys given, else the data dir's own key if it exists; None when there is neither."""
    keys = {key.lower().removeprefix("0x") for key in args.coordinator_key}
    if not keys and (args.data_dir / LEDGER_KEY_FILE).exists():
        keys.add(_signer(args).public_key_raw.hex())
    return frozenset(keys) or None


def _keys_text(trusted: frozenset[str] | None) -> str:
    return "not checked (no coordinator key)" if not trusted else "checked against " + ", ".join(sorted(trusted))


def _key(args: argparse.Namespace) -> int:
    sys.stdout.write(f"{_signer(args).public_key_raw.hex()}\n")
    return 0


def _audit(args: argparse.Namespace) -> int:
    from coordinator.money.epochs import expected_credits
    from ledger.api import audit

    trusted = _trusted_keys(args)
    statements = [json.loads(path.read_text(encoding="utf-8")) for path in args.statement]
    db, chain = _database(args), _chain(args)
    try:
        with db.transaction() as session:
            report = audit(session, chain=chain, expected_credits=list(expected_credits(session)),
                           trusted_keys=trusted, statements=statements)
    finally:
        db.dispose()
    out = sys.stdout
    out.write(f"transfers checked: {report.transfers_checked}\nepochs checked: {report.epochs_checked}\n"
              f"job credits recomputed: {report.credits_checked}\n"
              f"completions queued, not yet posted: {report.queued_completions}\n"
              f"anchored roots: {'checked on chain' if chain else 'not checked (no --rpc-url)'}\n"
              f"head signatures: {_keys_text(trusted)}\n"
              f"kept statements: {len(statements)}\n")
    for difference in report.differences:
        out.write(f"DIFFERENCE [{difference.check}] {difference.subject}: {difference.detail}\n")
    out.write("audit passed\n" if report.ok else f"audit FAILED: {len(report.differences)} differences\n")
    return 0 if report.ok else EXIT_DIFFERENCES


def _statement(args: argparse.Namespace) -> int:
    import time

    from ledger.api import operator_statement, signed_statement

    db = _database(args)
    try:
        with db.transaction() as session:
            statement = operator_statement(session, args.operator, args.epoch)
            tokens = _token_counts(session, statement) if statement else {}
            signed = None if statement is None or not args.signed else signed_statement(
                session, statement, _signer(args), time.time_ns() // 1_000)
    finally:
        db.dispose()
    if statement is None:
        sys.stderr.write(f"epoch {args.epoch} is not closed; statements cover closed epochs or the open one\n")
        return EXIT_USAGE
    if signed is not None:
        json.dump(signed, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.json:
        json.dump(_statement_json(statement, tokens), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(_statement_text(statement, tokens))
    return 0


def _token_counts(session, statement) -> dict[str, tuple[int, int]]:  # type: ignore[no-untyped-def]
    from coordinator.storage import job_rows

    counts = {}
    for line in statement.lines:
        job_id = line.transfer.job_id
        if job_id and job_id not in counts:
            job = job_rows.job_by_id(session, job_id)
            if job is not None:
                counts[job_id] = (job.prompt_tokens, job.completion_tokens)
    return counts


def _statement_json(statement, tokens) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return {
        "operator": statement.operator_id,
        "epoch": None if statement.epoch is None else statement.epoch.number,
        "root": None if statement.epoch is None else statement.epoch.root,
        "payout_address": statement.payout_address,
        "lines": [{
            "transfer_id": line.transfer.id, "job_id": line.transfer.job_id, "kind": str(line.transfer.kind),
            "state": str(line.transfer.state), "amount": str(line.transfer.amount),
            "prompt_tokens": tokens.get(line.transfer.job_id or "", (None, None))[0],
            "completion_tokens": tokens.get(line.transfer.job_id or "", (None, None))[1],
            "consumer_charge": None if line.consumer_charge is None else str(line.consumer_charge),
            "share_bps": line.share_bps, "policy_version": line.transfer.policy_version,
        } for line in statement.lines],
        "seats": [vars(seat) | {"availability_reward": str(seat.availability_reward),
                                "job_bonus": str(seat.job_bonus)} for seat in statement.seats],
        "payout": None if statement.payout is None else str(statement.payout.amount),
        "proof": statement.proof,
    }


def _statement_text(statement, tokens) -> str:  # type: ignore[no-untyped-def]
    from ledger.api import format_mlx

    epoch = "open epoch" if statement.epoch is None else f"epoch {statement.epoch.number}"
    lines = [f"statement for operator {statement.operator_id}, {epoch}",
             f"payout address: {statement.payout_address or 'none (set one; earnings carry over until then)'}"]
    for line in statement.lines:
        t = line.transfer
        prompt, completion = tokens.get(t.job_id or "", ("?", "?"))
        share = "" if line.share_bps is None else f" share {line.share_bps / 100:.2f}%"
        charge = "" if line.consumer_charge is None else f" charge {format_mlx(line.consumer_charge)}"
        job = f" job {t.job_id} tokens {prompt}+{completion}" if t.job_id else ""
        lines.append(f"  {t.kind:<20} {t.state:<8} {format_mlx(t.amount):>22}{job}{charge}{share}"
                     f" policy {t.policy_version or '-'}")
    for seat in statement.seats:
        lines.append(f"  ultra seat {seat.node_id}: {seat.reason}")
    if statement.payout is not None:
        lines.append(f"payout: {format_mlx(statement.payout.amount)} to {statement.payout.address}")
        lines.append(f"root: {statement.epoch.root}; proof: {', '.join(statement.proof['proof']) or '(single leaf)'}")
    return "\n".join(lines) + "\n"


def _read_bundle(path: Path) -> dict[str, Any]:
    """A proof bundle from a file (or - for stdin), or the bundle inside a whole statement."""
    text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    bundle = json.loads(text)
    return bundle.get("proof", bundle) if isinstance(bundle, dict) and "lines" in bundle else bundle


def _claim(args: argparse.Namespace) -> int:
    from ledger.api import ChainError, connect_chain, leaf_from_bundle

    try:
        leaf, proof, _ = leaf_from_bundle(_read_bundle(args.proof))
    except ValueError as error:
        sys.stderr.write(f"{error}\n")
        return EXIT_USAGE
    chain = connect_chain(args.rpc_url, args.distributor, os.environ.get(CLAIM_KEY_ENV))
    try:
        receipt = chain.claim(leaf.epoch, leaf.address, leaf.amount, proof)
    except ChainError as error:
        sys.stderr.write(f"claim refused: {error}\n")
        return EXIT_DIFFERENCES
    sys.stdout.write(f"claimed {leaf.amount} base units of MLX for {leaf.address} (epoch {leaf.epoch}) in "
                     f"{receipt.tx_hash}, block {receipt.block_number}, gas {receipt.gas_used}; "
                     f"balance now {chain.token_balance(leaf.address)}\n")
    return 0


def _chain_info(args: argparse.Namespace) -> int:
    record = args.data_dir / "anvil" / "contracts.json"
    if not record.exists():
        sys.stderr.write(f"no embedded chain in {args.data_dir} yet: the coordinator starts one when it first "
                         "anchors an epoch's root\n")
        return EXIT_USAGE
    sys.stdout.write(record.read_text(encoding="utf-8"))
    return 0


def _deploy(args: argparse.Namespace) -> int:
    from ledger.api import ChainError, ChainSettingsError, deploy_chain, deploy_settings, publisher_key

    try:
        settings = deploy_settings(rpc_url=args.rpc_url, chain_id=args.chain_id, key_env=args.key_env,
                                   keystore=args.keystore, keystore_password_env=args.keystore_password_env)
        key = publisher_key(settings)
        assert key is not None
        chain = deploy_chain(settings, key)
    except ChainSettingsError as error:
        sys.stderr.write(f"{error}\n")
        return EXIT_USAGE
    except ChainError as error:
        sys.stderr.write(f"{error}\n")
        return EXIT_DIFFERENCES
    key_flag = f"--chain-keystore {args.keystore}" if args.keystore else f"--chain-key-env {settings.key_env}"
    sys.stdout.write(f"token {chain.token_address}\ndistributor {chain.distributor_address}\n"
                     f"publisher {chain.sender}\nrun the coordinator with:\n"
                     f"  mlxnet coordinator --chain-rpc-url {args.rpc_url} --chain-id {settings.chain_id} "
                     f"--chain-distributor {chain.distributor_address} {key_flag}\n")
    return 0


def _verify_proof(args: argparse.Namespace) -> int:
    from ledger.api import bundle_root, leaf_from_bundle

    bundle = _read_bundle(args.proof)
    try:
        leaf, proof, claimed_root = leaf_from_bundle(bundle)
    except ValueError as error:
        sys.stderr.write(f"{error}\n")
        return EXIT_USAGE
    chain = _chain(args)
    onchain = chain.epoch_root(leaf.epoch)
    recomputed = bundle_root(bundle)
    contract_ok = chain.verify(leaf.epoch, leaf.address, leaf.amount, proof)
    sys.stdout.write(f"epoch {leaf.epoch}: {leaf.amount} base units to {leaf.address}\n"
                     f"root from the proof: 0x{recomputed.hex()}\n"
                     f"root on chain:       {'none' if onchain is None else '0x' + onchain.hex()}\n")
    ok = onchain == recomputed and contract_ok
    if claimed_root != recomputed:
        sys.stdout.write("note: the bundle's root field does not match its proof\n")
    sys.stdout.write("proof VERIFIED on chain\n" if ok else "proof NOT verified\n")
    return 0 if ok else EXIT_DIFFERENCES


def _close_epoch(args: argparse.Namespace) -> int:
    from coordinator.money.epochs import EpochSettings, anchor_closed_epochs, close_due_epoch

    db, chain = _database(args), _chain(args)
    try:
        result = close_due_epoch(db, EpochSettings.from_environment(), signer=_signer(args))
        if result is None:
            sys.stdout.write("no epoch is due: the latest finished epoch is already closed\n")
        else:
            epoch = result.epoch
            sys.stdout.write(f"epoch close: {result.code}" + (
                f" epoch {epoch.number} root {epoch.root} total {epoch.total} payouts {epoch.leaf_count}\n"
                if epoch else "\n"))
        if chain is not None:
            sys.stdout.write(f"anchored {anchor_closed_epochs(db, chain)} epoch roots\n")
    finally:
        db.dispose()
    return 0 if result is None or result.ok else EXIT_DIFFERENCES


def _set_payout_address(args: argparse.Namespace) -> int:
    from ledger.api import set_payout_address

    db = _database(args)
    try:
        with db.transaction() as session:
            code = set_payout_address(session, args.operator, args.address)
    finally:
        db.dispose()
    if code.value != "created":
        sys.stderr.write(f"refused ({code}): give an operator id and an address of 0x + 40 hex digits\n")
        return EXIT_USAGE
    sys.stdout.write(f"payouts of {args.operator} go to {args.address.lower()}\n")
    return 0
