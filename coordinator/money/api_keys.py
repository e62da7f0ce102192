"""API keys: shown once, stored as a hash, checked on every consumer request.

A key reads `mlxk_<key_id>_<secret>`. The coordinator keeps only sha256 of the
whole key, so a leaked database does not leak usable keys; `key_id` names the key
in listings and revocations. Limits are checked in the submit transaction under a
row lock on the key, so concurrent submits with one key cannot overshoot them:

- requests_per_minute_max: jobs submitted with the key in the last 60 s;
- concurrent_jobs_max: the key's jobs not yet completed or failed;
- spend_limit_base_units: the key's spend, which counts an open job at its
  reservation (the most it can cost) and a closed one at its actual charge.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.orm import Session

from coordinator.errors import InsufficientBalance, InvalidRequest, RateLimited, Unauthenticated
from coordinator.model import TERMINAL_STATUSES
from coordinator.storage import key_rows
from coordinator.storage.tables import api_keys, jobs

KEY_PREFIX = "mlxk_"
KEY_ID_HEX_CHARS = 16
KEY_CHARS_MAX = 128
LABEL_CHARS_MAX = key_rows.LABEL_CHARS_MAX
RATE_WINDOW_MS = 60_000
KNOWN_KEYS_MAX = 10_000  # keys one process remembers as authenticated (see KnownKeys)
ANONYMOUS_CONSUMER = "anonymous"
ANONYMOUS_NAME_CHARS_MAX = 64
# Consumer ids become ledger account ids (`consumer:<id>`); "anonymous..." is reserved.
CONSUMER_ID_PATTERN = re.compile(r"^(?!anonymous)[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_KEY_PATTERN = re.compile(r"^mlxk_([0-9a-f]{%d})_[A-Za-z0-9_-]{20,100}$" % KEY_ID_HEX_CHARS)


@dataclass(frozen=True)
class KeyLimits:
    spend_limit_base_units: int | None = None  # None: no limit
    requests_per_minute_max: int | None = None
    concurrent_jobs_max: int | None = None

    def __post_init__(self) -> None:
        for limit in (self.spend_limit_base_units, self.requests_per_minute_max,
                      self.concurrent_jobs_max):
            assert limit is None or (type(limit) is int and limit > 0), "limits are positive ints"


@dataclass(frozen=True)
class ApiKey:
    key_id: str
    consumer_id: str
    label: str
    created_at_ms: int
    revoked_at_ms: int | None
    limits: KeyLimits
    spent_base_units: int


@dataclass(frozen=True)
class Caller:
    """Who is asking: a key's consumer, or an anonymous caller (key None) the network pays for."""

    consumer_id: str
    key: ApiKey | None


def anonymous_caller(name: str = "") -> Caller:
    name = name.strip()[:ANONYMOUS_NAME_CHARS_MAX]
    return Caller(f"{ANONYMOUS_CONSUMER}:{name}" if name else ANONYMOUS_CONSUMER, None)


def _key_from_row(row) -> ApiKey:  # type: ignore[no-untyped-def]
    return ApiKey(key_id=row.key_id, consumer_id=row.consumer_id, label=row.label,
                  created_at_ms=row.created_at_ms, revoked_at_ms=row.revoked_at_ms,
                  limits=KeyLimits(row.spend_limit_base_units, row.requests_per_minute_max,
                                   row.concurrent_jobs_max),
                  spent_base_units=row.spent_base_units)


def validate_consumer_id(consumer_id: str) -> None:
    if not CONSUMER_ID_PATTERN.match(consumer_id):
        raise InvalidRequest(f"consumer id {consumer_id!r} must be 1-64 letters, digits, '.', '_' "
                             "or '-', start with a letter or digit, and not start with 'anonymous'",
                             param="consumer")


def create_key(session: Session, consumer_id: str, limits: KeyLimits, label: str,
               now_ms: int) -> tuple[ApiKey, str]:
    """A new key for the consumer; returns it with the key text, which is never stored."""
    validate_consumer_id(consumer_id)
    key_id, key = key_rows.new_key(KEY_PREFIX, KEY_ID_HEX_CHARS, _KEY_PATTERN, KEY_CHARS_MAX, label)
    session.execute(insert(api_keys).values(
        key_id=key_id, secret_sha256=key_rows.key_sha256(key), consumer_id=consumer_id, label=label,
        created_at_ms=now_ms, revoked_at_ms=None,
        spend_limit_base_units=limits.spend_limit_base_units,
        requests_per_minute_max=limits.requests_per_minute_max,
        concurrent_jobs_max=limits.concurrent_jobs_max, spent_base_units=0))
    return ApiKey(key_id, consumer_id, label, now_ms, None, limits, 0), key


def revoke_key(session: Session, key_id: str, now_ms: int) -> ApiKey:
    """Revoke a key (again is harmless); its jobs already running finish."""
    return key_rows.revoke(session, api_keys, key_id, now_ms, _key_from_row,
                           f"no API key has id {key_id!r}; `mlxnet keys list` shows them")


def keys_of(session: Session, consumer_id: str | None = None) -> list[ApiKey]:
    return key_rows.keys_of(session, api_keys.c.consumer_id, consumer_id, _key_from_row)


# Built once: every consumer request runs these (see coordinator.storage.job_rows on why).
_KEY_BY_SECRET = select(api_keys).where(api_keys.c.secret_sha256 == bindparam("secret"))
_LOCK_KEY = select(api_keys.c.revoked_at_ms).where(api_keys.c.key_id == bindparam("key_id")).with_for_update()
_KEY_SPEND = select(api_keys.c.spent_base_units, api_keys.c.spend_limit_base_units).where(
    api_keys.c.key_id == bindparam("key_id"))
