"""What a node's assignment stream reads when it wakes. Pure.

A wake-up read the node's jobs, its check jobs and its challenges, though most wake-ups are for
a job. With a working relay, whoever assigns a check job or issues a challenge also notifies
that kind's topic (notifier.node_checks_topic, node_challenges_topic), so a stream reads each
kind when its topic moved, and every kind at least once per `full_read_ms`: a wake-up relayed
by a coordinator that names only the node's topic (an older one) waits at most that long.
Without a relay nothing says what changed elsewhere: every wake-up reads everything.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KindVersions:
    """The notifier's versions of a node's check-job and challenge topics."""

    checks: int
    challenges: int


@dataclass(frozen=True)
class Reads:
    checks: bool
    challenges: bool


@dataclass(frozen=True)
class LastReads:
    """What the stream read last: each kind's topic version then, and when it last read every kind."""

    versions: KindVersions
    full_read_at_ms: int


def reads_due(now: KindVersions, last: LastReads | None, relayed: bool, now_ms: int, full_read_ms: int) -> Reads:
    """Which kinds this wake-up reads (its jobs are always read)."""
    if not relayed or last is None or now_ms - last.full_read_at_ms >= full_read_ms:
        return Reads(True, True)
    return Reads(now.checks != last.versions.checks, now.challenges != last.versions.challenges)


def after_reads(now: KindVersions, last: LastReads | None, reads: Reads, now_ms: int) -> LastReads:
    """The stream's LastReads once it has read `reads` (versions taken before the read)."""
    assert last is not None or (reads.checks and reads.challenges), "a stream's first read reads everything"
    if reads.checks and reads.challenges:
        return LastReads(now, now_ms)
    assert last is not None
    versions = KindVersions(now.checks if reads.checks else last.versions.checks,
                            now.challenges if reads.challenges else last.versions.challenges)
    return LastReads(versions, last.full_read_at_ms)
