"""The operator's settings, kept in a TOML file they can read and edit (`node.toml`).

`mlxnet node config` writes it; the agent reads it at start. Every value has a
limit, and a bad value is refused with a message naming the key and the fix.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from contracts.hardware import LinkKind
from contracts.lending import LendingMode
from contracts.pods import POD_ID_PATTERN, POD_MEMBERS_MAX
from contracts.tls import normalize_fingerprint
from node_agent.lending.schedule import ScheduleError, parse_schedule

CONFIG_FILE_NAME = "node.toml"
MODELS_MAX = 64
IDLE_MINUTES_MAX = 24 * 60
HANDBACK_S_MAX = 3600.0
BENCHMARK_MODES = ("auto", "on", "off")
POD_BACKENDS = ("auto", "ring", "jaccl")


class ConfigError(ValueError):
    """The config file or a `mlxnet node config` flag holds a value the agent cannot use."""


@dataclass(frozen=True)
class LendingConfig:
    mode: LendingMode = LendingMode.IDLE
    idle_minutes: float = 10.0  # idle lending: minutes without keyboard or mouse input
    require_ac_power: bool = True
    pause_when_throttled: bool = True
    schedule: tuple[str, ...] = ()  # windows like "Mon-Fri 22:00-07:00"; empty means any time
    memory_cap_gb: float = 0.0  # 0 means no cap beyond the GPU budget
    handback_after_s: float = 30.0  # once the owner is back: finish within this or hand back
    poll_seconds: float = 5.0  # how often idle time, power and heat are read
    # Read idle time, power and heat from this JSON file instead of ioreg and pmset
    # (node_agent.lending.activity); for tests and rehearsals. Empty: the real host.
    activity_file: str = ""


@dataclass(frozen=True)
class BenchmarkConfig:
    enabled: str = "auto"  # auto: on for real hardware, off for --profile simulations
    interval_minutes: float = 360.0


@dataclass(frozen=True)
class CacheConfig:
    directory: str = "~/.mlxnet/models"
    quota_gb: float = 200.0


@dataclass(frozen=True)
class PodLinkConfig:
    a: str
    b: str
    kind: LinkKind = LinkKind.TCP_THUNDERBOLT
    cables: int = 1


@dataclass(frozen=True)
class PodConfig:
    """Declared on the leader. hosts are what mlx.launch reaches each member by (ssh name);
    ips the addresses the ring backend connects to; rdma the jaccl device matrix."""

    pod_id: str
    members: tuple[str, ...]  # node ids in rank order, this node (the leader) first
    hosts: tuple[str, ...]
    ips: tuple[str, ...]
    links: tuple[PodLinkConfig, ...]
    backend: str = "auto"  # auto: jaccl when every link is RDMA, else ring
    rdma_devices: tuple[tuple[str | None, ...], ...] = ()  # jaccl: [i][j] device from i to j


REGION_CHARS_MAX = 64  # as MLX World's regions


@dataclass(frozen=True)
class NodeConfig:
    coordinator: str = ""
    operator: str = ""
    name: str = ""
    region: str = ""  # published on MLX World's map: "Europe/Lisbon", "Lisbon" or "38.72, -9.13"
    models: tuple[str, ...] = ()  # "[ID=]PATH" or a Hugging Face hub id
    lending: LendingConfig = LendingConfig()
    benchmark: BenchmarkConfig = BenchmarkConfig()
    cache: CacheConfig = CacheConfig()
    pod: PodConfig | None = None
    # (HOST:PORT, certificate fingerprint) of coordinators joined, as SSH's known_hosts:
    # pinned on the first join, and a coordinator showing another certificate is refused.
    known_coordinators: tuple[tuple[str, str], ...] = ()

    @property
    def memory_cap_bytes(self) -> int | None:
        return int(self.lending.memory_cap_gb * 2**30) or None

    def fingerprint_for(self, address: str) -> str:
        """The pinned fingerprint of the coordinator at address, or "" when never joined."""
        return dict(self.known_coordinators).get(address, "")

    def knowing(self, address: str, fingerprint: str) -> NodeConfig:
        """This config with the coordinator at address pinned to fingerprint."""
        known = dict(self.known_coordinators)
        known[address] = fingerprint
        return dataclasses.replace(self, known_coordinators=tuple(sorted(known.items())))


def validate(config: NodeConfig) -> NodeConfig:
    lending = config.lending
    _check(0 < lending.idle_minutes <= IDLE_MINUTES_MAX,
           f"lending.idle_minutes must be above 0 and at most {IDLE_MINUTES_MAX}")
    _check(0 <= lending.handback_after_s <= HANDBACK_S_MAX,
           f"lending.handback_after_s must be 0 to {HANDBACK_S_MAX:.0f} seconds")
    _check(lending.memory_cap_gb >= 0, "lending.memory_cap_gb must be 0 (no cap) or more")
    _check(0.1 <= lending.poll_seconds <= 300, "lending.poll_seconds must be 0.1 to 300")
    try:
        parse_schedule(lending.schedule)
    except ScheduleError as error:
        raise ConfigError(f"lending.schedule: {error}") from error
    _check(config.benchmark.enabled in BENCHMARK_MODES,
           f"benchmark.enabled must be one of {', '.join(BENCHMARK_MODES)}")
    _check(config.benchmark.interval_minutes >= 1, "benchmark.interval_minutes must be at least 1")
    _check(config.cache.quota_gb > 0, "cache.quota_gb must be positive")
    _check(len(config.region) <= REGION_CHARS_MAX, f"region must be at most {REGION_CHARS_MAX} characters")
    _check(len(config.models) <= MODELS_MAX, f"at most {MODELS_MAX} models")
    if config.pod is not None:
        _validate_pod(config.pod)
    return config


def _validate_pod(pod: PodConfig) -> None:
    _check(bool(POD_ID_PATTERN.fullmatch(pod.pod_id)),
           "pod.id must be 1 to 128 letters, digits, '.', '_' or '-'")
    _check(2 <= len(pod.members) <= POD_MEMBERS_MAX, f"pod.members lists 2 to {POD_MEMBERS_MAX} nodes")
    _check(len(pod.hosts) == len(pod.members) == len(pod.ips),
           "pod.hosts and pod.ips need one entry per pod member, in the same order")
    _check(pod.backend in POD_BACKENDS, f"pod.backend must be one of {', '.join(POD_BACKENDS)}")
    members = set(pod.members)
    _check(all(link.a in members and link.b in members and link.a != link.b for link in pod.links),
           "every pod.links entry joins two different members")
    _check(bool(pod.links), "pod.links must list the cables between members")
    _check(not pod.rdma_devices or (len(pod.rdma_devices) == len(pod.members)
                                    and all(len(row) == len(pod.members) for row in pod.rdma_devices)),
           "pod.rdma_devices is a members x members matrix (null on the diagonal)")


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


# --- reading -------------------------------------------------------------

def load_config(path: Path) -> NodeConfig:
    """The config at path, or the defaults when there is no file yet."""
    if not path.exists():
        return NodeConfig()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from error
    try:
        return validate(_from_dict(data))
    except (TypeError, ValueError) as error:
        if isinstance(error, ConfigError):
            raise ConfigError(f"{path}: {error}") from error
        raise ConfigError(f"{path}: {error}") from error


def _section(data: dict, name: str) -> dict:  # type: ignore[type-arg]
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[{name}] must be a table")
    return value


def _known(cls: type, values: dict, section: str, renames: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    renames = renames or {}
    names = {f.name for f in dataclasses.fields(cls)}
    result = {}
    for key, value in values.items():
        name = renames.get(key, key)
        if name not in names:
            raise ConfigError(f"unknown key {section}{key}; known keys: "
                              f"{', '.join(sorted(set(names) - set(renames.values()) | set(renames)))}")
        result[name] = tuple(value) if isinstance(value, list) else value
    return result


def _from_dict(data: dict) -> NodeConfig:  # type: ignore[type-arg]
    top = {k: v for k, v in data.items() if not isinstance(v, dict)}
    lending = _known(LendingConfig, _section(data, "lending"), "lending.")
    if "mode" in lending:
        try:
            lending["mode"] = LendingMode(lending["mode"])
        except ValueError as error:
            raise ConfigError(f"lending.mode must be one of "
                              f"{', '.join(m.value for m in LendingMode)}") from error
    pod_data = data.get("pod")
    known = _section(data, "known_coordinators")
    try:
        pins = tuple(sorted((str(address), normalize_fingerprint(str(fingerprint)))
                            for address, fingerprint in known.items()))
    except ValueError as error:
        raise ConfigError(f"known_coordinators: {error}") from error
    return NodeConfig(
        **_known(NodeConfig, top, ""),
        known_coordinators=pins,
        lending=LendingConfig(**lending),
        benchmark=BenchmarkConfig(**_known(BenchmarkConfig, _section(data, "benchmark"), "benchmark.")),
        cache=CacheConfig(**_known(CacheConfig, _section(data, "cache"), "cache.", {"dir": "directory"})),
        pod=_pod_from_dict(pod_data) if pod_data else None)


def _pod_from_dict(data: dict) -> PodConfig:  # type: ignore[type-arg]
    values = _known(PodConfig, data, "pod.", {"id": "pod_id"})
    try:
        values["links"] = tuple(PodLinkConfig(link["a"], link["b"], LinkKind(link.get("kind", "tcp_thunderbolt")),
                                              int(link.get("cables", 1)))
                                for link in values.get("links", ()))
    except (KeyError, ValueError) as error:
        raise ConfigError("each pod.links entry needs a, b, and a kind among "
                          f"{', '.join(k.value for k in LinkKind)}") from error
    values["rdma_devices"] = tuple(tuple(device or None for device in row)
                                   for row in values.get("rdma_devices", ()))
    for required in ("pod_id", "members", "hosts", "ips"):
        _check(required in values, f"pod.{'id' if required == 'pod_id' else required} is required")
    return PodConfig(**values)


# --- writing -------------------------------------------------------------

def _value(value: object) -> str:
    """TOML for the few value types the config holds (JSON strings are valid TOML strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return '""'
    if isinstance(value, tuple):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    raise AssertionError(f"no TOML for {type(value).__name__}")


def dump_config(config: NodeConfig) -> str:
    lines = ["# MLX Network node agent. Edit by hand or with `mlxnet node config`;",
             "# the agent reads this when it starts.", ""]
    for name in ("coordinator", "operator", "name", "models"):
        lines.append(f"{name} = {_value(getattr(config, name))}")
    lines.append(f"region = {_value(config.region)}  # MLX World's map: \"Europe/Lisbon\", \"Lisbon\" "
                 "or \"38.72, -9.13\"; empty: not shown")
    lending = config.lending
    lines += ["", "[lending]",
              f"mode = {_value(lending.mode.value)}  # idle, dedicated or ultra_seat",
              f"idle_minutes = {_value(lending.idle_minutes)}  # idle mode: minutes without input before taking work",
              f"require_ac_power = {_value(lending.require_ac_power)}",
              f"pause_when_throttled = {_value(lending.pause_when_throttled)}",
              f"schedule = {_value(lending.schedule)}  # e.g. [\"Mon-Fri 22:00-07:00\"]; empty: any time",
              f"memory_cap_gb = {_value(lending.memory_cap_gb)}  # 0: no cap",
              f"handback_after_s = {_value(lending.handback_after_s)}  # owner back: finish within this or hand back",
              f"poll_seconds = {_value(lending.poll_seconds)}",
              *([f"activity_file = {_value(lending.activity_file)}  # instead of ioreg/pmset"]
                if lending.activity_file else []),
              "", "[benchmark]",
              f"enabled = {_value(config.benchmark.enabled)}  # auto, on or off",
              f"interval_minutes = {_value(config.benchmark.interval_minutes)}",
              "", "[cache]",
              f"dir = {_value(config.cache.directory)}",
              f"quota_gb = {_value(config.cache.quota_gb)}"]
    if config.pod is not None:
        lines += _dump_pod(config.pod)
    if config.known_coordinators:
        lines += ["", "[known_coordinators]  # HOST:PORT = its certificate's SHA-256, pinned at the first join",
                  *(f"{_value(address)} = {_value(fingerprint)}"
                    for address, fingerprint in config.known_coordinators)]
    return "\n".join(lines) + "\n"


def _dump_pod(pod: PodConfig) -> list[str]:
    lines = ["", "[pod]", f"id = {_value(pod.pod_id)}",
             f"members = {_value(pod.members)}  # node ids, rank order, the leader (this node) first",
             f"hosts = {_value(pod.hosts)}  # how mlx.launch reaches each member (ssh)",
             f"ips = {_value(pod.ips)}  # addresses the ring backend uses",
             f"backend = {_value(pod.backend)}  # auto, ring or jaccl"]
    if pod.rdma_devices:
        # TOML has no null: "" marks a member's own (absent) device.
        rows = ", ".join("[" + ", ".join(_value(d or "") for d in row) + "]"
                         for row in pod.rdma_devices)
        lines.append(f"rdma_devices = [{rows}]  # jaccl: device from member i to member j")
    links = ", ".join(f"{{ a = {_value(link.a)}, b = {_value(link.b)}, kind = {_value(link.kind.value)}, "
                      f"cables = {link.cables} }}" for link in pod.links)
    lines.append(f"links = [{links}]")
    return lines


def save_config(path: Path, config: NodeConfig) -> None:
    """Write atomically, so the agent never reads half a file."""
    validate(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".toml.tmp")
    temporary.write_text(dump_config(config), encoding="utf-8")
    temporary.replace(path)
