"""The coordinator's limits and settings, one frozen value passed everywhere."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from coordinator.verification.peers import PeerCheckPolicy
from coordinator.verification.policy import TrustPolicy
from ledger.api import ChainSettings
from coordinator.verification.tolerances import Tolerances


@dataclass(frozen=True)
class RegistrationLimits:
    """How fast nodes may join (token buckets, coordinator.nodes.admission), and when they expire."""

    per_address_burst: int = 60  # a lab of Macs behind one NAT registers at once
    per_address_per_minute: int = 30
    per_operator_burst: int = 200
    per_operator_per_minute: int = 60
    buckets_max: int = 100_000  # past this the least recently used bucket is dropped
    # A node silent this long is expired: marked left, placed on never again until it registers.
    node_expire_after_ms: int = 7 * 24 * 3600 * 1000

    def __post_init__(self) -> None:
        assert self.per_address_burst > 0 and self.per_address_per_minute > 0
        assert self.per_operator_burst > 0 and self.per_operator_per_minute > 0
        assert self.buckets_max > 0 and self.node_expire_after_ms > 0


@dataclass(frozen=True)
class CoordinatorConfig:
    database_url: str
    prompt_chars_max: int = 32_000
    max_tokens_max: int = 4_096
    max_tokens_default: int = 128
    request_id_chars_max: int = 128
    # How often nodes heartbeat (Register tells them). Shorter finds a vanished Mac sooner and
    # costs the coordinator more per Mac: see the README's "Heartbeats and what they cost".
    heartbeat_interval_ms: int = 2_000
    node_offline_after_ms: int = 10_000  # missed heartbeats before a node counts as offline
    # Liveness lives in memory and reaches the database in batches, this often (nodes.liveness).
    liveness_flush_interval_ms: int = 1_000
    # A node's session as last read serves its heartbeats this long (nodes.session_cache).
    session_cache_ttl_ms: int = 30_000
    # The same while the relay is up: it carries registrations and leaves made through other
    # coordinators, and each drops the node's cached session at once. At 30 s a heartbeat every
    # 10 s re-read its session once in 3 beats (a PostgreSQL transaction each); this costs 1 in 60.
    session_cache_relayed_ttl_ms: int = 600_000
    # How often the reaper looks for nodes no coordinator hears that still hold jobs (those of
    # a coordinator that died); it hears its own nodes stop without reading the database.
    orphan_sweep_interval_ms: int = 60_000
    stream_poll_interval_s: float = 1.0  # fallback wake-up when another coordinator wrote
    # With PostgreSQL the coordinators relay their wake-ups (live/pg_relay.py), so streams
    # wait for news and read the database only this often, as a safety net. Node streams do
    # not read at all: one sweep per process this often wakes those with unsent work.
    relayed_poll_interval_s: float = 60.0
    queued_jobs_scan_max: int = 256  # jobs considered per scheduling pass
    # The scheduler keeps one placement index across passes and re-reads only Macs that
    # changed; it is rebuilt from scratch this often anyway, as a safety net.
    fleet_rebuild_interval_ms: int = 60_000
    consumer_default: str = "anonymous"
    # Consumers without an API key are refused unless this is set (`--allow-anonymous`);
    # the network pays for anonymous jobs.
    allow_anonymous: bool = False
    busy_retry_after_s: int = 2  # Retry-After when no Mac can take a job now
    admission_wait_s: float = 10.0  # how long an HTTP job may queue for a Mac before a 503
    # Proof of completion: which share of a node's jobs is replayed, how long credits stay
    # held, when a node is quarantined (coordinator.verification.policy), and how far an
    # honest replay may stray (coordinator.verification.tolerances).
    trust: TrustPolicy = field(default_factory=TrustPolicy)
    tolerances: Tolerances = field(default_factory=Tolerances)
    credits_released_per_pass_max: int = 500
    # Checks by peers: who may check whom, their deadline, the checker's fee (verification.peers).
    peer_checks: PeerCheckPolicy = field(default_factory=PeerCheckPolicy)
    # How fast nodes may register, per source address and per operator, and when a silent
    # node expires (coordinator.nodes.admission).
    registration_limits: RegistrationLimits = field(default_factory=RegistrationLimits)
    # Demos only (`mlxnet coordinator --trust-simulated-hardware`): place nodes that declare a
    # simulated Mac (--profile) by the chip they declare, unmeasured. Never pays a seat bonus.
    trust_simulated_hardware: bool = False
    # Challenge benchmarks (coordinator/nodes/spot_benchmarks.py): each verified Mac gets one at
    # random times, on average this often; the loop that draws them runs every pass interval.
    challenge_mean_interval_s: float = 6 * 3600.0
    challenge_pass_interval_s: float = 10.0
    # The coordinator's Ed25519 key for the ledger (created on first use): it signs each closed
    # epoch's journal head and operators' statements. None: epochs close unsigned (tests).
    ledger_key_path: Path | None = None
    # Where the coordinator's own anvil keeps its state and contract addresses (ledger.anvil), when
    # MLXNET_PAYOUT_RPC_URL names no chain. None: an in-process chain that ends with the process (tests).
    chain_dir: Path | None = None
    # Where roots are anchored and how (`--chain-*` flags): a real network's RPC URL, chain id,
    # distributor and publisher key, the confirmations an anchor waits for, and the gas caps.
    chain: ChainSettings = field(default_factory=ChainSettings)

    def __post_init__(self) -> None:
        assert self.max_tokens_default <= self.max_tokens_max
        assert self.node_offline_after_ms > self.heartbeat_interval_ms
        assert self.fleet_rebuild_interval_ms > 0
        assert self.challenge_mean_interval_s > 0 and self.challenge_pass_interval_s > 0
        assert self.liveness_flush_interval_ms > 0
        assert self.session_cache_ttl_ms >= 0 and self.orphan_sweep_interval_ms > 0
        assert self.session_cache_relayed_ttl_ms >= self.session_cache_ttl_ms

    @property
    def liveness_flush_ms(self) -> int:
        """The flush interval, never more than a quarter of the offline limit (a lease is refreshed
        once half spent, so a batch must come well before it runs out)."""
        return max(1, min(self.liveness_flush_interval_ms, self.node_offline_after_ms // 4))
