"""Several coordinators as one service: which address to try next, and how long to wait first.

Nodes and consumers may be given several coordinator addresses (`--coordinator a:443,b:443`).
They hold one connection at a time; when it breaks they go on to the next address at once,
and only once every address has failed in a row do they back off, exponentially with jitter,
so a fleet whose coordinator died spreads over the others instead of reconnecting in step.
Pure: the random draw is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from contracts.tls import normalize_fingerprint, split_address

ADDRESSES_MAX = 16  # coordinators one client may be given
DELAY_S_MIN = 0.1  # the backoff after a full round of failures, doubling up to the max
DELAY_S_MAX = 5.0
NEXT_ADDRESS_DELAY_S_MAX = 0.05  # between two addresses of one round: a little jitter only


def parse_addresses(text: str) -> tuple[str, ...]:
    """`HOST:PORT[,HOST:PORT...]` into its addresses, in order; raises ValueError naming the fault."""
    addresses = tuple(part.strip() for part in text.split(",") if part.strip())
    if not addresses:
        raise ValueError("--coordinator needs at least one HOST:PORT")
    if len(addresses) > ADDRESSES_MAX:
        raise ValueError(f"--coordinator takes at most {ADDRESSES_MAX} addresses, "
                         f"not {len(addresses)}")
    if len(set(addresses)) != len(addresses):
        raise ValueError(f"--coordinator names an address twice: {text!r}")
    for address in addresses:
        split_address(address)  # raises ValueError for one that is not HOST:PORT
    return addresses


def parse_fingerprints(text: str, addresses: tuple[str, ...]) -> dict[str, str]:
    """--coordinator-fingerprint as given: one for every address (they share a certificate),
    or one per address in the same order (each its own); address -> canonical fingerprint."""
    given = [part for part in (p.strip() for p in text.split(",")) if part]
    if not given:
        return {}
    if len(given) == 1:
        given = given * len(addresses)
    if len(given) != len(addresses):
        raise ValueError(f"--coordinator-fingerprint gives {len(given)} fingerprints for "
                         f"{len(addresses)} coordinators: give one they all share, or one per "
                         "address in --coordinator's order")
    return {address: normalize_fingerprint(f) for address, f in zip(addresses, given, strict=True)}


@dataclass(frozen=True)
class Rotation:
    """Where a client is among its coordinators, and how its current run of failures went."""

    addresses: tuple[str, ...]
    current: int = 0  # index into addresses
    failures: int = 0  # in a row, across addresses
    delay_s: float = DELAY_S_MIN  # the next full-round backoff

    def __post_init__(self) -> None:
        assert self.addresses and 0 <= self.current < len(self.addresses), self

    @property
    def address(self) -> str:
        return self.addresses[self.current]

    def starting_at(self, offset: int) -> Rotation:
        """Spread clients given the same list: each starts at its own place in it."""
        return replace(self, current=offset % len(self.addresses))


def after_failure(rotation: Rotation, draw: float) -> tuple[Rotation, float]:
    """The connection to rotation.address failed: the next address, and the seconds to wait.

    draw is uniform in [0, 1). Within a round the wait is a jitter of at most 50 ms; after
    each full round it is the backoff, half fixed and half drawn ("equal jitter").
    """
    assert 0.0 <= draw < 1.0, draw
    failures = rotation.failures + 1
    following = (rotation.current + 1) % len(rotation.addresses)
    if failures % len(rotation.addresses):
        return replace(rotation, current=following, failures=failures), draw * NEXT_ADDRESS_DELAY_S_MAX
    wait_s = rotation.delay_s / 2 + draw * rotation.delay_s / 2
    return (replace(rotation, current=following, failures=failures,
                    delay_s=min(rotation.delay_s * 2, DELAY_S_MAX)), wait_s)


def after_success(rotation: Rotation) -> Rotation:
    """A connection held: the next failure starts a new round from the shortest delay."""
    return replace(rotation, failures=0, delay_s=DELAY_S_MIN)
