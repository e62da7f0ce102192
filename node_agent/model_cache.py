"""The node's model cache: fetch MLX models from the Hugging Face hub by id, within a disk quota.

- The file list, sizes and checksums come from the hub's API through
  huggingface_hub (HfApi.model_info, which honours HF_ENDPOINT).
- Files download with HTTP Range requests into `partial/`, which survives an
  interrupted run, so the next fetch resumes where the last one stopped.
- Every file is checked against the hub's checksum: the LFS sha256 for weights,
  the git blob id for small files. A mismatch deletes the file and fails.
- A model moves into `models/` only when complete. Least recently used models
  are evicted to keep the cache under its quota; a model in use is never evicted.
- Cached models load offline: a fetch of a model already here touches no network.

Layout: <cache>/index.json, <cache>/models/<org>--<name>/, <cache>/partial/<org>--<name>/.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from httpx2 import HTTPError as HttpTransferError  # huggingface_hub's HTTP client
from huggingface_hub import HfApi, hf_hub_url
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import build_hf_headers, get_session

log = logging.getLogger(__name__)

HUB_ID_PATTERN = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96})(?:@(?P<revision>[\w.-]{1,64}))?")
# What mlx-lm needs to load a model; code files are never fetched (no remote code runs here).
WANTED_FILE = re.compile(r"[^/]+\.(json|safetensors|jinja|txt|model|tiktoken)")
FILES_PER_MODEL_MAX = 512
CHUNK_BYTES = 1 << 20
HTTP_TIMEOUT_S = 60.0
INDEX_FILE_NAME = "index.json"

Progress = Callable[[str, int, int], None]  # (file name, bytes done, bytes total) over the model


class ModelCacheError(RuntimeError):
    """A model could not be fetched or kept; the message says what to do."""


@dataclass(frozen=True)
class HubFile:
    name: str
    size: int
    sha256: str | None  # LFS files
    git_blob_id: str | None  # small files: sha1 of "blob <size>\0" + content


@dataclass(frozen=True)
class CachedModel:
    hub_id: str
    revision: str
    directory: Path
    size_bytes: int
    last_used_ms: int


def is_hub_id(text: str) -> bool:
    """org/name[@revision] that is not a path on this machine."""
    return (HUB_ID_PATTERN.fullmatch(text) is not None and "=" not in text
            and not Path(text).expanduser().exists())


def _folder_name(repo: str) -> str:
    return repo.replace("/", "--")


def git_blob_sha1(path: Path) -> str:
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _next_use(entries: dict[str, dict]) -> int:  # type: ignore[type-arg]
    """A counter orders uses exactly, even several in one millisecond."""
    return 1 + max((e.get("use", 0) for e in entries.values()), default=0)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


class ModelCache:
    def __init__(self, root: Path, quota_bytes: int, endpoint: str | None = None) -> None:
        assert quota_bytes > 0
        self.root, self.quota_bytes = root, quota_bytes
        self._endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
        self._lock = threading.Lock()
        self._in_use: set[str] = set()

    # --- the index ---------------------------------------------------------

    def _index_path(self) -> Path:
        return self.root / INDEX_FILE_NAME

    def _read_index(self) -> dict[str, dict]:  # type: ignore[type-arg]
        try:
            return json.loads(self._index_path().read_text(encoding="utf-8"))["models"]
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError) as error:
            raise ModelCacheError(f"{self._index_path()} is damaged ({error}); delete it and "
                                  "the models/ folder next to it to start the cache afresh") from error

    def _write_index(self, models: dict[str, dict]) -> None:  # type: ignore[type-arg]
        self.root.mkdir(parents=True, exist_ok=True)
        temporary = self._index_path().with_suffix(".tmp")
        temporary.write_text(json.dumps({"models": models}, indent=2, sort_keys=True), encoding="utf-8")
        temporary.replace(self._index_path())

    def models(self) -> list[CachedModel]:
        """Cached models, least recently used first."""
        entries = self._read_index()
        found = [(e.get("use", 0), CachedModel(hub_id, e["revision"], self.root / "models" / e["folder"],
                                               e["bytes"], e["last_used_ms"]))
                 for hub_id, e in entries.items()]
        return [model for _, model in sorted(found, key=lambda pair: (pair[0], pair[1].hub_id))]

    def used_bytes(self) -> int:
        partial = self.root / "partial"
        in_progress = sum(f.stat().st_size for f in partial.rglob("*") if f.is_file()) if partial.exists() else 0
        return sum(m.size_bytes for m in self.models()) + in_progress

    # --- fetching ----------------------------------------------------------

    def fetch(self, hub_id: str, progress: Progress | None = None) -> Path:
        """The model's directory, downloading what is missing; marks it in use (never evicted)."""
        match = HUB_ID_PATTERN.fullmatch(hub_id)
        if match is None:
            raise ModelCacheError(f"{hub_id!r} is not a hub id like org/name or org/name@revision")
        with self._lock:
            entry = self._read_index().get(hub_id)
            if entry is not None and (self.root / "models" / entry["folder"]).is_dir():
                self._touch(hub_id)
                self._in_use.add(hub_id)
                return self.root / "models" / entry["folder"]
        revision, files = self._listing(match["repo"], match["revision"])
        with self._lock:
            self._make_room(sum(f.size for f in files), protect=hub_id)
        partial = self.root / "partial" / _folder_name(match["repo"])
        self._download_all(match["repo"], revision, files, partial, progress)
        with self._lock:
            return self._install(hub_id, revision, files, partial)

    def _listing(self, repo: str, revision: str | None) -> tuple[str, list[HubFile]]:
        try:
            info = HfApi(endpoint=self._endpoint).model_info(repo, revision=revision,
                                                             files_metadata=True, timeout=HTTP_TIMEOUT_S)
        except (HfHubHTTPError, HttpTransferError, OSError) as error:
            raise ModelCacheError(f"cannot list {repo} on the hub ({error}); check the id, "
                                  "the network, or HF_ENDPOINT") from error
        files = [HubFile(s.rfilename, s.size or 0, s.lfs.sha256 if s.lfs else None, s.blob_id)
                 for s in info.siblings or [] if WANTED_FILE.fullmatch(s.rfilename)]
        if not any(f.name == "config.json" for f in files):
            raise ModelCacheError(f"{repo} has no config.json at its top level: not an MLX model")
        if len(files) > FILES_PER_MODEL_MAX:
            raise ModelCacheError(f"{repo} has {len(files)} files; at most {FILES_PER_MODEL_MAX}")
        assert info.sha, "the hub names the commit it lists"
        return info.sha, files

    def _make_room(self, needed_bytes: int, protect: str) -> None:
        """Evict least recently used models (never those in use) until needed_bytes fit."""
        if needed_bytes > self.quota_bytes:
            raise ModelCacheError(f"the model needs {needed_bytes / 2**30:.1f} GiB but the cache "
                                  f"quota is {self.quota_bytes / 2**30:.1f} GiB; raise cache.quota_gb "
                                  "with `mlxnet node config --cache-quota-gb`")
        entries = self._read_index()
        for model in self.models():
            if self.used_bytes() + needed_bytes <= self.quota_bytes:
                return
            if model.hub_id in self._in_use or model.hub_id == protect:
                continue
            log.info("evicting %s (%.1f GiB, least recently used) to make room", model.hub_id,
                     model.size_bytes / 2**30)
            shutil.rmtree(model.directory, ignore_errors=True)
            entries.pop(model.hub_id, None)
            self._write_index(entries)
        if self.used_bytes() + needed_bytes > self.quota_bytes:
            raise ModelCacheError(f"no room for {needed_bytes / 2**30:.1f} GiB within the "
                                  f"{self.quota_bytes / 2**30:.1f} GiB quota: the models in use "
                                  "fill it; raise cache.quota_gb")

    def _download_all(self, repo: str, revision: str, files: list[HubFile], partial: Path,
                      progress: Progress | None) -> None:
        partial.mkdir(parents=True, exist_ok=True)
        total = sum(f.size for f in files)
        done = sum(min((partial / f.name).stat().st_size, f.size)
                   for f in files if (partial / f.name).exists())
        for hub_file in files:
            target = partial / hub_file.name
            have = target.stat().st_size if target.exists() else 0
            if have < hub_file.size or not target.exists():
                url = hf_hub_url(repo, hub_file.name, revision=revision, endpoint=self._endpoint)
                done = self._download(url, hub_file, target, have, done, total, progress)
            self._verify(hub_file, target)

    def _download(self, url: str, hub_file: HubFile, target: Path, have: int, done: int,
                  total: int, progress: Progress | None) -> int:
        headers = build_hf_headers()
        headers["Accept-Encoding"] = "identity"
        if have:
            headers["Range"] = f"bytes={have}-"
            log.info("resuming %s at %d of %d bytes", hub_file.name, have, hub_file.size)
        try:
            with get_session().stream("GET", url, headers=headers, follow_redirects=True,
                                      timeout=HTTP_TIMEOUT_S) as response:
                if response.status_code == 200 and have:
                    have, done = 0, done - have  # the server ignored Range: start over
                    target.unlink(missing_ok=True)
                elif response.status_code not in (200, 206):
                    raise ModelCacheError(f"{url} answered HTTP {response.status_code}")
                with target.open("ab") as handle:
                    for chunk in response.iter_bytes():  # as received: a cut keeps what arrived
                        handle.write(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(hub_file.name, done, total)
        except (OSError, HttpTransferError) as error:
            raise ModelCacheError(f"download of {hub_file.name} stopped ({error}); run the same "
                                  "command again to resume") from error
        return done

    def _verify(self, hub_file: HubFile, path: Path) -> None:
        size = path.stat().st_size
        if hub_file.sha256 is not None:
            ok, what = sha256_file(path) == hub_file.sha256, "sha256"
        elif hub_file.git_blob_id is not None:
            ok, what = git_blob_sha1(path) == hub_file.git_blob_id, "git blob id"
        else:
            ok, what = size == hub_file.size, "size"
        if not ok or (hub_file.size and size != hub_file.size):
            path.unlink(missing_ok=True)
            raise ModelCacheError(f"{hub_file.name} does not match the hub's {what}; the damaged "
                                  "file was deleted, run the same command again to download it")

    def _install(self, hub_id: str, revision: str, files: list[HubFile], partial: Path) -> Path:
        folder = _folder_name(hub_id.replace("@", "--"))
        final = self.root / "models" / folder
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            shutil.rmtree(final)
        partial.rename(final)
        entries = self._read_index()
        entries[hub_id] = dict(revision=revision, folder=folder, bytes=sum(f.size for f in files),
                               last_used_ms=time.time_ns() // 1_000_000, use=_next_use(entries))
        self._write_index(entries)
        self._in_use.add(hub_id)
        log.info("cached %s at revision %s in %s", hub_id, revision[:12], final)
        return final

    def _touch(self, hub_id: str) -> None:
        entries = self._read_index()
        entries[hub_id].update(last_used_ms=time.time_ns() // 1_000_000, use=_next_use(entries))
        self._write_index(entries)

    def release(self, hub_id: str) -> None:
        """The model is no longer served here: it may be evicted."""
        with self._lock:
            self._in_use.discard(hub_id)

    def evict(self, hub_id: str) -> bool:
        with self._lock:
            entries = self._read_index()
            entry = entries.pop(hub_id, None)
            if entry is None or hub_id in self._in_use:
                return False
            shutil.rmtree(self.root / "models" / entry["folder"], ignore_errors=True)
            self._write_index(entries)
            return True
