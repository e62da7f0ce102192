"""Runs generation with mlx-lm. Only this package imports mlx.

The engine is driven from one thread (the agent's worker): MLX work is never
spread over request threads. Loaded models stay warm, least recently used
first out.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import mlx.core as mx
import numpy as np
from mlx_lm import load

from contracts import hop_trace
from contracts.commitments import (
    ActivationCommitment, ChunkCommitment, TopCandidates, chunk_key, commit_chunk, encode_commitment,
)
from contracts.receipts import FinishReason
from contracts.logprobs import TokenLogprob
from node_agent.inference import activations, prompts
from node_agent.inference.activations import DecodeStep, Decoded, Replay

log = logging.getLogger(__name__)

WARM_MODELS_MAX = 2
T = TypeVar("T")


@dataclass(frozen=True)
class GenerationRequest:
    model_path: str
    prompt: str
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    job_id: str  # keys the activation commitment to this job
    top_logprobs: int = -1  # -1: no logprobs; k >= 0: each token's, and the k likeliest


@dataclass(frozen=True)
class GenerationResult:
    token_ids: tuple[int, ...]
    text: str
    prompt_tokens: int
    started_at_ms: int
    finished_at_ms: int
    stopped_early: bool  # on_token asked to stop (the job was cancelled)
    finish_reason: FinishReason = FinishReason.LENGTH
    first_token_at_ms: int = 0
    activation_commitment: bytes = b""  # contracts.commitments encoding; empty when stopped early
    recorded: Decoded | None = None  # the states to commit to, while the commitment is not made yet
    cached_prompt_tokens: int = 0  # prompt tokens reused from the node's prompt cache (a shared prefix)


# on_token(index, token_id, text) -> keep going?
TokenSink = Callable[[int, int, str], bool]


class PromptTooLong(ValueError):
    """The prompt and max_tokens do not fit the model's context."""


