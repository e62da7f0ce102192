"""`mlxnet keys ...`: API keys and prepaid balances for API consumers.

    mlxnet keys create --consumer C [--deposit MLX] [--spend-limit MLX]
                       [--requests-per-minute N] [--concurrent-jobs N] [--label TEXT]
    mlxnet keys revoke KEY_ID
    mlxnet keys deposit --consumer C --amount MLX [--reference REF]
    mlxnet keys list [--consumer C]
    mlxnet keys create --operator O [--label TEXT]   an operator key (mlxo_...) for MLX World
    mlxnet keys revoke --operator KEY_ID             revoke an operator key
    mlxnet keys list --operators [--operator O]

They work on the coordinator's database (--database-url or $MLXNET_DATABASE_URL).
`create` prints the key once; only its sha256 is stored.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from contracts.ids import ConsumerId
from coordinator.errors import CoordinatorError
from coordinator.money import api_keys
from coordinator.money.api_keys import ApiKey, KeyLimits
from coordinator.money.job_money import consumer_balance
from coordinator.storage.database import Database, default_sqlite_url, make_private_dir, upgrade_schema
from ledger.api import ResultCode, deposit_for_consumer, format_mlx, open_consumer_account, parse_mlx

DATABASE_URL_ENV = "MLXNET_DATABASE_URL"
REFERENCE_CHARS_MAX = 100


class KeysError(Exception):
    """A keys command could not do what it was asked; the message says why."""


@dataclass(frozen=True)
class Deposit:
    reference: str
    amount: int
    balance: int  # the consumer's available balance afterwards
    repeated: bool = False  # this reference was deposited before: nothing moved now


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def deposit(db: Database, consumer_id: str, amount: int, reference: str = "") -> Deposit:
    """Credit a consumer's prepaid balance; the same reference twice deposits once."""
    api_keys.validate_consumer_id(consumer_id)
    if amount <= 0:
        raise KeysError("the amount must be positive")
    reference = reference or f"deposit-{uuid.uuid4().hex}"
    if len(reference) > REFERENCE_CHARS_MAX or " " in reference:
        raise KeysError(f"the reference must be at most {REFERENCE_CHARS_MAX} characters, no spaces")
    with db.transaction() as session:
        open_consumer_account(session, ConsumerId(consumer_id))
        result = deposit_for_consumer(session, reference, ConsumerId(consumer_id), amount)
        if result.code is ResultCode.EXISTS_WITH_DIFFERENT_FIELDS:
            raise KeysError(f"reference {reference!r} was already used for another deposit")
        if not result.ok:
            raise KeysError(f"the ledger refused the deposit: {result.code}")
        return Deposit(reference, amount, consumer_balance(session, consumer_id),
                       result.code is ResultCode.EXISTS)


def create(db: Database, consumer_id: str, limits: KeyLimits, label: str = "",
           deposit_amount: int = 0) -> tuple[ApiKey, str]:
    """A new key (and an optional first deposit); returns the key text, shown only now."""
    with db.transaction() as session:
        key, text = api_keys.create_key(session, consumer_id, limits, label, _now_ms())
    if deposit_amount:
        deposit(db, consumer_id, deposit_amount)
    return key, text


def revoke(db: Database, key_id: str) -> ApiKey:
    with db.transaction() as session:
        return api_keys.revoke_key(session, key_id, _now_ms())


def add_subcommands(commands: argparse._SubParsersAction) -> None:
    keys = commands.add_parser("keys", help="API keys and prepaid balances for consumers")
    sub = keys.add_subparsers(dest="keys_command", required=True)
    create_parser = sub.add_parser("create", help="create an API key; it is printed once")
    owner = create_parser.add_mutually_exclusive_group(required=True)
    owner.add_argument("--consumer", help="the consumer the key bills")
    owner.add_argument("--operator", help="an operator: the key opens their own page in MLX World "
                       "(/world#/operator) and can do nothing else")
    create_parser.add_argument("--deposit", type=parse_mlx, default=0, metavar="MLX",
                               help="also deposit this much into the consumer's balance")
    create_parser.add_argument("--spend-limit", type=parse_mlx, metavar="MLX",
                               help="the most this key may ever spend")
    create_parser.add_argument("--requests-per-minute", type=int, metavar="N")
    create_parser.add_argument("--concurrent-jobs", type=int, metavar="N")
    create_parser.add_argument("--label", default="", help="a note to tell keys apart")
    create_parser.set_defaults(handler=_create)
    revoke_parser = sub.add_parser("revoke", help="revoke a key by its id")
    revoke_parser.add_argument("key_id")
    revoke_parser.add_argument("--operator", action="store_true", help="KEY_ID is an operator key's")
    revoke_parser.set_defaults(handler=_revoke)
    deposit_parser = sub.add_parser("deposit", help="add MLX to a consumer's prepaid balance")
    deposit_parser.add_argument("--consumer", required=True)
    deposit_parser.add_argument("--amount", type=parse_mlx, required=True, metavar="MLX")
    deposit_parser.add_argument("--reference", default="",
                                help="the payment's own id: repeating it deposits once")
    deposit_parser.set_defaults(handler=_deposit)
    list_parser = sub.add_parser("list", help="keys (never their secrets) and balances")
    list_parser.add_argument("--consumer")
    list_parser.add_argument("--operators", action="store_true", help="list operator keys instead")
    list_parser.add_argument("--operator", help="with --operators: only this operator's keys")
    list_parser.set_defaults(handler=_list)
    for parser in (create_parser, revoke_parser, deposit_parser, list_parser):
        parser.add_argument("--database-url", help=f"any SQLAlchemy URL (or ${DATABASE_URL_ENV}); "
                            "default: SQLite in --data-dir")
        parser.add_argument("--data-dir", type=Path,
                            default=Path("~/.mlxnet/coordinator").expanduser())


