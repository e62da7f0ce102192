"""node.toml: what `mlxnet node config` writes reads back the same; bad values name their key."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.hardware import LinkKind
from contracts.lending import LendingMode
from node_agent.lending.config import (
    ConfigError, LendingConfig, NodeConfig, PodConfig, PodLinkConfig, dump_config, load_config,
    save_config,
)

FULL = NodeConfig(
    coordinator="coordinator.example:50051", operator="alice", name="Studio \"attic\" ☂",
    models=("mlx-community/Qwen3-4B-4bit", "tiny=/models/tiny"),
    lending=LendingConfig(mode=LendingMode.ULTRA_SEAT, idle_minutes=2.5, require_ac_power=False,
                          schedule=("Mon-Fri 22:00-07:00",), memory_cap_gb=96.0,
                          handback_after_s=12.0, activity_file="/tmp/activity.json"),
    pod=PodConfig(pod_id="desk", members=("node-a", "node-b"), hosts=("a.local", "b.local"),
                  ips=("10.0.0.1", "10.0.0.2"),
                  links=(PodLinkConfig("node-a", "node-b", LinkKind.RDMA_TB5, 2),),
                  backend="jaccl", rdma_devices=((None, "rdma_en2"), ("rdma_en2", None))),
    known_coordinators=(("[::1]:50051", "SHA256:" + ":".join(["0F"] * 32)),
                        ("coordinator.example:50051", "SHA256:" + ":".join(["AB"] * 32))))


def test_a_full_config_survives_the_file(tmp_path: Path) -> None:
    save_config(tmp_path / "node.toml", FULL)
    assert load_config(tmp_path / "node.toml") == FULL
    assert FULL.memory_cap_bytes == 96 * 2**30


def test_no_file_means_the_defaults(tmp_path: Path) -> None:
    assert load_config(tmp_path / "missing.toml") == NodeConfig()
    assert NodeConfig().memory_cap_bytes is None


def test_the_file_is_readable_and_commented() -> None:
    text = dump_config(FULL)
    assert 'mode = "ultra_seat"  # idle, dedicated or ultra_seat' in text
    assert "[pod]" in text and "handback_after_s = 12.0" in text


@pytest.mark.parametrize("text, key", [
    ('[lending]\nmode = "sometimes"\n', "lending.mode"),
    ("[lending]\nidle_minutes = 0\n", "lending.idle_minutes"),
    ('[lending]\nschedule = ["weekdays"]\n', "lending.schedule"),
    ("[lending]\nhandback_after_s = -1\n", "lending.handback_after_s"),
    ("[lending]\ncolour = 1\n", "unknown key lending.colour"),
    ('[pod]\nid = "p"\nmembers = ["a", "b"]\nhosts = ["a"]\nips = ["1", "2"]\n', "pod.hosts"),
    ("not toml at all [", "not valid TOML"),
    ('[known_coordinators]\n"h:1" = "SHA256:AB"\n', "known_coordinators"),
])
def test_bad_values_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "node.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.").replace("[", r"\[")):
        load_config(path)


def test_a_joined_coordinator_is_remembered_by_its_address(tmp_path: Path) -> None:
    pin = "SHA256:" + ":".join(["C3"] * 32)
    config = NodeConfig().knowing("10.0.0.9:50051", pin)
    assert config.fingerprint_for("10.0.0.9:50051") == pin
    assert config.fingerprint_for("10.0.0.9:50052") == ""
    save_config(tmp_path / "node.toml", config)
    assert load_config(tmp_path / "node.toml").fingerprint_for("10.0.0.9:50051") == pin
    assert '"10.0.0.9:50051" = "SHA256:C3:' in (tmp_path / "node.toml").read_text()
