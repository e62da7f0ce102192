"""An in-memory coordinator for the node agent's reports, and a record of how jobs ended."""

from __future__ import annotations

from collections.abc import Iterator

from node_agent.coordinator_client import CallRejected, Chunk, CoordinatorUnavailable


class FakeCoordinator:
    """Answers reports as the coordinator would, after `unavailable` unreachable attempts."""

    def __init__(self, unavailable: int = 0, refuse: bool = False) -> None:
        self.unavailable, self.refuse = unavailable, refuse
        self.receipts: list[tuple[str, bytes, bytes]] = []
        self.failures: list[tuple[str, str, bool, bool]] = []
        self.streams: list[tuple[str, list[Chunk]]] = []

    def _answer(self) -> None:
        if self.unavailable:
            self.unavailable -= 1
            raise CoordinatorUnavailable("UNAVAILABLE: restarting")
        if self.refuse:
            raise CallRejected("FAILED_PRECONDITION", "job was cancelled")

    def stream_tokens(self, job_id: str, chunks: Iterator[Chunk]) -> int:
        self._answer()
        self.streams.append((job_id, list(chunks)))
        return 0

    def report_receipt(self, job_id: str, body: bytes, signature: bytes) -> int:
        self._answer()
        self.receipts.append((job_id, body, signature))
        return 700

    def report_failure(self, job_id: str, reason: str, handed_back: bool = False,
                       prompt_too_long: bool = False) -> None:
        self._answer()
        self.failures.append((job_id, reason, handed_back, prompt_too_long))


class Record:
    def __init__(self) -> None:
        self.finished: list[tuple[str, int | None]] = []

    def job_finished(self, job_id: str, credited_base_units: int | None) -> None:
        self.finished.append((job_id, credited_base_units))
