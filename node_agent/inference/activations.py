"""Decoding that records final hidden states for the job's proof, and the verifier's replay.

`decode` mirrors mlx_lm's generate_step (the prompt but its last token in one
prefill, then one step per token through the same KV cache), so greedy output is
the very tokens `stream_generate` makes. On the way it keeps, for the prompt and
for every CHUNK_TOKENS generated tokens, the strongest final hidden-state values
(`contracts.commitments`). `replay` runs prompt plus output through the model in
a few large passes, the way a verifier checks a job far faster than it was
decoded, and returns the same candidates plus a check of every sampled token.

Supported: models whose logits are `lm_head(model.model(x))` (or the tied
embedding), which covers mlx-lm's llama, qwen2/3 and mistral families.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from contracts.commitments import CANDIDATES, CHUNK_TOKENS, TopCandidates
from contracts.receipts import FinishReason
from contracts.sampling import sample_token

PREFILL_STEP = 2048  # prompt tokens per prefill pass, as mlx_lm
REPLAY_STEP = 512  # positions per replay pass: bounds the logits held at once
T = TypeVar("T")


class UnsupportedModel(ValueError):
    """The model's logits are not lm_head over its final hidden states."""


def encode_prompt(tokenizer, prompt: str) -> list[int]:  # type: ignore[no-untyped-def]
    """Token ids exactly as mlx_lm's stream_generate encodes a text prompt."""
    bos = tokenizer.bos_token
    add_special = bos is None or not prompt.startswith(bos)
    return list(tokenizer.encode(prompt, add_special_tokens=add_special))


def _logits(model, hidden: mx.array) -> mx.array:  # type: ignore[no-untyped-def]
    if hasattr(model, "lm_head"):
        return model.lm_head(hidden)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if embed is None or not hasattr(embed, "as_linear"):
        raise UnsupportedModel(f"{type(model).__module__} has neither lm_head nor tied embeddings")
    return embed.as_linear(hidden)