PromptRefused = prompts.PromptRefused  # the template has no tools, or the tool grammar fails


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Engine:
    def __init__(self, tensor_group: mx.distributed.Group | None = None) -> None:
        """tensor_group: this process is one rank of a tensor-parallel pod (every rank runs
        the same calls in step); None runs whole models in this process."""
        self._loaded: collections.OrderedDict[str, tuple] = collections.OrderedDict()
        self._tensor_group = tensor_group

    def warm_models(self) -> tuple[str, ...]:
        return tuple(self._loaded)

    def model(self, path: str) -> tuple:
        """(model, tokenizer), loaded once and kept warm."""
        return self._model(path)

    def _model(self, path: str) -> tuple:
        if path in self._loaded:
            self._loaded.move_to_end(path)
            return self._loaded[path]
        log.info("loading model %s", path)
        model_and_tokenizer = load(path)
        if self._tensor_group is not None and self._tensor_group.size() > 1:
            model_and_tokenizer[0].shard(self._tensor_group)
        self._loaded[path] = model_and_tokenizer
        while len(self._loaded) > WARM_MODELS_MAX:
            evicted, _ = self._loaded.popitem(last=False)
            log.info("unloaded model %s", evicted)
        return model_and_tokenizer

    def count_prompt_tokens(self, model_path: str, prompt: str) -> int:
        _, tokenizer = self._model(model_path)
        return len(prompts.encode_job_prompt(tokenizer, prompt))

    def end_token_ids(self, model_path: str) -> frozenset[int]:
        _, tokenizer = self._model(model_path)
        return frozenset(int(t) for t in tokenizer.eos_token_ids)

    def generate(self, request: GenerationRequest, max_context_tokens: int,
                 on_token: TokenSink, on_prompt: Callable[[int], None] | None = None,
                 on_logprob: Callable[[int, TokenLogprob], None] | None = None,
                 on_end: Callable[[], None] | None = None,
                 commit: bool = True,
                 on_proven: Callable[[Decoded], None] | None = None) -> GenerationResult:
        """Generate, handing each token to on_token one step late so its text is final.

        The first token goes at once when its text already is (see settled): it is
        what the consumer waits for.

        Records the final hidden states as it goes and returns the activation
        commitment for the receipt. on_prompt gets the prompt's token count before
        the first token; on_logprob gets each token's logprobs (when the request asks)
        before on_token gets the token. on_end is called once the last token is handed
        over (not when stopped early), before the commitment is computed. With commit
        False the result carries the recorded states instead: with_commitment finishes it.
        on_proven gets the states recorded so far at every full chunk of generated tokens
        (activations.decode), for partial receipts (partial_commitment makes their proof).
        """
        model, tokenizer = self._model(request.model_path)
        prompt_ids = prompts.encode_job_prompt(tokenizer, request.prompt)
        constraint = prompts.job_constraint(tokenizer, request.prompt)
        if len(prompt_ids) + request.max_tokens > max_context_tokens:
            raise PromptTooLong(f"prompt is {len(prompt_ids)} tokens; with max_tokens "
                                f"{request.max_tokens} that exceeds the model's context of "
                                f"{max_context_tokens}")
        if on_prompt is not None:
            on_prompt(len(prompt_ids))
        detokenizer = tokenizer.detokenizer
        detokenizer.reset()
        held: list[tuple[int, int, str]] = []  # the token not yet handed over, with its text
        accepted: list[tuple[int, str]] = []
        first_token_at_ms = 0

        def hand_over(index: int, token_id: int, text: str) -> bool:
            if not on_token(index, token_id, text):
                return False
            accepted.append((token_id, text))
            return True

        def on_step(step: DecodeStep) -> bool:
            nonlocal first_token_at_ms
            if not first_token_at_ms:
                hop_trace.job_hop(request.job_id, "first token")
                first_token_at_ms = _now_ms()
            if on_logprob is not None and request.top_logprobs >= 0 and step.logits is not None:
                on_logprob(step.index, prompts.token_logprob(tokenizer, step.logits, step.token_id,
                                                             request.top_logprobs))
            detokenizer.add_token(step.token_id)
            if held and not hand_over(*held.pop()):
                return False
            segment = detokenizer.last_segment
            if step.index == 0 and settled(tokenizer, step.token_id, segment):
                return hand_over(step.index, step.token_id, segment)  # the first token goes at once
            held.append((step.index, step.token_id, segment))
            return True

        def on_last() -> None:
            detokenizer.finalize()
            tail = detokenizer.last_segment
            if held:
                index, token_id, text = held.pop()
                hand_over(index, token_id, text + tail)
            elif tail:  # settled said the detokenizer held nothing back
                log.warning("job %s: text %r after the last token was dropped", request.job_id, tail)
            if on_end is not None:
                on_end()

        started = _now_ms()
        hop_trace.job_hop(request.job_id, "prefill started")
        decoded = activations.decode(model, prompt_ids, request.max_tokens, request.temperature,
                                     request.top_p, request.seed,
                                     self.end_token_ids(request.model_path), on_step, on_last,
                                     constraint, on_proven)
        tokens = tuple(token_id for token_id, _ in accepted)
        text = "".join(text for _, text in accepted)
        if decoded is None or len(tokens) < len(decoded.token_ids):  # cancelled: no proof
            return GenerationResult(tokens, text, len(prompt_ids), started, _now_ms(), True)
        result = GenerationResult(tokens, text, len(prompt_ids), started, _now_ms(), False,
                                  decoded.finish_reason, first_token_at_ms, recorded=decoded)
        return with_commitment(request.job_id, result) if commit else result

    def replay(self, model_path: str, prompt: str, output_ids: tuple[int, ...],
               check_step: Callable[[int, np.ndarray], T]) -> Replay[T]:
        """The verifier's pass: prompt plus output through the model at once (see activations.replay)."""
        model, tokenizer = self._model(model_path)
        vocab_size = getattr(getattr(model, "args", None), "vocab_size", None)
        if isinstance(vocab_size, int) and any(not 0 <= t < vocab_size for t in output_ids):
            # An embedding lookup past the table reads out of bounds: refuse it, never run it.
            raise ValueError(f"output token ids must be below the vocabulary size {vocab_size}")
        constraint = prompts.job_constraint(tokenizer, prompt)
        return activations.replay(model, prompts.encode_job_prompt(tokenizer, prompt), output_ids,
                                  prompts.constrained_check(constraint, output_ids, check_step))


