"""Checking a peer's job: one prefill pass over its prompt and claimed output with this node's
own copy of the model, reported as a signed result (contracts/peer_checks.py).

The node generates nothing: it replays, records its strongest hidden-state values per chunk and
whether the seeded sampler could have picked each claimed token, and signs that. The
coordinator compares it with the checked node's proof; a result that lies is caught when a
referee of a third operator replays the same job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from contracts.peer_checks import CheckJob, CheckResult, encode_result, signing_bytes
from contracts.receipts import output_digest, prompt_digest
from contracts.token_checks import Sampling, TokenCheck, make_token_check
from node_agent.identity import Identity
from node_agent.inference.activations import Replay


class Replays(Protocol):
    """What running a check needs of the engine (node_agent.inference.engine.Engine has it)."""

    def end_token_ids(self, model_path: str) -> frozenset[int]: ...

    def replay(self, model_path: str, prompt: str, output_ids: tuple[int, ...],
               check_step: Callable[[int, np.ndarray], TokenCheck]) -> Replay[TokenCheck]: ...


def run_check(engine: Replays, model_path: str, check: CheckJob, identity: Identity) -> tuple[bytes, bytes]:
    """(body, signature) of this node's result; raises ValueError when the replay cannot run
    (an id past the vocabulary, a model the replay does not support, non-finite states)."""
    sampling = Sampling(check.temperature, check.top_p, check.seed)
    step = make_token_check(check.output_ids, check.finish_reason, sampling,
                            engine.end_token_ids(model_path), check.slack)
    replay = engine.replay(model_path, check.prompt, check.output_ids, step)
    result = CheckResult(
        check_id=check.check_id, job_id=check.job_id, checker_node_id=identity.node_id,
        model_id=check.model_id, weights_digest=check.weights_digest,
        prompt_digest=prompt_digest(check.prompt), output_digest=output_digest(check.output_ids),
        prompt_tokens=replay.prompt_tokens, prompt=replay.prompt, generated=tuple(replay.generated),
        token_checks=tuple(replay.token_checks))
    body = encode_result(result)
    return body, identity.sign(signing_bytes(body))
