"""The coordinator's data dir and SQLite database hold prompts and outputs: owner-only."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.storage.database import Database, default_sqlite_url, make_private_dir, upgrade_schema


@pytest.fixture
def loose_umask() -> Iterator[None]:
    previous = os.umask(0o022)  # the usual default, which makes files 0644 and dirs 0755
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("loose_umask")
def test_a_new_data_dir_and_database_are_private(tmp_path: Path) -> None:
    data_dir = make_private_dir(tmp_path / "coordinator" / "data")
    url = default_sqlite_url(data_dir)
    upgrade_schema(url)
    database = Database(url)
    with database.transaction():
        pass
    database.dispose()
    assert _mode(data_dir) == 0o700
    files = sorted(data_dir.iterdir())
    assert data_dir / "coordinator.db" in files
    assert {path.name: _mode(path) for path in files} == {path.name: 0o600 for path in files}


@pytest.mark.usefixtures("loose_umask")
def test_a_data_dir_and_database_made_readable_before_are_tightened(tmp_path: Path) -> None:
    data_dir = tmp_path / "old"
    data_dir.mkdir(mode=0o755)
    database_file = data_dir / "coordinator.db"
    database_file.touch(mode=0o644)
    make_private_dir(data_dir)
    Database(default_sqlite_url(data_dir)).dispose()
    assert (_mode(data_dir), _mode(database_file)) == (0o700, 0o600)