_ADD_SPEND = update(api_keys).where(api_keys.c.key_id == bindparam("key")).values(
    spent_base_units=api_keys.c.spent_base_units + bindparam("amount"))


def authenticate(session: Session, key: str | None) -> ApiKey:
    """The live key matching `key`; Unauthenticated for a missing, unknown or revoked one."""
    if not key:
        raise Unauthenticated("an API key is required: send `Authorization: Bearer <key>` "
                              "(create one with `mlxnet keys create --consumer NAME`)")
    if len(key) > KEY_CHARS_MAX or not _KEY_PATTERN.match(key):
        raise Unauthenticated("the API key is malformed: keys look like mlxk_<id>_<secret>")
    row = session.execute(_KEY_BY_SECRET, {"secret": key_rows.key_sha256(key)}).first()
    if row is None:
        raise Unauthenticated("the API key is not valid: check it was copied whole")
    if row.revoked_at_ms is not None:
        raise Unauthenticated(f"the API key {row.key_id} was revoked; create a new one")
    return _key_from_row(row)


class KnownKeys:
    """Keys this process has authenticated, by hash, so a submit need not read them again.

    A key's consumer, id and limits never change once it is created; its revocation does,
    and is not remembered here: admit re-reads it under the key's row lock.
    """

    def __init__(self, keys_max: int = KNOWN_KEYS_MAX) -> None:
        self._keys: dict[str, ApiKey] = {}
        self._keys_max = keys_max
        self._lock = threading.Lock()

    def authenticate(self, session_for: Callable[[], AbstractContextManager[Session]],
                     key: str | None) -> ApiKey:
        """As authenticate, reading the database (in a session_for() session) only for a new key."""
        digest = key_rows.key_sha256(key) if key else ""
        with self._lock:
            known = self._keys.get(digest)
        if known is not None:
            return known
        with session_for() as session:
            found = authenticate(session, key)
        with self._lock:
            if len(self._keys) >= self._keys_max:
                self._keys.clear()  # rare, and cheap to refill: one read per key
            self._keys[digest] = found
        return found


def rate_refusal(limits: KeyLimits, recent_submits_ms: list[int], open_jobs: int,
                 now_ms: int) -> RateLimited | None:
    """Pure: why one more job would break the key's rate or concurrency limit, or None.

    recent_submits_ms are the key's submissions in the last RATE_WINDOW_MS, oldest first.
    """
    rate = limits.requests_per_minute_max
    if rate is not None and len(recent_submits_ms) >= rate:
        frees_at_ms = recent_submits_ms[len(recent_submits_ms) - rate] + RATE_WINDOW_MS
        return RateLimited(f"this API key allows {rate} requests per minute; retry after the "
                           "Retry-After seconds or ask for a higher limit",
                           retry_after_s=max(1, -(-(frees_at_ms - now_ms) // 1000)))
    concurrent = limits.concurrent_jobs_max
    if concurrent is not None and open_jobs >= concurrent:
        return RateLimited(f"this API key allows {concurrent} jobs at once and has {open_jobs} "
                           "running; wait for one to finish", retry_after_s=1)
    return None


def admit(session: Session, key: ApiKey, now_ms: int) -> None:
    """Lock the key's row and refuse one more job from a revoked key, or over its rate or
    concurrency limit. Revocation is read here, under the lock: the caller's key may come
    from KnownKeys."""
    locked = session.execute(_LOCK_KEY, {"key_id": key.key_id}).first()  # (revoked_at_ms,) or None
    if locked is None or locked[0] is not None:
        raise Unauthenticated(f"the API key {key.key_id} was revoked; create a new one")
    limits = key.limits
    recent: list[int] = []
    if limits.requests_per_minute_max is not None:
        recent = list(session.execute(
            select(jobs.c.created_at_ms).where(jobs.c.api_key_id == key.key_id,
                                               jobs.c.created_at_ms > now_ms - RATE_WINDOW_MS)
            .order_by(jobs.c.created_at_ms.desc()).limit(limits.requests_per_minute_max)
        ).scalars())[::-1]
    open_jobs = 0
    if limits.concurrent_jobs_max is not None:
        open_jobs = session.execute(select(func.count()).select_from(jobs).where(
            jobs.c.api_key_id == key.key_id,
            jobs.c.status.not_in([s.value for s in TERMINAL_STATUSES]))).scalar_one()
    refusal = rate_refusal(limits, recent, open_jobs, now_ms)
    if refusal is not None:
        raise refusal


def add_spend(session: Session, key_id: str, amount: int) -> None:
    """Count a reservation against the key's spend limit (call after admit: the row is locked)."""
    spent, limit = session.execute(_KEY_SPEND, {"key_id": key_id}).one()  # admit locked the one row
    if limit is not None and spent + amount > limit:
        raise InsufficientBalance(
            f"this job could cost up to {amount} base units and the API key has "
            f"{max(0, limit - spent)} of its {limit} spend limit left; "
            "lower max_tokens or raise the key's limit")
    session.execute(_ADD_SPEND, {"key": key_id, "amount": amount})


def refund_spend(session: Session, key_id: str, amount: int) -> None:
    """Give back the part of a reservation that was not charged."""
    assert amount >= 0
    if amount:
        session.execute(update(api_keys).where(api_keys.c.key_id == key_id)
                        .values(spent_base_units=api_keys.c.spent_base_units - amount))
