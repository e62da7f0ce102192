"""MLX World's use cases over the coordinator's database: one short read transaction each.

The HTTP routes (routes.py) call these and only translate to JSON responses.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

from sqlalchemy.orm import Session

from coordinator.errors import InvalidRequest, NotFound
from coordinator.live.notifier import FLEET_TOPIC_PREFIX, NODE_TOPIC_PREFIX
from coordinator.service import CoordinatorService
from coordinator.world import fleet, job_lookup, map_view, operator_keys, operator_view, queries
from coordinator.world.cache import TTL_S_DEFAULT, AnswerCache
from coordinator.world.earnings import ChainRead, ChainRoot, chain_check, chain_check_json, proof_json
from coordinator.world.live import FleetState, Snapshot, WorldFeed
from coordinator.world.operator_keys import OperatorKey
from coordinator.world.totals import Totals, TotalsHistory
from ledger.api import LedgerError, PayoutTree, epoch_tree, read_epoch

log = logging.getLogger(__name__)

T = TypeVar("T")
TREES_CACHED_MAX = 8  # closed epochs never change, so their trees are kept
CHAIN_ROOT_TTL_S = 5.0  # how stale a root read from the chain may be on the epochs list
CHAIN_ROOTS_CACHED_MAX = 256
PODS_SHOWN_MAX = 500


class EpochRootReader(Protocol):
    """What MLX World needs of the payout chain (ledger.anchor.PayoutChain has it)."""

    chain_id: int
    distributor_address: str

    def epoch_root(self, epoch: int) -> bytes | None: ...


class LazyChainReader:
    """A payout chain connected on first use: the coordinator's own (its anvil, or the network of
    its --chain-* flags) or MLXNET_PAYOUT_RPC_URL's, so a page never waits on a chain it never reads."""

    def __init__(self, connect: Callable[[], EpochRootReader]) -> None:
        self._connect = connect
        self._chain: EpochRootReader | None = None
        self._lock = threading.Lock()

    def _connected(self) -> EpochRootReader:
        with self._lock:
            if self._chain is None:
                self._chain = self._connect()
            return self._chain

    @property
    def chain_id(self) -> int:
        return self._connected().chain_id

    @property
    def distributor_address(self) -> str:
        return self._connected().distributor_address

    def epoch_root(self, epoch: int) -> bytes | None:
        return self._connected().epoch_root(epoch)


def chain_reader_from_environment() -> EpochRootReader | None:
    """A reader of the real payout chain when one is configured; else None (roots come from anchors)."""
    from coordinator.money.epochs import RPC_URL_ENV, payout_chain_from_environment

    return LazyChainReader(payout_chain_from_environment) if os.environ.get(RPC_URL_ENV) else None


