"""The one place that creates database engines and sessions.

SQLite (the embedded default) and PostgreSQL are both first-class. On SQLite
every transaction starts with BEGIN IMMEDIATE, so two writers queue on the
lock instead of failing to upgrade a read lock; a read_transaction starts with
a plain BEGIN, so readers (WAL) neither wait for writers nor hold them up.

A transaction is durable when it commits (the disk has it), unless it asks not to be
(`transaction(durable=False)`): then its commit does not wait for the disk. A machine
crash or power cut may lose such a transaction, whole, never half of it; a process
crash loses nothing, and the next durable commit makes it durable too: `make_durable`
is such a commit, for a caller that must not answer before its earlier commit is durable.

The database's own failures (it is away, restarting, or refused the transaction: a lock
wait, a serialization conflict) are translated here, once, into
coordinator.errors.DatabaseUnavailable: nothing was written, and the caller may retry. The
edges answer it with 503 and Retry-After (HTTP) or UNAVAILABLE (gRPC), and the background
loops back off and report themselves unhealthy while it lasts (coordinator.background).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, make_url, text, update
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

import migrations
from coordinator.errors import DatabaseUnavailable
from coordinator.storage.tables import durability_marks

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent
SQLITE_BUSY_TIMEOUT_MS = 30_000
_READ_ONLY = "mlxnet_read_only"  # execution option: this transaction never writes
_NOT_DURABLE = "mlxnet_not_durable"  # execution option: the commit need not wait for the disk
_SQLITE_SYNC = "mlxnet_synchronous"  # connection info: the PRAGMA synchronous it has now
_RETURNED_AT = "mlxnet_returned_at_s"  # connection info: when it went back to the pool (monotonic)
# A pooled PostgreSQL connection idle this long is pinged before use. Pinging every checkout
# doubled a busy coordinator's statements; a connection used moments ago that died since fails
# its transaction, which answers DatabaseUnavailable and makes the pool drop its older connections.
POSTGRES_PING_IDLE_S = 1.0
# A write, so that the commit has something to flush (a transaction that writes nothing
# makes neither database wait for its disk).
RETRY_AFTER_S = 2  # what a client hears when the database is away
# The DBAPI's failures that mean "the database is away or refused the transaction", as opposed
# to a programmer's error (a bad statement, a broken constraint): those stay what they are.
_UNAVAILABLE_ERRORS = (OperationalError, InterfaceError, PoolTimeout)
_NEXT_MARK = update(durability_marks).where(durability_marks.c.id == 1).values(
    mark=durability_marks.c.mark + 1)


def default_sqlite_url(data_dir: Path) -> str:
    return f"sqlite:///{(data_dir / 'coordinator.db').resolve()}"


PRIVATE_DIR_MODE = 0o700  # the coordinator's data dir: its database holds prompts and outputs
PRIVATE_FILE_MODE = 0o600


def make_private_dir(path: Path) -> Path:
    """Create the data dir readable by its owner only (and tighten one made looser before)."""
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        log.warning("%s was readable by others; making it private (0700)", path)
        path.chmod(PRIVATE_DIR_MODE)
    return path


def _make_sqlite_file_private(url: str) -> None:
    """Create a SQLite database file 0600 before SQLite does (it would use the umask, often
    0644); its -wal and -shm files take the same mode. A looser existing file is tightened."""
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, PRIVATE_FILE_MODE))
    elif path.is_file() and path.stat().st_mode & 0o077 and path.stat().st_uid == os.getuid():
        log.warning("%s was readable by others; making it private (0600)", path)
        path.chmod(PRIVATE_FILE_MODE)


def _configure_sqlite(engine: Engine, busy_timeout_ms: int) -> None:
    assert type(busy_timeout_ms) is int and busy_timeout_ms >= 0

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves, below
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection) -> None:  # type: ignore[no-untyped-def]
        # Straight to the driver: these statements return nothing, and through SQLAlchemy they
        # cost about 40,000 more instructions a transaction (callgrind), which every one pays.
        pooled = connection.connection
        options = connection.get_execution_options()
        if options.get(_READ_ONLY, False):
            pooled.driver_connection.execute("BEGIN")
            return
        # WAL with NORMAL skips the fsync at commit; SQLite takes the setting only between
        # transactions, so it is set here, before BEGIN, and only when it changes.
        synchronous = "NORMAL" if options.get(_NOT_DURABLE, False) else "FULL"
        if pooled.info.get(_SQLITE_SYNC) != synchronous:
            pooled.driver_connection.execute(f"PRAGMA synchronous={synchronous}")
            pooled.info[_SQLITE_SYNC] = synchronous
        pooled.driver_connection.execute("BEGIN IMMEDIATE")


def create_database_engine(url: str, sqlite_busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS) -> Engine:
    """sqlite_busy_timeout_ms: how long a SQLite writer waits for the write lock before failing."""
    if url.startswith("sqlite"):
        _make_sqlite_file_private(url)
        engine = create_engine(url, connect_args={"check_same_thread": False})
        _configure_sqlite(engine, sqlite_busy_timeout_ms)
        return engine
    # Kept open: under load a pool of 10 opened and closed an overflow connection per transaction
    # (a backend fork each). 24 at most, so four processes stay within PostgreSQL's default 100.
    engine = create_engine(url, pool_size=20, max_overflow=4)
    _ping_idle_connections(engine, POSTGRES_PING_IDLE_S)
    return engine


def _ping_idle_connections(engine: Engine, idle_s: float) -> None:
    """pool_pre_ping, for connections that sat in the pool at least idle_s only."""

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection, record) -> None:  # type: ignore[no-untyped-def]
        record.info[_RETURNED_AT] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection, record, _proxy) -> None:  # type: ignore[no-untyped-def]
        returned_at = record.info.get(_RETURNED_AT)  # None: a new connection, just opened
        if returned_at is None or time.monotonic() - returned_at < idle_s:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as error:
            # The pool drops this connection and hands out another (up to three tries).
            raise DisconnectionError(f"a pooled connection failed its ping: {error}") from error


def writes_serialized(session: Session) -> bool:
    """Whether this write transaction holds the database's one write lock from its first
    statement (SQLite, BEGIN IMMEDIATE): nothing it has read can change before it commits."""
    return session.get_bind().dialect.name == "sqlite"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade_schema(url: str) -> None:
    """Apply every Alembic migration not yet applied (idempotent)."""
    log.info("applying migrations to %s", redact_url(url))
    if url.startswith("sqlite"):
        _make_sqlite_file_private(url)
    command.upgrade(alembic_config(url), "head")


def redact_url(url: str) -> str:
    """Hide a password before a URL goes to a log."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in credentials else url