class LocalReplayer:
    """The verifier's side: replays jobs for the models held here (model id -> directory).

    Implements coordinator.verification.replay_check.Replayer for a verifier worker.
    """

    def __init__(self, engine: Engine, models: dict[str, tuple[str, str]]) -> None:
        self._engine = engine
        self._models = dict(models)  # model id -> (directory, weights digest)

    def held_models(self) -> frozenset[tuple[str, str]]:
        return frozenset((model_id, digest) for model_id, (_, digest) in self._models.items())

    def weights_digest(self, model_id: str) -> str | None:
        held = self._models.get(model_id)
        return None if held is None else held[1]

    def end_token_ids(self, model_id: str) -> frozenset[int]:
        return self._engine.end_token_ids(self._models[model_id][0])

    def replay(self, model_id: str, prompt: str, output_ids: tuple[int, ...],
               check_step: Callable[[int, np.ndarray], T]) -> Replay[T]:
        return self._engine.replay(self._models[model_id][0], prompt, output_ids, check_step)


def settled(tokenizer, token_id: int, segment: str) -> bool:  # type: ignore[no-untyped-def]
    """Whether a first token's text is final: the detokenizer shows the end of it.

    Detokenizers hold back only a token's end (a partial character, a trailing space);
    a leading space they drop stays dropped. A settled token need not wait a step.
    """
    full = tokenizer.decode([token_id])
    return (bool(segment) and full.endswith(segment) and not full[-1].isspace()
            and not full.endswith("\ufffd"))


def with_commitment(job_id: str, result: GenerationResult) -> GenerationResult:
    """The result with the activation commitment to its recorded states.

    Pure arithmetic over the recorded values, no MLX work: any thread may run it.
    """
    if result.recorded is None:
        return result
    return dataclasses.replace(result, recorded=None,
                               activation_commitment=_COMMITTED.commitment(job_id, result.recorded, last=True))


def partial_commitment(job_id: str, decoded: Decoded) -> bytes:
    """The activation commitment to a partial record (decode's on_proven): the same bytes a job
    that ended after those tokens commits to. Pure arithmetic: any thread may run it."""
    return _COMMITTED.commitment(job_id, decoded, last=False)


JOBS_COMMITTING_MAX = 1_024  # jobs whose chunk commitments are kept between receipts, oldest out


class ChunkCommitments:
    """Every partial receipt, and the final one, commits to all of a job's chunks so far. A chunk's
    commitment is a pure function of its candidates and key, so each is made once per job, not once
    per later receipt (a 128-token job made 19 for its 5 chunks, a count that grew with the square of
    its length: the node's CPU per token in bench.concurrency shows it). A kept one is reused only for
    equal candidates, so the bytes are those a fresh computation gives."""

    def __init__(self, jobs_max: int = JOBS_COMMITTING_MAX) -> None:
        self._jobs: collections.OrderedDict[str, dict[int, tuple[TopCandidates, ChunkCommitment]]] = \
            collections.OrderedDict()
        self._jobs_max = jobs_max
        self._lock = threading.Lock()  # partial receipts come on a sender's thread, the last on the reporter's

    def commitment(self, job_id: str, decoded: Decoded, last: bool) -> bytes:
        """last: the job's final commitment; its kept chunks are let go."""
        with self._lock:
            made = self._jobs.pop(job_id, None) or {}
            if not last:
                self._jobs[job_id] = made  # the most recently used last
                while len(self._jobs) > self._jobs_max:
                    self._jobs.popitem(last=False)
        # One job's receipts are made one after another (its sender's, then its reporter's): no lock for them.
        chunks = tuple(_chunk(made, job_id, number + 1, c) for number, c in enumerate(decoded.generated))
        return encode_commitment(ActivationCommitment(_chunk(made, job_id, 0, decoded.prompt), chunks))


def _chunk(made: dict[int, tuple[TopCandidates, ChunkCommitment]], job_id: str, number: int,
           candidates: TopCandidates) -> ChunkCommitment:
    known = made.get(number)
    if known is not None and known[0] == candidates:
        return known[1]
    commitment = commit_chunk(candidates, chunk_key(job_id, number))
    made[number] = (candidates, commitment)
    return commitment


_COMMITTED = ChunkCommitments()


def device_info() -> dict[str, object]:
    """MLX's view of the device, including the GPU working-set budget on Metal."""
    return dict(mx.device_info())