class World:
    def __init__(self, service: CoordinatorService, chain: EpochRootReader | None = None,
                 history: TotalsHistory | None = None, cache_ttl_s: float = TTL_S_DEFAULT) -> None:
        """cache_ttl_s bounds how stale a public answer may be (0: never cached)."""
        self.service = service
        self.chain = chain
        self.feed = WorldFeed(self.fleet_state, self.current_totals, history or TotalsHistory())
        self.cache = AnswerCache(cache_ttl_s)
        self._trees: collections.OrderedDict[int, PayoutTree] = collections.OrderedDict()
        self._trees_lock = threading.Lock()
        self._chain_roots = AnswerCache(CHAIN_ROOT_TTL_S, CHAIN_ROOTS_CACHED_MAX)
        service.nodes.region_listeners.append(self._node_published_region)
        # Joins, leaves and jobs placed reach open pages at once, not at the next tick.
        self._unwatch = service.notifier.watch((FLEET_TOPIC_PREFIX, NODE_TOPIC_PREFIX), self.feed.wake)

    def _node_published_region(self, node_id: str, operator_id: str, region: str) -> None:
        """A node registered with a region from its own settings (`mlxnet node config --region`):
        its map place, until the operator publishes another from their page."""
        now = self.service.clock.now_ms()
        try:
            self.write(lambda s: operator_keys.set_region(s, operator_id, node_id, region, now))
        except InvalidRequest as error:
            log.warning("node %s published a region the map cannot use: %s", node_id, error)

    def live(self) -> queries.Liveness:
        config = self.service.config
        return queries.Liveness(self.service.clock.now_ms(), config.node_offline_after_ms, config.trust)

    def read(self, work: Callable[[Session], T]) -> T:
        """A read-only transaction: on SQLite it takes no write lock, so open pages never hold up
        heartbeats and registrations (nor wait for them)."""
        with self.service.db.read_transaction() as session:
            return work(session)

    def write(self, work: Callable[[Session], T]) -> T:
        with self.service.db.transaction() as session:
            return work(session)

    def close(self) -> None:
        """End live streams and the feed's thread; call before stopping the HTTP server."""
        self._unwatch()
        self.feed.stop()
        with contextlib.suppress(ValueError):  # closed twice
            self.service.nodes.region_listeners.remove(self._node_published_region)

    def fleet_state(self) -> FleetState:
        live = self.live()
        return self.read(lambda s: FleetState(queries.fleet_version(s, live), queries.epochs_version(s)))

    def current_totals(self) -> Totals:
        live = self.live()
        return self.read(lambda s: queries.totals(s, live))

    def snapshot(self) -> Snapshot:
        state = self.fleet_state()
        return Snapshot(state.fingerprint, self.current_totals(), state.epochs)

    # --- public ------------------------------------------------------------

    def fleet_page(self, params: dict[str, str]) -> dict[str, object]:
        query = fleet.parse_fleet_query(params)
        version = self.feed.version

        def compute() -> dict[str, object]:
            live = self.live()
            total, rows = self.read(lambda s: queries.fleet_page(s, query, live))
            return fleet.page_payload(query, total, rows, version)
        return self.cache.get(("fleet", query, version), compute)

    def map(self, params: dict[str, str]) -> dict[str, object]:
        """Every filtered Mac with a published place, for the map (the fleet's filters)."""
        query = fleet.parse_fleet_query(params)
        version = self.feed.version

        def compute() -> dict[str, object]:
            live = self.live()
            rows, working, pod_of = self.read(lambda s: queries.map_rows(s, query, live))
            return map_view.map_payload(rows, working, pod_of, live.fresh_since_ms,
                                        queries.MAP_MACS_MAX, version)
        return self.cache.get(("map", dataclasses.replace(query, page=1, page_size=1, sort=fleet.FleetSort.JOINED),
                               version), compute)

    def facets(self) -> dict[str, object]:
        return self.cache.get(("facets", self.feed.version), lambda: self.read(queries.facets))

    def pods(self) -> dict[str, object]:
        return self.cache.get(("pods", self.feed.version), self._pods)

    def _pods(self) -> dict[str, object]:
        live = self.live()

        def work(session: Session) -> dict[str, object]:
            found = queries.pod_facts(session, PODS_SHOWN_MAX)
            rows = queries.node_rows(session, [m for _, members, _ in found for m in members], live)
            return {"pods": [fleet.pod_payload(pod_id, members, links, rows)
                             for pod_id, members, links in found]}
        return self.read(work)

    def totals(self) -> dict[str, object]:
        self.feed.start()  # keeps the charts' history even while no page is open
        return self.cache.get(("totals", self.feed.version), self._totals)

    def _totals(self) -> dict[str, object]:
        live = self.live()
        current = self.read(lambda s: queries.totals(s, live))
        self.feed.history.offer(current)
        return {"totals": current.to_json(), "history": self.feed.history.to_json()}

    def job(self, job_id: str) -> dict[str, object]:
        return self.read(lambda s: job_lookup.job_json(s, job_id))

    # --- operators -----------------------------------------------------------

    def authenticate(self, key: str | None) -> OperatorKey:
        return self.read(lambda s: operator_keys.authenticate_operator(s, key))

    def operator_summary(self, key: OperatorKey) -> dict[str, object]:
        live = self.live()
        return self.read(lambda s: operator_view.summary_json(s, key.operator_id, live))

    def operator_jobs(self, key: OperatorKey, params: dict[str, str]) -> dict[str, object]:
        page = fleet.int_param(params, "page", 1, fleet.PAGE_MAX)
        size = fleet.int_param(params, "page_size", 25, operator_view.JOBS_PAGE_SIZE_MAX)
        return self.read(lambda s: operator_view.jobs_json(s, key.operator_id, page, size))

    def operator_epochs(self, key: OperatorKey, params: dict[str, str]) -> dict[str, object]:
        """Earnings per epoch; each closed epoch's root as the chain holds it now, beside the ledger's."""
        before = fleet.int_param(params, "before", 0, 2**62) or None
        now_us = self.service.clock.now_ms() * 1000
        payload = self.read(lambda s: operator_view.epochs_json(s, key.operator_id, now_us, before))
        for item in payload["epochs"]:  # type: ignore[attr-defined]
            if item["closed"] and item["root"] is not None:
                item["chain"] = chain_check_json(self._read_chain_root(item["epoch"]), item["root"])
        return payload

    def _read_chain_root(self, number: int, cached: bool = True) -> ChainRead:
        """The root the distributor holds for the epoch, read through the RPC (cached a few seconds)."""
        if self.chain is None:
            return ChainRead(None, None, None)
        chain = self.chain

        def read() -> ChainRead:
            try:
                root = chain.epoch_root(number)
                return ChainRead(None if root is None else "0x" + root.hex(), chain.chain_id,
                                 chain.distributor_address)
            except (LedgerError, ValueError) as error:  # unreachable or misconfigured: say so, use the anchor
                log.warning("could not read epoch %d's root from the chain: %s", number, error)
                return ChainRead(None, None, None, unreachable=True)
        return self._chain_roots.get(("chain-root", number), read) if cached else read()

    def set_region(self, key: OperatorKey, node_id: str, region: str | None) -> dict[str, object]:
        now = self.service.clock.now_ms()
        self.write(lambda s: operator_keys.set_region(s, key.operator_id, node_id, region, now))
        return {"node_id": node_id, "region": region}

    def operator_proof(self, key: OperatorKey, number: int) -> dict[str, object]:
        def work(session: Session):  # type: ignore[no-untyped-def]
            epoch = read_epoch(session, number)
            if epoch is None:
                raise NotFound(f"epoch {number} is not closed yet (or does not exist)")
            leaf = operator_view.payout_leaf(session, key.operator_id, number)
            if leaf is None:
                raise NotFound(f"epoch {number} paid nothing to operator {key.operator_id}: "
                               "no balance or no payout address at its close")
            return leaf, epoch, self._tree(session, number), operator_view.anchored_roots(session, number)
        leaf, epoch, tree, anchors = self.read(work)
        assert tree is not None and "0x" + tree.root.hex() == epoch.root, "payouts rebuild the epoch's root"
        root, check = self._chain_root(number, epoch.root, anchors)
        return proof_json(leaf, tree.proof(leaf), root) | {"ledger_root": epoch.root, "chain_check": check}

    def _tree(self, session: Session, number: int) -> PayoutTree | None:
        with self._trees_lock:
            if number in self._trees:
                self._trees.move_to_end(number)
                return self._trees[number]
        tree = epoch_tree(session, number)
        if tree is not None:
            with self._trees_lock:
                self._trees[number] = tree
                while len(self._trees) > TREES_CACHED_MAX:
                    self._trees.popitem(last=False)
        return tree

    def _chain_root(self, number: int, ledger_root: str, anchors: list[ChainRoot]) -> tuple[ChainRoot, str]:
        """(the root to check against, how the chain compares with the ledger): the chain's own root
        when it holds one, even one that differs; else the root recorded when anchored; else the ledger's."""
        read = self._read_chain_root(number, cached=False)  # a proof is checked against the chain as it is now
        check = chain_check(read, ledger_root)
        if read.root is not None:
            return ChainRoot(read.root, "chain", read.chain_id, read.distributor), check
        if anchors:
            return anchors[0], check
        return ChainRoot(ledger_root, "ledger"), check
