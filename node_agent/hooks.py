"""The points where the operator's terms reach into the agent's loop.

NodeAgent calls these at fixed moments: what to tell the coordinator, whether
to start a job, whether to keep generating, what to do when idle. The base
class is the plain skeleton's behaviour (always lend, nothing extra);
node_agent.operator_hooks.OperatorHooks is the real one.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.receipts import Receipt
from node_agent.coordinator_client import Assignment, Challenge, NodeStatus
from node_agent.pods.outcome import PodJobResult
from node_agent.token_sender import TokenSender


@dataclass(frozen=True)
class ChallengeRun:
    """A challenge benchmark as decoded: its tokens, the rate measured here, and the receipt
    (unsigned; the agent signs it) whose tokens and commitment the coordinator replays."""

    token_ids: tuple[int, ...]
    decode_tokens_per_s: float
    receipt: Receipt


class AgentHooks:
    def status(self, warm_models: tuple[str, ...]) -> NodeStatus | None:
        """What register and heartbeats report; None sends unsigned heartbeats (the skeleton)."""
        return None

    def pod(self):  # type: ignore[no-untyped-def]
        """The pod this node leads (a contracts.pods.PodDeclaration), or None."""
        return None

    def refusal(self, assignment: Assignment) -> str | None:
        """Why this job must be handed back before it starts; None to run it."""
        return None

    def keep_going(self, job_id: str) -> bool:
        """Asked between tokens: False stops the job so it is handed back."""
        return True

    def hand_back_reason(self) -> str:
        return "handed back by the node"

    def run_pod_job(self, assignment: Assignment, sender: TokenSender) -> PodJobResult:
        """Hand a pod job this node leads to its runner (node_agent.pods.runner); none here."""
        return PodJobResult(failure_reason="this node runs no pods")

    def idle_work(self) -> None:
        """Called on the MLX worker thread when no job waits (the self-benchmark runs here)."""

    def run_challenge(self, challenge: Challenge) -> ChallengeRun | None:
        """On the MLX worker thread: a challenge benchmark decoded on the self-benchmark's
        reference model, with its receipt to sign; None when this node runs no benchmark."""
        return None

    def job_started(self, job_id: str) -> None:
        pass

    def job_finished(self, job_id: str, credited_base_units: int | None) -> None:
        pass
