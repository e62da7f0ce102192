"""`mlxnet node config|status|leave|install-service|pod propose`, run in-process."""

from __future__ import annotations

import json
import plistlib
from pathlib import Path

import pytest

from contracts.lending import LendingMode
from mlxnet.cli import main
from node_agent.lending.config import load_config
from node_agent.status_file import StatusReport, write_status


def test_config_writes_a_toml_file_the_agent_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["node", "--data-dir", str(tmp_path), "config", "--mode", "dedicated",
                 "--idle-minutes", "5", "--schedule", "Mon-Fri 22:00-07:00", "--memory-cap-gb", "32",
                 "--handback-after-s", "20", "--coordinator", "c.example:50051",
                 "--model", "mlx-community/Qwen3-4B-4bit", "--no-require-ac-power"])
    assert code == 0
    config = load_config(tmp_path / "node.toml")
    assert config.lending.mode is LendingMode.DEDICATED and config.lending.idle_minutes == 5
    assert config.lending.schedule == ("Mon-Fri 22:00-07:00",) and config.memory_cap_bytes == 32 << 30
    assert config.coordinator == "c.example:50051" and not config.lending.require_ac_power
    assert 'mode = "dedicated"' in capsys.readouterr().out
    assert main(["node", "--data-dir", str(tmp_path), "config", "--any-time"]) == 0
    assert load_config(tmp_path / "node.toml").lending.schedule == ()


def test_config_refuses_bad_values_and_keeps_the_file(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    assert main(["node", "--data-dir", str(tmp_path), "config", "--idle-minutes", "3"]) == 0
    before = (tmp_path / "node.toml").read_text()
    assert main(["node", "--data-dir", str(tmp_path), "config", "--schedule", "weekdays"]) == 2
    assert "lending.schedule" in caplog.text
    assert (tmp_path / "node.toml").read_text() == before
    with pytest.raises(SystemExit):
        main(["node", "--data-dir", str(tmp_path), "config", "--mode", "sometimes"])


def test_status_shows_mode_job_earnings_and_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["node", "--data-dir", str(tmp_path), "status"]) == 0
    assert "not running" in capsys.readouterr().out
    write_status(tmp_path / "status.json", StatusReport(
        node_id="node-1", coordinator="c:1", mode="idle", accepting_jobs=False, owner_active=True,
        reason="the owner is using this Mac", current_job="job-9", day="2026-01-05", jobs_today=3,
        earned_today_base_units=1_500_000_000, unfinished_today=1,
        benchmark={"memory_bandwidth_gb_s": 5.3, "decode_tokens_per_s": 300.0,
                   "prefill_tokens_per_s": 800.0}, updated_at_ms=1, pid=1))
    assert main(["node", "--data-dir", str(tmp_path), "status"]) == 0
    out = capsys.readouterr().out
    assert "mode:         idle" in out and "job-9" in out
    assert "1.500000000 MLX earned from 3 job(s)" in out and "5.3 GB/s" in out


def test_leave_without_a_running_agent_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert main(["node", "--data-dir", str(tmp_path), "leave"]) == 1
    assert "no agent is running" in caplog.text


def test_install_service_prints_or_writes_the_plist(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["node", "--data-dir", str(tmp_path), "install-service", "--print",
                 "--platform", "macos"]) == 0
    job = plistlib.loads(capsys.readouterr().out.encode())
    assert job["ProgramArguments"][-2:] == ["--data-dir", str(tmp_path.resolve())]
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert main(["node", "--data-dir", str(tmp_path), "install-service", "--platform", "linux"]) == 0
    unit = tmp_path / "home" / ".config" / "systemd" / "user" / "mlxnet-node.service"
    assert "mlxnet.cli node --data-dir" in unit.read_text()
    assert "systemctl --user" in capsys.readouterr().out


def test_pod_propose_prints_a_pod_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def member(node_id: str, local: str, peer: str) -> Path:
        link = {"port": "bus_0", "speed_gbps": 80, "thunderbolt_version": 5, "peer_model_identifier": "",
                "peer_name": "", "peer_uid": peer, "peer_rdma_capable": True, "local_domain_uuid": local}
        path = tmp_path / f"{node_id}.json"
        path.write_text(json.dumps({"node_id": node_id, "hostname": f"{node_id}.local",
                                    "hardware": {"thunderbolt_links": [link], "rdma_enabled": True}}))
        return path
    assert main(["node", "pod", "propose", str(member("node-a", "U1", "U2")),
                 str(member("node-b", "U2", "U1")), "--pod-id", "desk"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("[pod]") and 'id = "desk"' in out and 'kind = "rdma_tb5"' in out


def test_the_agent_refuses_terms_it_cannot_honour_before_joining(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    code = main(["node", "--data-dir", str(tmp_path), "--coordinator", "127.0.0.1:9",
                 "--model", str(tmp_path), "--profile", "m4-pro-64", "--mode", "ultra_seat"])
    assert code == 2 and "needs an Ultra chip" in caplog.text


def test_config_region_is_written_and_read_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["node", "--data-dir", str(tmp_path), "config", "--region", "Europe/Lisbon"]) == 0
    assert load_config(tmp_path / "node.toml").region == "Europe/Lisbon"
    assert 'region = "Europe/Lisbon"' in capsys.readouterr().out
    assert main(["node", "--data-dir", str(tmp_path), "config", "--region", ""]) == 0
    assert load_config(tmp_path / "node.toml").region == ""
    assert main(["node", "--data-dir", str(tmp_path), "config", "--region", "x" * 65]) == 2