class _Strongest:
    """The CANDIDATES largest-magnitude values of one chunk, fed a block of rows at a time.

    add_lazy only builds the selection, so decoding evaluates it together with the
    next token instead of stopping for it; result() merges whatever is queued.
    """

    def __init__(self) -> None:
        self._indices = np.zeros(0, dtype=np.int64)
        self._values = np.zeros(0, dtype=np.float32)
        self._queued: list[tuple[mx.array, mx.array, int]] = []

    def add_lazy(self, rows: mx.array, first_row: int) -> tuple[mx.array, mx.array]:
        """Queue a block; returns the arrays to evaluate (merged by the next add or result)."""
        flat = rows.reshape(-1).astype(mx.float32)
        count = min(CANDIDATES, flat.size)
        picked = mx.argpartition(-mx.abs(flat), kth=count - 1)[:count]
        values = mx.take(flat, picked)
        self._queued.append((picked, values, first_row * rows.shape[-1]))
        return picked, values

    def add(self, rows: mx.array, first_row: int) -> None:
        mx.eval(*self.add_lazy(rows, first_row))
        self._merge()

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """The strongest values so far (indices, values): restore() starts another from here."""
        self._merge()
        return self._indices.copy(), self._values.copy()

    def restore(self, indices: np.ndarray, values: np.ndarray) -> None:
        assert not self._queued and not self._indices.size
        self._indices, self._values = indices.copy(), values.copy()

    def merge_each(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Merge the queued blocks in order (evaluated together beforehand, one wait for all);
        returns the strongest values after each, as snapshot() after each add() would."""
        after = []
        for picked, values, offset in self._queued:
            indices = np.concatenate((self._indices, np.array(picked, dtype=np.int64) + offset))
            values_np = np.concatenate((self._values, np.array(values, dtype=np.float32)))
            order = np.lexsort((indices, -np.abs(values_np)))[:CANDIDATES]
            self._indices, self._values = indices[order], values_np[order]
            after.append((self._indices, self._values))
        self._queued = []
        return [(indices.copy(), values.copy()) for indices, values in after]

    def _merge(self) -> None:
        self.merge_each()

    def result(self) -> TopCandidates:
        self._merge()
        return TopCandidates(tuple(int(i) for i in self._indices),
                             tuple(float(v) for v in self._values))


@dataclass(frozen=True)
class DecodeStep:
    """One generated token; the decode stops when the consumer of the steps stops asking."""

    index: int
    token_id: int
    logits: mx.array | None = None  # the row that chose the token, for its logprobs


@dataclass(frozen=True)
class Decoded:
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    prompt_tokens: int
    prompt: TopCandidates
    generated: tuple[TopCandidates, ...]


class _Recorder:
    """Routes each position's final hidden state to the prompt or a generated chunk."""

    def __init__(self, prompt_tokens: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.prompt = _Strongest()
        self.chunks: list[_Strongest] = []
        self._pending: list[mx.array] = []

    def prompt_rows(self, rows: mx.array, first_row: int) -> None:
        self.prompt.add(rows, first_row)

    def last_prompt_row(self, row: mx.array, first_row: int) -> tuple[mx.array, ...]:
        """The prompt's last state, queued; returns what to evaluate with the first token."""
        return self.prompt.add_lazy(row, first_row)

    def generated_row(self, row: mx.array) -> tuple[mx.array, ...]:
        """Returns what to evaluate with the next token: a chunk's selection once it fills."""
        self._pending.append(row)
        return self.flush() if len(self._pending) == CHUNK_TOKENS else ()

    def flush(self) -> tuple[mx.array, ...]:
        if not self._pending:
            return ()
        chunk = _Strongest()
        self.chunks.append(chunk)
        rows, self._pending = mx.concatenate(self._pending, axis=0), []
        return chunk.add_lazy(rows, 0)


def _greedy(logits: mx.array) -> mx.array:
    """As mlx_lm's greedy sampler: argmax of the log-probabilities, left lazy."""
    return mx.argmax(logits - mx.logsumexp(logits, keepdims=True), axis=-1)


def _prefill(model, ids: mx.array, cache, recorder: _Recorder) -> int:  # type: ignore[no-untyped-def]
    """Everything but the last prompt token, as mlx_lm; returns how many were processed."""
    done = 0
    while ids.size - done > 1:
        count = min(PREFILL_STEP, ids.size - done - 1)
        hidden = model.model(ids[None, done:done + count], cache=cache)
        recorder.prompt_rows(hidden[0], done)
        done += count
    return done


class Constraint(Protocol):
    """Which tokens may come next (inference/constraints.py)."""

    def mask_logits(self, logits: np.ndarray) -> np.ndarray: ...

    def advance(self, token_id: int) -> None: ...


def _constrained(logits: mx.array, constraint: Constraint) -> mx.array:
    row = constraint.mask_logits(np.array(logits[0].astype(mx.float32)))
    return mx.array(row)[None]


def decode(model, prompt_ids: list[int], max_tokens: int, temperature: float,  # type: ignore[no-untyped-def]
           top_p: float, seed: int, eos_token_ids: frozenset[int],
           on_step: Callable[[DecodeStep], bool],
           on_last: Callable[[], None] | None = None,
           constraint: Constraint | None = None,
           on_proven: Callable[[Decoded], None] | None = None) -> Decoded | None:
    """Generate up to max_tokens, recording hidden states; None when on_step asked to stop.

    on_last is called once the last step is handed out, before the recorded states are
    gathered: a consumer holding the last token back can release it without that wait.
    A constraint masks each step's logits before the token is chosen (and is not pipelined:
    the mask needs the token before).
    on_proven, when given, gets the states recorded so far each time a chunk of CHUNK_TOKENS
    generated tokens fills (finish reason CUT_OFF, token_ids those tokens): enough for a
    partial receipt over them, so work cut off later can still be proven.

    Step s runs the model on the previous token (the last prompt token at s = 0) and
    samples token s. Greedy steps are pipelined as in mlx_lm's generate_step: step s+1
    is queued before token s is read, and dropped unrecorded if token s ends the output.
    """
    assert prompt_ids and max_tokens >= 0
    cache = make_prompt_cache(model)
    ids = mx.array(prompt_ids)
    recorder = _Recorder(len(prompt_ids))
    done = _prefill(model, ids, cache, recorder)
    greedy = temperature == 0.0
    pipelined = greedy and constraint is None

    def forward(inputs: mx.array, step: int) -> tuple[mx.array, mx.array | None, mx.array | None]:
        """The step's hidden state, and (before the last step) its logits and lazy token."""
        hidden = model.model(inputs[None], cache=cache)
        if step == max_tokens:  # the last token's state is recorded; nothing more to sample
            return hidden, None, None
        logits = _logits(model, hidden[:, -1, :])
        if constraint is not None:
            logits = _constrained(logits, constraint)
        if greedy:
            return hidden, logits, _greedy(logits)
        return hidden, logits, mx.array([sample_token(np.array(logits[0].astype(mx.float32)),
                                                      temperature, top_p, seed, step)])

    hidden, logits, token = forward(ids[done:], 0)
    mx.async_eval(*(a for a in (token, *recorder.last_prompt_row(hidden[0], done)) if a is not None))
    tokens: list[int] = []
    finish = FinishReason.LENGTH
    for step in range(max_tokens):
        assert token is not None
        following = forward(token, step + 1) if pipelined else None
        if following is not None and following[2] is not None:
            mx.async_eval(following[2])
        token_id = int(token.item())
        if constraint is not None:
            constraint.advance(token_id)
        if token_id in eos_token_ids:
            finish = FinishReason.END_TOKEN
            break
        tokens.append(token_id)
        if not on_step(DecodeStep(step, token_id, logits)):
            return None
        hidden, logits, token = following or forward(token, step + 1)
        if recorded := recorder.generated_row(hidden[0]):
            mx.async_eval(*recorded)
            if on_proven is not None:
                on_proven(Decoded(tuple(tokens), FinishReason.CUT_OFF, len(prompt_ids),
                                  recorder.prompt.result(), tuple(c.result() for c in recorder.chunks)))
    if on_last is not None:
        on_last()
    recorder.flush()
    return Decoded(tuple(tokens), finish, len(prompt_ids), recorder.prompt.result(),
                   tuple(c.result() for c in recorder.chunks))


@dataclass(frozen=True)
class Replay(Generic[T]):
    prompt_tokens: int
    prompt: TopCandidates
    generated: tuple[TopCandidates, ...]
    token_checks: tuple[T, ...]  # one per generation step: the output tokens, then the next one


def _blocks(total: int, step: int) -> Iterator[tuple[int, int]]:
    for start in range(0, total, step):
        yield start, min(total, start + step)


def replay(model, prompt_ids: list[int], output_ids: tuple[int, ...],  # type: ignore[no-untyped-def]
           check_step: Callable[[int, np.ndarray], T], step_positions: int = REPLAY_STEP) -> Replay[T]:
    """Prompt plus output through the model in passes of step_positions positions.

    check_step(step, logits) sees the logits that chose generated token `step`,
    for step 0..len(output_ids): the last one is what would have come next.
    """
    prompt_count = len(prompt_ids)
    tokens = mx.array([*prompt_ids, *output_ids])
    cache = make_prompt_cache(model)
    recorder = _Recorder(prompt_count)
    checks: list[T] = []
    for start, end in _blocks(tokens.size, step_positions):
        hidden = model.model(tokens[None, start:end], cache=cache)[0]
        if start < prompt_count:
            recorder.prompt_rows(hidden[:min(end, prompt_count) - start], start)
        position = max(start, prompt_count)
        while position < end:  # generated positions, split where the chunks split
            chunk_index, offset = divmod(position - prompt_count, CHUNK_TOKENS)
            if chunk_index == len(recorder.chunks):
                recorder.chunks.append(_Strongest())
            rows_end = min(end, position + CHUNK_TOKENS - offset)
            recorder.chunks[chunk_index].add(hidden[position - start:rows_end - start], offset)
            position = rows_end
        first = max(start, prompt_count - 1)  # positions from the last prompt token on choose tokens
        if first < end:
            logits = np.array(_logits(model, hidden[first - start:]).astype(mx.float32))
            checks.extend(check_step(position - prompt_count + 1, logits[position - first])
                          for position in range(first, end))
    return Replay(prompt_count, recorder.prompt.result(),
                  tuple(c.result() for c in recorder.chunks), tuple(checks))