@contextlib.contextmanager
def _unavailable_translated() -> Iterator[None]:
    try:
        yield
    except _UNAVAILABLE_ERRORS as error:
        log.warning("database unavailable: %s", str(error).splitlines()[0] if str(error) else error)
        raise DatabaseUnavailable(
            "the coordinator's database is unavailable (restarting or unreachable); nothing was "
            f"changed, retry after {RETRY_AFTER_S} s", retry_after_s=RETRY_AFTER_S) from error


class Database:
    """Owns the engine and hands out one transaction at a time."""

    def __init__(self, url: str, sqlite_busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS) -> None:
        self.url = url
        self.engine = create_database_engine(url, sqlite_busy_timeout_ms)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        # Transactions begun, by kind: how often the process takes SQLite's write lock.
        self._begun_lock = threading.Lock()
        self._writes_begun = 0
        self._reads_begun = 0
        # make_durable's calls are numbered as they come in; every call numbered up to
        # _durable_through was covered by a durable write that began after it came in.
        self._calls_lock = threading.Lock()
        self._calls = 0
        self._durable_lock = threading.Lock()
        self._durable_through = 0

    @contextlib.contextmanager
    def transaction(self, durable: bool = True) -> Iterator[Session]:
        """A session whose work commits together, or not at all.

        durable=False: the commit does not wait for the disk (see the module docstring),
        for writes whose loss in a power cut costs no money and breaks no promise."""
        with self._begun_lock:
            self._writes_begun += 1
        with _unavailable_translated(), self._sessions() as session, session.begin():
            if not durable:
                self._not_durable(session)
            yield session

    def _not_durable(self, session: Session) -> None:
        if self.engine.dialect.name == "sqlite":
            session.connection(execution_options={_NOT_DURABLE: True})
        else:  # PostgreSQL: this transaction's commit returns before its WAL is flushed
            session.execute(text("SET LOCAL synchronous_commit = off"))

    def make_durable(self) -> None:
        """Return once every transaction committed before the call is on disk.

        Calls that come in while a durable write is under way share the next one: one disk
        wait for many concurrent submits, not one each."""
        with self._calls_lock:
            self._calls += 1
            call = self._calls
        with self._durable_lock:
            if self._durable_through >= call:
                return
            with self._calls_lock:
                covered = self._calls  # these calls came in, so committed, before this write
            self._write_durable_mark()
            self._durable_through = covered

    def _write_durable_mark(self) -> None:
        with self.transaction() as session:
            if session.execute(_NEXT_MARK).rowcount != 1:
                raise RuntimeError("the durability_marks row is missing: run `mlxnet db upgrade`")

    @contextlib.contextmanager
    def read_transaction(self) -> Iterator[Session]:
        """A session that only reads (writing in it is a programmer error): one snapshot,
        and on SQLite no write lock, so a stream's reads never queue behind the writers."""
        with self._begun_lock:
            self._reads_begun += 1
        with _unavailable_translated(), self._sessions() as session, session.begin():
            session.connection(execution_options={_READ_ONLY: True})
            yield session

    @property
    def write_transactions_begun(self) -> int:
        """transaction() calls so far (make_durable's own writes included)."""
        return self._writes_begun

    @property
    def read_transactions_begun(self) -> int:
        """read_transaction() calls so far."""
        return self._reads_begun

    def dispose(self) -> None:
        self.engine.dispose()