def _database(args: argparse.Namespace) -> Database:
    url = args.database_url or os.environ.get(DATABASE_URL_ENV)
    if not url:
        make_private_dir(args.data_dir)
        url = default_sqlite_url(args.data_dir)
    upgrade_schema(url)
    return Database(url)


def _run(args: argparse.Namespace, action) -> int:  # type: ignore[no-untyped-def]
    db = _database(args)
    try:
        action(db)
    except (CoordinatorError, KeysError) as error:
        sys.stderr.write(f"mlxnet keys: {error}\n")
        return 1
    finally:
        db.dispose()
    return 0


def _positive(value: int | None, flag: str) -> int | None:
    if value is not None and value <= 0:
        raise KeysError(f"{flag} must be positive")
    return value


def _create(args: argparse.Namespace) -> int:
    if args.operator is not None:
        return _create_operator_key(args)

    def action(db: Database) -> None:
        limits = KeyLimits(_positive(args.spend_limit, "--spend-limit"),
                           _positive(args.requests_per_minute, "--requests-per-minute"),
                           _positive(args.concurrent_jobs, "--concurrent-jobs"))
        key, text = create(db, args.consumer, limits, args.label, _positive(args.deposit or None,
                                                                            "--deposit") or 0)
        sys.stdout.write(f"{text}\n")
        sys.stderr.write(f"key {key.key_id} for consumer {key.consumer_id}: copy it now, it is "
                         "not shown again\n")
    return _run(args, action)


def _revoke(args: argparse.Namespace) -> int:
    if args.operator:
        return _revoke_operator_key(args)

    def action(db: Database) -> None:
        key = revoke(db, args.key_id)
        sys.stdout.write(f"key {key.key_id} of consumer {key.consumer_id} is revoked\n")
    return _run(args, action)


def _deposit(args: argparse.Namespace) -> int:
    def action(db: Database) -> None:
        done = deposit(db, args.consumer, args.amount, args.reference)
        verb = "already deposited" if done.repeated else "deposited"
        sys.stdout.write(f"{verb} {format_mlx(done.amount)} for {args.consumer} "
                         f"(reference {done.reference}); available {format_mlx(done.balance)}\n")
    return _run(args, action)


def _list(args: argparse.Namespace) -> int:
    if args.operators:
        return _list_operator_keys(args)

    def action(db: Database) -> None:
        with db.transaction() as session:
            for key in api_keys.keys_of(session, args.consumer):
                state = "revoked" if key.revoked_at_ms is not None else "live"
                limit = key.limits.spend_limit_base_units
                sys.stdout.write(
                    f"{key.key_id}  {key.consumer_id:<20} {state:<8} spent "
                    f"{format_mlx(key.spent_base_units)}"
                    f"{' of ' + format_mlx(limit) if limit else ''}; balance "
                    f"{format_mlx(consumer_balance(session, key.consumer_id))}  {key.label}\n")
    return _run(args, action)


# --- operator keys (MLX World; coordinator/world/operator_keys.py) ---------

def _create_operator_key(args: argparse.Namespace) -> int:
    from coordinator.world import operator_keys

    def action(db: Database) -> None:
        with db.transaction() as session:
            key, text = operator_keys.create_operator_key(session, args.operator, args.label, _now_ms())
        sys.stdout.write(f"{text}\n")
        sys.stderr.write(f"operator key {key.key_id} for operator {key.operator_id}: copy it now, it "
                         "is not shown again; open /world#/operator on the coordinator's HTTP port\n")
    return _run(args, action)


def _revoke_operator_key(args: argparse.Namespace) -> int:
    from coordinator.world import operator_keys

    def action(db: Database) -> None:
        with db.transaction() as session:
            key = operator_keys.revoke_operator_key(session, args.key_id, _now_ms())
        sys.stdout.write(f"operator key {key.key_id} of operator {key.operator_id} is revoked\n")
    return _run(args, action)


def _list_operator_keys(args: argparse.Namespace) -> int:
    from coordinator.world import operator_keys

    def action(db: Database) -> None:
        with db.transaction() as session:
            for key in operator_keys.operator_keys_of(session, args.operator):
                state = "revoked" if key.revoked_at_ms is not None else "live"
                sys.stdout.write(f"{key.key_id}  {key.operator_id:<20} {state:<8} {key.label}\n")
    return _run(args, action)
