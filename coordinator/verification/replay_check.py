"""Checks one finished job by replaying it on a Replayer (the verifier worker's MLX engine).

The Replayer is injected: the coordinator never imports MLX itself. The one in
production is node_agent.inference.engine.LocalReplayer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from contracts.receipts import Receipt
from coordinator.verification.judge import CheckVerdict, ReplayFacts, judge
from coordinator.verification.tokens import Sampling, TokenCheck, make_token_check
from coordinator.verification.tolerances import Tolerances


class ReplayOutput(Protocol):
    prompt_tokens: int
    prompt: object
    generated: tuple
    token_checks: tuple


class Replayer(Protocol):
    def held_models(self) -> frozenset[tuple[str, str]]:
        """(model id, weights digest) of every model this replayer can replay."""

    def weights_digest(self, model_id: str) -> str | None:
        """The digest of the weights this replayer holds for the model, None if it has none."""

    def end_token_ids(self, model_id: str) -> frozenset[int]: ...

    def replay(self, model_id: str, prompt: str, output_ids: tuple[int, ...],
               check_step: Callable[[int, np.ndarray], TokenCheck]) -> ReplayOutput: ...


def check_by_replay(replayer: Replayer, receipt: Receipt, prompt: str, output_ids: tuple[int, ...],
                    tolerances: Tolerances) -> CheckVerdict:
    """Replay the job as the coordinator recorded it (prompt, streamed tokens) and judge the receipt.

    The receipt's model, sampling and counts were already matched to the job at the door,
    and the caller made sure this replayer holds the very weights the job names.
    """
    assert replayer.weights_digest(receipt.model_id) == receipt.weights_digest, \
        f"the verifier does not hold {receipt.model_id} with the job's weights"
    sampling = Sampling(receipt.temperature, receipt.top_p, receipt.seed)
    check = make_token_check(output_ids, receipt.finish_reason, sampling,
                             replayer.end_token_ids(receipt.model_id), tolerances)
    replay = replayer.replay(receipt.model_id, prompt, output_ids, check)
    facts = ReplayFacts(replay.prompt_tokens, replay.prompt, tuple(replay.generated),  # type: ignore[arg-type]
                        tuple(replay.token_checks))
    return judge(receipt, facts, tolerances)
