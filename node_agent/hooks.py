"""The points where the operator's terms reach into the agent's loop.

NodeAgent calls these at fixed moments: what to tell the coordinator, whether
to start a job, whether to keep generating, what to do when idle. The base
class is the plain skeleton's behaviour (always lend, nothing extra);
node_agent.operator_hooks.OperatorHooks is the real one.
"""

from __future__ import annotations

from node_agent.coordinator_client import Assignment, NodeStatus
from node_agent.token_sender import TokenSender


class PodJobResult:
    """What a pod run ended with: tokens (then a receipt is due) or a reason to hand back."""

    def __init__(self, token_ids: tuple[int, ...] = (), text: str = "", prompt_tokens: int = 0,
                 started_at_ms: int = 0, finished_at_ms: int = 0,
                 handed_back_reason: str | None = None, failure_reason: str | None = None) -> None:
        self.token_ids, self.text, self.prompt_tokens = token_ids, text, prompt_tokens
        self.started_at_ms, self.finished_at_ms = started_at_ms, finished_at_ms
        self.handed_back_reason = handed_back_reason  # put the job back in the queue
        self.failure_reason = failure_reason  # the job itself cannot run (e.g. prompt too long)


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

    def run_pod_job(self, assignment: Assignment, sender: TokenSender) -> PodJobResult | None:
        """Run a pod job as its leader; None when this node does not lead it (nothing to do)."""
        return PodJobResult(failure_reason="this node runs no pods")

    def idle_work(self) -> None:
        """Called on the MLX worker thread when no job waits (the self-benchmark runs here)."""

    def job_started(self, job_id: str) -> None:
        pass

    def job_finished(self, job_id: str, credited_base_units: int | None) -> None:
        pass
