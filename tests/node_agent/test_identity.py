from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from contracts.signing import signature_is_valid
from node_agent.identity import IdentityFileError, load_or_create_identity


def test_identity_is_created_owner_only_and_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "node" / "identity.pem"
    first = load_or_create_identity(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    second = load_or_create_identity(path)
    assert second.node_id == first.node_id and second.public_key_raw == first.public_key_raw
    assert signature_is_valid(first.public_key_raw, b"m", second.sign(b"m"))


def test_a_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "identity.pem"
    load_or_create_identity(path)
    os.chmod(path, 0o644)
    with pytest.raises(IdentityFileError, match="chmod 600"):
        load_or_create_identity(path)


def test_distinct_keys_give_distinct_node_ids(tmp_path: Path) -> None:
    a = load_or_create_identity(tmp_path / "a.pem")
    b = load_or_create_identity(tmp_path / "b.pem")
    assert a.node_id != b.node_id and a.node_id.startswith("node-")
