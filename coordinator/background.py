"""The coordinator's background loops, each supervised.

    liveness    writes node liveness and uptime spans in batches, only what changed (nodes.liveness)
    streams     wakes node streams that hold unsent work, a safety net for lost relayed wake-ups
    reaper      hands back the jobs of nodes whose heartbeats stopped (after the restart grace)
    billing     resolves the reservations of jobs that ended without closing them
    credits     posts held credits whose check window closed (a pass only once one is due)
    postings    posts the ledger entries receipts queued, many per group commit (ledger.posting_queue)
    scheduler   places queued jobs (a safety net: submits, heartbeats and receipts also ask)
    index       rebuilds the placement index aside when its safety-net rebuild is due
    verifier    replays sampled jobs and challenge answers, when this coordinator holds a verifier
    peers       hands sampled jobs to peer nodes to check, and lapsed checks to other peers
    epochs      closes each ledger epoch once it ends and anchors its root
    spot-checks sends verified Macs challenge benchmarks at random times, fails unanswered ones

A loop's pass that fails (the database is away, or a bug) never ends its thread: the loop
logs it, reports itself unhealthy on the process's HealthBoard, backs off (doubling up to
BACKOFF_S_MAX) and tries again; its first pass that works makes it healthy again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.errors import DatabaseUnavailable
from coordinator.live.health import HealthBoard
from coordinator.money.epochs import EpochCloser, EpochSettings, payout_chain_from_environment
from ledger.api import HeadSigner, PayoutChainLike
from coordinator.service import VERIFICATION_TOPIC, CoordinatorService

log = logging.getLogger(__name__)

BACKOFF_S_MIN = 0.5
BACKOFF_S_MAX = 30.0
# Failures a loop expects and rides out; anything else is a bug, logged with its traceback.
EXPECTED_ERRORS: tuple[type[Exception], ...] = (DatabaseUnavailable, OSError)
# A dispatch pass re-reads every waiting check (up to 64); woken by each receipt, its cost
# grew with jobs x waiting checks. Checks have deadlines of minutes: a second's wait is nothing.
PEER_PASS_GAP_S = 1.0
# The verifier loop, woken by every receipt, gathers the checks opened over this long into one
# pass: each pass reads the waiting checks and the challenge answers, a transaction each, per
# receipt before; a replay takes seconds, so 0.2 s more before one starts is nothing.
VERIFIER_PASS_GAP_S = 0.2
# The postings loop gathers the receipts of this long into one group commit, and looks for rows
# another coordinator (or one before a restart) queued every POSTING_SWEEP_S.
POSTING_GATHER_S = 0.2
POSTING_SWEEP_S = 10.0
# The liveness loop, woken by a node coming back, gathers the comebacks of this long into one
# batch: a coordinator that fell behind sees thousands a second, each once a transaction of its own.
COMEBACK_GATHER_S = 0.2


@dataclass(frozen=True)
class Loop:
    name: str
    step: Callable[[], object]  # one pass
    pause: Callable[[], object]  # between passes that worked (returns early when stopping)


def supervise(loop: Loop, stopping: threading.Event, health: HealthBoard,
              backoff_s_min: float = BACKOFF_S_MIN, backoff_s_max: float = BACKOFF_S_MAX) -> None:
    """Run loop.step until stopping, surviving every failure of a pass (see the module doc)."""
    delay_s = backoff_s_min
    while not stopping.is_set():
        try:
            loop.step()
        except EXPECTED_ERRORS as error:
            state = health.failed(loop.name, error, _now_ms())
            log.warning("%s: pass failed (%d in a row), retrying in %.1f s: %s", loop.name,
                        state.failures, delay_s, error)
        except Exception as error:  # noqa: BLE001 (the supervisor: a bug must not end the loop)
            state = health.failed(loop.name, error, _now_ms())
            log.exception("%s: pass failed with an unexpected error (%d in a row), retrying in "
                          "%.1f s", loop.name, state.failures, delay_s)
        else:
            health.ok(loop.name)
            delay_s = backoff_s_min
            loop.pause()
            continue
        stopping.wait(delay_s)
        delay_s = min(delay_s * 2, backoff_s_max)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def coordinator_loops(service: CoordinatorService, stopping: threading.Event,
                      epoch_settings: EpochSettings,
                      chain_factory: Callable[[], PayoutChainLike] = payout_chain_from_environment,
                      ledger_signer: HeadSigner | None = None) -> list[Loop]:
    interval_s = service.config.heartbeat_interval_ms / 1000

    def every(seconds: float) -> Callable[[], object]:
        return lambda: stopping.wait(seconds)

    loops = [
        _liveness_loop(service, stopping),
        Loop("streams", service.nodes.sweep_streams, every(service.config.relayed_poll_interval_s)),
        Loop("reaper", service.nodes.reap_offline, every(interval_s)),
        Loop("billing", service.money.close_ended, every(interval_s)),
        Loop("credits", service.money.release_credits_when_due, every(interval_s)),
        _postings_loop(service, stopping),
        Loop("scheduler", service.run_scheduler, every(interval_s)),
        Loop("index", service.rebuild_index_aside, every(interval_s)),
        _epochs_loop(EpochCloser(service.db, epoch_settings, chain_factory, ledger_signer,
                                 service.config.chain.confirmations), stopping),
        Loop("spot-checks", service.spot_checks.issue_due, every(service.config.challenge_pass_interval_s)),
    ]
    if service.checks.verifier is not None:
        loops.append(_verifier_loop(service, stopping))
    if service.config.peer_checks.enabled:
        loops.append(_peers_loop(service, stopping, interval_s))
    return loops


def _peers_loop(service: CoordinatorService, stopping: threading.Event, interval_s: float,
                gap_s: float = PEER_PASS_GAP_S) -> Loop:
    """Wakes when a check is opened or disputed, and each heartbeat interval for deadlines; at
    most one pass per gap_s, so the checks opened meanwhile go in one pass, not one each."""
    seen = [service.notifier.version(VERIFICATION_TOPIC)]

    def step() -> None:
        seen[0] = service.notifier.version(VERIFICATION_TOPIC)
        service.peers.dispatch()

    def pause() -> None:
        # A wake-up during the gap is not lost: the version seen predates it.
        if not stopping.wait(gap_s):
            service.notifier.wait(VERIFICATION_TOPIC, seen[0], max(0.0, interval_s - gap_s))

    return Loop("peers", step, pause)


def _liveness_loop(service: CoordinatorService, stopping: threading.Event,
                   gather_s: float = COMEBACK_GATHER_S) -> Loop:
    """Every flush interval, and sooner when a node came back: then it waits gather_s for more
    comebacks, and writes them all in one batch followed by one scheduling pass."""
    flush_s = service.config.liveness_flush_ms / 1000
    queued = service.nodes.comebacks_queued

    def pause() -> None:
        started = time.monotonic()
        if queued.wait(flush_s) and not stopping.is_set():
            stopping.wait(min(gather_s, max(0.0, flush_s - (time.monotonic() - started))))

    return Loop("liveness", service.nodes.flush_liveness, pause)


def _postings_loop(service: CoordinatorService, stopping: threading.Event,
                   gather_s: float = POSTING_GATHER_S, sweep_s: float = POSTING_SWEEP_S) -> Loop:
    """Wakes when a receipt queues a posting (or every sweep_s), waits gather_s for more, and
    posts them all in one transaction."""
    queued = service.core.completions_queued

    def pause() -> None:
        if queued.wait(sweep_s) and not stopping.is_set():
            stopping.wait(gather_s)

    return Loop("postings", service.money.post_completions, pause)


def _verifier_loop(service: CoordinatorService, stopping: threading.Event,
                   gap_s: float = VERIFIER_PASS_GAP_S) -> Loop:
    """Wakes when a check is opened (or to poll another coordinator's); at most one pass per
    gap_s, so the checks opened meanwhile go in one pass, not one each."""
    seen = [service.notifier.version(VERIFICATION_TOPIC)]

    def step() -> None:
        seen[0] = service.notifier.version(VERIFICATION_TOPIC)
        service.checks.run()
        assert service.checks.verifier is not None
        service.spot_checks.replay_answers(service.checks.verifier.checker)  # challenge answers too

    def pause() -> None:
        # A wake-up during the gap is not lost: the version seen predates it.
        if not stopping.wait(gap_s):
            service.notifier.wait(VERIFICATION_TOPIC, seen[0], max(0.0, service.core.poll_interval_s() - gap_s))

    return Loop("verifier", step, pause)


def _epochs_loop(closer: EpochCloser, stopping: threading.Event) -> Loop:
    """Close each epoch once it ends, then anchor its root (a close is one transaction and
    anchoring is idempotent, so a failed pass is simply tried again)."""
    return Loop("epochs", closer.step, lambda: stopping.wait(closer.interval_s))


def start_loops(loops: list[Loop], stopping: threading.Event, health: HealthBoard) -> list[threading.Thread]:
    threads = [threading.Thread(target=supervise, args=(loop, stopping, health), daemon=True,
                                name=loop.name) for loop in loops]
    for thread in threads:
        thread.start()
    return threads
