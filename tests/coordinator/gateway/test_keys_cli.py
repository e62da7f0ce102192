"""`mlxnet keys`: a key is printed once, deposits are idempotent by reference, revocation sticks."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.errors import Unauthenticated
from coordinator.storage.database import Database
from mlxnet.cli import main
from tests.coordinator.gateway.service_harness import consumer_balance, make_service


def _run(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    code = main(["keys", *argv, "--database-url", url])
    out, err = capsys.readouterr()
    return code, out, err


def test_keys_create_deposit_list_and_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    code, out, err = _run(capsys, url, "create", "--consumer", "acme", "--deposit", "2.5",
                          "--concurrent-jobs", "2")
    key = out.strip()
    assert code == 0 and key.startswith("mlxk_") and "not shown again" in err
    for _ in range(2):  # the same payment reference deposits once
        code, out, _ = _run(capsys, url, "deposit", "--consumer", "acme", "--amount", "1",
                            "--reference", "pay-1")
        assert code == 0
    assert out.startswith("already deposited") and "available 3.500000000 MLX" in out
    code, out, _ = _run(capsys, url, "list")
    key_id = key.split("_")[1]
    assert code == 0 and key_id in out and key not in out
    service = make_service(url)
    assert service.authenticate_consumer(key).consumer_id == "acme"
    assert consumer_balance(service, "acme").available == 3_500_000_000
    assert _run(capsys, url, "revoke", key_id)[0] == 0
    with pytest.raises(Unauthenticated):
        service.authenticate_consumer(key)
    service.db.dispose()


def test_bad_input_is_refused_with_a_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    code, _, err = _run(capsys, url, "create", "--consumer", "anonymous")
    assert code == 1 and "not start with 'anonymous'" in err
    code, _, err = _run(capsys, url, "revoke", "0123456789abcdef")
    assert code == 1 and "no API key" in err
    code, _, err = _run(capsys, url, "create", "--consumer", "acme", "--spend-limit", "0")
    assert code == 1 and "--spend-limit must be positive" in err
    Database(url).dispose()
