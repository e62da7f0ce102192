"""The model cache against a fake hub on loopback: fetch, resume, checksums, quota and LRU eviction."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from node_agent.model_cache import ModelCache, ModelCacheError, is_hub_id
from tests.node_agent.fake_hub import FakeHub, RunningHub

REPO = "mlxnet/tiny-llama"


@pytest.fixture
def hub(tiny_model_dir: Path) -> Iterator[RunningHub]:
    running = RunningHub(FakeHub(repos={REPO: tiny_model_dir}))
    try:
        yield running
    finally:
        running.stop()


def _model_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.iterdir())


def test_a_model_is_fetched_verified_and_then_served_offline(
        tmp_path: Path, hub: RunningHub, tiny_model_dir: Path) -> None:
    cache = ModelCache(tmp_path / "cache", 1 << 30, endpoint=hub.endpoint)
    seen: list[tuple[str, int, int]] = []
    directory = cache.fetch(REPO, lambda name, done, total: seen.append((name, done, total)))
    for original in tiny_model_dir.iterdir():
        assert (directory / original.name).read_bytes() == original.read_bytes()
    total = _model_bytes(tiny_model_dir)
    assert seen[-1][1:] == (total, total) and [s[1] for s in seen] == sorted(s[1] for s in seen)
    downloads = hub.hub.downloads
    hub.stop()  # offline now: the cached model needs no network
    offline = ModelCache(tmp_path / "cache", 1 << 30, endpoint=hub.endpoint)
    assert offline.fetch(REPO) == directory and hub.hub.downloads == downloads
    assert [m.hub_id for m in offline.models()] == [REPO]


def test_an_interrupted_download_resumes_where_it_stopped(tmp_path: Path, hub: RunningHub) -> None:
    hub.hub.cut_after_bytes["model.safetensors"] = 100_000
    cache = ModelCache(tmp_path / "cache", 1 << 30, endpoint=hub.endpoint)
    with pytest.raises(ModelCacheError, match="run the same command again to resume"):
        cache.fetch(REPO)
    directory = cache.fetch(REPO)
    assert ("model.safetensors", 100_000) in hub.hub.range_requests
    assert (directory / "config.json").exists()


def test_a_corrupted_file_is_refused_and_deleted(tmp_path: Path, hub: RunningHub) -> None:
    hub.hub.corrupt.add("model.safetensors")
    cache = ModelCache(tmp_path / "cache", 1 << 30, endpoint=hub.endpoint)
    with pytest.raises(ModelCacheError, match="does not match the hub's sha256"):
        cache.fetch(REPO)
    assert not (tmp_path / "cache" / "partial" / "mlxnet--tiny-llama" / "model.safetensors").exists()
    hub.hub.corrupt.clear()
    assert (cache.fetch(REPO) / "model.safetensors").exists()


def test_the_quota_evicts_the_least_recently_used_model(
        tmp_path: Path, hub: RunningHub, tiny_model_dir: Path) -> None:
    for name in ("a", "b", "c"):
        hub.hub.repos[f"mlxnet/{name}"] = tiny_model_dir
    size = _model_bytes(tiny_model_dir)
    cache = ModelCache(tmp_path / "cache", int(size * 2.5), endpoint=hub.endpoint)
    cache.fetch("mlxnet/a")
    cache.fetch("mlxnet/b")
    cache.release("mlxnet/a")
    cache.release("mlxnet/b")
    cache.fetch("mlxnet/a")  # a is now the more recently used
    cache.release("mlxnet/a")
    cache.fetch("mlxnet/c")
    assert {m.hub_id for m in cache.models()} == {"mlxnet/a", "mlxnet/c"}
    assert cache.used_bytes() <= cache.quota_bytes


def test_models_in_use_are_never_evicted(tmp_path: Path, hub: RunningHub, tiny_model_dir: Path) -> None:
    hub.hub.repos["mlxnet/b"] = tiny_model_dir
    cache = ModelCache(tmp_path / "cache", int(_model_bytes(tiny_model_dir) * 1.5),
                       endpoint=hub.endpoint)
    cache.fetch(REPO)
    with pytest.raises(ModelCacheError, match="raise cache.quota_gb"):
        cache.fetch("mlxnet/b")
    with pytest.raises(ModelCacheError, match="quota is"):
        ModelCache(tmp_path / "small", 1000, endpoint=hub.endpoint).fetch(REPO)


def test_unknown_models_and_bad_ids_say_what_to_check(tmp_path: Path, hub: RunningHub) -> None:
    cache = ModelCache(tmp_path / "cache", 1 << 30, endpoint=hub.endpoint)
    with pytest.raises(ModelCacheError, match="check the id"):
        cache.fetch("mlxnet/missing")
    with pytest.raises(ModelCacheError, match="not a hub id"):
        cache.fetch("no-slash")


def test_hub_ids_and_local_paths_are_told_apart(tmp_path: Path) -> None:
    assert is_hub_id("mlx-community/Qwen3-4B-4bit") and is_hub_id("org/name@main")
    assert not is_hub_id("tiny=/models/tiny") and not is_hub_id("/models/tiny")
    local = tmp_path / "org" / "name"
    local.mkdir(parents=True)
    shutil.copy(__file__, local / "x")
    assert not is_hub_id(str(local))
