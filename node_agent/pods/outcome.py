"""How a pod run ends, as the leader's runner hands it to the agent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from node_agent.coordinator_client import Assignment
from node_agent.inference.engine import GenerationResult
from node_agent.token_sender import TokenSender


@dataclass(frozen=True)
class PodJobResult:
    """How a pod run ended: a result (a receipt is due), a failure, or a reason to hand back."""

    result: GenerationResult | None = None  # rank 0's, as one Mac's Engine.generate returns it
    handed_back_reason: str | None = None  # put the job back in the queue (a member died)
    failure_reason: str | None = None  # the job itself cannot run
    prompt_too_long: bool = False


# (assignment, sender for rank 0's tokens, keep_going) -> how the run ended; PodRun is one.
PodJobRunner = Callable[[Assignment, TokenSender, Callable[[], bool]], PodJobResult]
