"""Replays run in a child process, so a native crash (MLX, Metal) costs one check, not the service.

A Checker gives a verdict on one job or raises ReplayFailed. Two kinds:

    InProcessChecker    check_by_replay on a Replayer in this process (unit tests, fakes)
    ChildProcessChecker the same in one long-lived child (spawned, never forked: the
                        coordinator runs gRPC threads); a child that dies or overruns its
                        deadline is killed, its check fails, and the next check starts a new one

The parent never loads a model: it knows only the (model id, weights digest) pairs the
child will hold, from the recipe it was given.
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Protocol

from contracts.receipts import Receipt, decode_receipt, encode_receipt
from coordinator.verification.judge import CheckVerdict
from coordinator.verification.replay_check import Replayer, check_by_replay
from coordinator.verification.tolerances import Tolerances

log = logging.getLogger(__name__)

REPLAY_TIMEOUT_S = 600.0  # one replay (prefill over prompt and output) of the largest job
CHILD_START_TIMEOUT_S = 120.0  # importing MLX and loading the held models


class ReplayFailed(Exception):
    """The replay gave no verdict (crashed, overran, or refused its input); the credit stays held."""

    def __init__(self, reason: str, crashed: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.crashed = crashed


class Checker(Protocol):
    def held_models(self) -> frozenset[tuple[str, str]]: ...

    def weights_digest(self, model_id: str) -> str | None: ...

    def check(self, receipt: Receipt, prompt: str, output_ids: tuple[int, ...],
              tolerances: Tolerances) -> CheckVerdict:
        """The verdict on one job; raises ReplayFailed when the replay cannot give one."""


class InProcessChecker:
    def __init__(self, replayer: Replayer) -> None:
        self.replayer = replayer

    def held_models(self) -> frozenset[tuple[str, str]]:
        return self.replayer.held_models()

    def weights_digest(self, model_id: str) -> str | None:
        return self.replayer.weights_digest(model_id)

    def check(self, receipt: Receipt, prompt: str, output_ids: tuple[int, ...],
              tolerances: Tolerances) -> CheckVerdict:
        try:
            return check_by_replay(self.replayer, receipt, prompt, output_ids, tolerances)
        except ValueError as error:  # unsupported model, a non-finite replay, an id past the vocabulary
            raise ReplayFailed(f"replay failed: {error}") from error


@dataclass(frozen=True)
class ReplayerRecipe:
    """How the child builds its Replayer: a module-level (picklable) factory, and what it holds."""

    factory: Callable[[], Replayer]
    held: tuple[tuple[str, str], ...]  # (model id, weights digest), known without loading MLX


def _child_main(recipe: ReplayerRecipe, connection: Connection) -> None:
    """The child: build the replayer once, then answer one check per message until the pipe closes."""
    replayer = recipe.factory()
    connection.send(("ready", None))
    while True:
        try:
            receipt_body, prompt, output_ids, tolerances = connection.recv()
        except EOFError:
            return
        try:
            verdict = check_by_replay(replayer, decode_receipt(receipt_body), prompt, output_ids,
                                      tolerances)
        except ValueError as error:
            connection.send(("refused", str(error)[:1000]))
            continue
        connection.send(("verdict", verdict))


class ChildProcessChecker:
    def __init__(self, recipe: ReplayerRecipe, replay_timeout_s: float = REPLAY_TIMEOUT_S,
                 start_timeout_s: float = CHILD_START_TIMEOUT_S) -> None:
        self._recipe = recipe
        self._held = dict(recipe.held)
        self._replay_timeout_s, self._start_timeout_s = replay_timeout_s, start_timeout_s
        self._context = multiprocessing.get_context("spawn")
        self._child: multiprocessing.process.BaseProcess | None = None
        self._connection: Connection | None = None
        self.children_started = 0  # observable: a crash costs one child

    def held_models(self) -> frozenset[tuple[str, str]]:
        return frozenset(self._held.items())

    def weights_digest(self, model_id: str) -> str | None:
        return self._held.get(model_id)

    def check(self, receipt: Receipt, prompt: str, output_ids: tuple[int, ...],
              tolerances: Tolerances) -> CheckVerdict:
        connection = self._running_child()
        try:
            connection.send((encode_receipt(receipt), prompt, output_ids, tolerances))
            kind, value = self._receive(connection, self._replay_timeout_s, "its replay")
        except (BrokenPipeError, ConnectionResetError) as error:
            raise self._lost(f"the replay child's pipe broke: {error}") from error
        if kind == "refused":
            raise ReplayFailed(f"replay failed: {value}")
        assert kind == "verdict", f"unexpected message {kind!r} from the replay child"
        assert isinstance(value, CheckVerdict)
        return value

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
        if self._child is not None:
            self._child.join(timeout=5)
            if self._child.is_alive():
                self._child.kill()
                self._child.join()
        self._child = self._connection = None

    def _running_child(self) -> Connection:
        if self._child is not None and self._child.is_alive() and self._connection is not None:
            return self._connection
        self.close()
        parent_end, child_end = self._context.Pipe()
        child = self._context.Process(target=_child_main, args=(self._recipe, child_end),
                                      name="mlxnet-replay", daemon=True)
        child.start()
        child_end.close()
        self._child, self._connection = child, parent_end
        self.children_started += 1
        kind, _ = self._receive(parent_end, self._start_timeout_s, "its start")
        assert kind == "ready", f"unexpected message {kind!r} from a starting replay child"
        log.info("replay child %d started (pid %s)", self.children_started, child.pid)
        return parent_end

    def _receive(self, connection: Connection, timeout_s: float, what: str) -> tuple[str, object]:
        try:
            if not connection.poll(timeout_s):
                raise self._lost(f"the replay child did not finish {what} within {timeout_s:.0f} s")
            message = connection.recv()
        except (EOFError, ConnectionResetError) as error:
            raise self._lost(f"the replay child died during {what}") from error
        assert isinstance(message, tuple) and len(message) == 2
        return message

    def _lost(self, reason: str) -> ReplayFailed:
        """Kill the child (if it still runs) and say how it ended."""
        child = self._child
        if child is not None and child.is_alive():
            child.kill()
        if child is not None:
            child.join(timeout=5)
        code = child.exitcode if child is not None else None
        self._child = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        log.warning("replay child lost: %s (exit code %s)", reason, code)
        return ReplayFailed(f"{reason} (exit code {code})", crashed=True)
