"""Continuous batching: every running job of a model decodes in one batch, on the one MLX thread.

Layers, as mlx-lm shapes generation:
- `ModelBatch.step()` runs one step of the batch: a chunk of prompt prefill for jobs waiting
  to join, then one decode step for every job in it. Jobs join at step boundaries; a job that
  finishes, stops or is cancelled leaves at once, and the rest go on.
- `BatchJob` is one job's stream: its own sampling (the seeded counter sampler the verifier
  re-derives, contracts.sampling), max_tokens, end tokens, logprobs, the text hand-over of
  engine.generate, and the recorder of its own rows of the final hidden states.
- `BatchJob.result` is the whole result once it is done, as Engine.generate returns it.

A job's prompt, but its last token, is prefilled alone in its own KV cache, in the chunks
unbatched decoding uses, so its prompt states are an unbatched run's. That cache then joins
the batch's left-padded cache (mlx-lm's BatchKVCache); a job with the model to itself decodes
in its own cache, as stream_generate does, until another job joins. The batched steps' hidden states can
differ from an unbatched run's in their low bits (the shapes differ): the verifier's
tolerances cover it (bench/concurrency.py and tests/adversarial run honest batched jobs).

Memory: the model's weights are counted once, and each job adds its KV cache. The batch's cache
is padded on the left to its longest row, so n jobs hold n x the longest context among them.

Prompt cache: each model's batch keeps the KV caches of its last few long prompts (PromptCache). A
job whose prompt shares whole blocks of PROMPT_CACHE_BLOCK tokens with one (a system prompt, a chat
history) starts from them, with the prompt's recorded states as they were after those blocks, so
its prompt commitment is the one a full prefill gives. The blocks are small, so nearly all of a
shared prefix is reused. The cache gives its memory way to jobs.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import BatchKVCache, make_prompt_cache

from contracts import hop_trace
from contracts.logprobs import TokenLogprob
from contracts.receipts import FinishReason
from contracts.sampling import sample_token
from node_agent.inference import activations, prompts
from node_agent.inference.activations import PREFILL_STEP, Constraint, Decoded
from node_agent.inference.engine import (
    GenerationRequest, GenerationResult, PromptTooLong, TokenSink, settled, with_commitment,
)

log = logging.getLogger(__name__)

PREFILL_TOKENS_PER_STEP = PREFILL_STEP  # prompt tokens prefilled between two decode steps, at most
# Shared prefixes are reused in whole blocks of this many tokens: at most one block short of the
# shared prefix is prefilled again. Each block keeps a snapshot of the prompt's strongest values
# (contracts.commitments.CANDIDATES of them); 256-token blocks reused 79% of a shared 1,000-token prompt.
PROMPT_CACHE_BLOCK = 16
PROMPT_CACHE_PROMPT_MIN = 256  # shorter prompts are not kept: they would push out the long ones that pay
PROMPT_CACHE_ENTRIES_MAX = 10  # prompts kept per model, least recently used out (as mlx_lm.server's)


def kv_bytes_per_token(model: Any) -> int:  # type: ignore[misc]
    """Keys and values for every layer, as the model's config and dtype say."""
    args = model.args
    layers = args.num_hidden_layers
    kv_heads = getattr(args, "num_key_value_heads", None) or args.num_attention_heads
    head_dim = getattr(args, "head_dim", None) or args.hidden_size // args.num_attention_heads
    embed = model.model.embed_tokens
    element = getattr(embed, "scales", embed.weight).dtype.size  # a quantized table keeps its dtype in its scales
    return 2 * layers * kv_heads * head_dim * element


def weights_bytes(model: Any) -> int:  # type: ignore[misc]
    return sum(array.nbytes for array in _leaves(model.parameters()))


def _leaves(tree: Any) -> list[mx.array]:  # type: ignore[misc]
    if isinstance(tree, mx.array):
        return [tree]
    values = tree.values() if isinstance(tree, dict) else tree
    return [leaf for value in values for leaf in _leaves(value)]


@dataclass(frozen=True)
class CachedPrompt:
    """A prefilled prompt kept for the jobs that share a prefix of it (a system prompt, a chat history)."""

    tokens: tuple[int, ...]
    layers: tuple[tuple[mx.array, mx.array], ...]  # each layer's keys and values for those tokens
    # The prompt's strongest hidden-state values after each whole block, as its recorder held them:
    # a job that reuses n blocks starts its own prompt commitment from the n-th.
    strongest: tuple[tuple[np.ndarray, np.ndarray], ...]

    @property
    def nbytes(self) -> int:
        return sum(keys.nbytes + values.nbytes for keys, values in self.layers)


def _common_prefix(a: tuple[int, ...], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PromptCache:
    """KV caches of recent prompts, reused for shared prefixes; least recently used out."""

    def __init__(self, entries_max: int = PROMPT_CACHE_ENTRIES_MAX) -> None:
        self.entries_max = entries_max
        self._entries: OrderedDict[tuple[int, ...], CachedPrompt] = OrderedDict()
        self.lookups = self.hits = 0

    @property
    def nbytes(self) -> int:
        return sum(entry.nbytes for entry in self._entries.values())

    def longest(self, prompt_ids: list[int]) -> tuple[CachedPrompt, int] | None:
        """The entry sharing the longest prefix with this prompt, and how many whole blocks of it
        (in tokens) the job can reuse: never its last token, which the batch's first step feeds."""
        self.lookups += 1
        best: tuple[CachedPrompt, int] | None = None
        for entry in self._entries.values():
            shared = min(_common_prefix(entry.tokens, prompt_ids), len(prompt_ids) - 1)
            usable = min(shared // PROMPT_CACHE_BLOCK, len(entry.strongest)) * PROMPT_CACHE_BLOCK
            if usable and (best is None or usable > best[1]):
                best = (entry, usable)
        if best is not None:
            self.hits += 1
            self._entries.move_to_end(best[0].tokens)
        return best

    def store(self, entry: CachedPrompt) -> None:
        if not entry.strongest:
            return
        self._entries[entry.tokens] = entry
        self._entries.move_to_end(entry.tokens)
        while len(self._entries) > self.entries_max:
            self._entries.popitem(last=False)

    def evict_oldest(self) -> bool:
        if not self._entries:
            return False
        self._entries.popitem(last=False)
        return True


@dataclass(frozen=True)
class JobSink:
    """Where one job's stream goes, as Engine.generate's arguments (on the MLX thread)."""

    on_token: TokenSink
    on_prompt: Callable[[int], None] | None = None
    on_logprob: Callable[[int, TokenLogprob], None] | None = None
    on_end: Callable[[], None] | None = None
    on_done: Callable[[BatchJob], None] | None = None  # result or error set; the job has left
    # The states recorded so far each time a chunk of generated tokens fills (as decode's
    # on_proven): enough for a partial receipt, so work cut off later can still be proven.
    on_proven: Callable[[Decoded], None] | None = None
    # Once its prompt was looked up in the prompt cache: (prompt tokens, of those reused from it).
    on_prompt_cache: Callable[[int, int], None] | None = None


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class BatchJob:
    """One job in a batch: its prompt's prefill, then one token a step until it leaves."""

    def __init__(self, request: GenerationRequest, prompt_ids: list[int], tokenizer: Any,  # type: ignore[misc]
                 end_token_ids: frozenset[int], sink: JobSink, model: Any, commit: bool,
                 constraint: Constraint | None = None) -> None:
        self.request, self.prompt_ids, self.sink, self.commit = request, prompt_ids, sink, commit
        self.constraint = constraint  # which tokens may come next (a tool call's grammar), or None
        self._tokenizer, self._end_token_ids = tokenizer, end_token_ids
        self.cache: list[Any] | None = make_prompt_cache(model)  # until it joins the batch
        self.prefilled = 0  # prompt tokens in its cache; all but the last before it joins
        self.cached_prompt_tokens = 0  # of those, reused from the prompt cache
        self.looked_up = False
        self.snapshots: list[tuple[np.ndarray, np.ndarray]] = []  # its recorder's prompt state per block
        self._blocks_whole: list[bool] = []  # per block queued by prefill(): whether it ends a whole one
        self._provable: tuple[int, ...] | None = None  # tokens of a chunk filled this step, to prove
        self.recorder = activations._Recorder(len(prompt_ids))
        self.fed = 0  # tokens through the batch: the last prompt token, then each generated one
        self.next_input = prompt_ids[-1]
        self.cancelled = False  # set by any thread: leaves at the next step
        self.result: GenerationResult | None = None
        self.error: BaseException | None = None
        self.started_at_ms = _now_ms()
        self.first_token_at_ms = 0
        self._detokenizer = tokenizer.detokenizer
        self._held: list[tuple[int, int, str]] = []  # the token not yet handed over, with its text
        self._accepted: list[tuple[int, str]] = []
        self._generated: list[int] = []

    @property
    def job_id(self) -> str:
        return self.request.job_id

    @property
    def prompt_left(self) -> int:
        return len(self.prompt_ids) - 1 - self.prefilled

    @property
    def greedy(self) -> bool:
        return self.request.temperature == 0.0

    @property
    def needs_row(self) -> bool:
        """Whether its token is chosen from its logits row here (sampled or constrained), not by the batch's argmax."""
        return not self.at_max_tokens and (not self.greedy or self.constraint is not None)

    # -- prefill, alone in its own cache -------------------------------------------------

    def reuse(self, cached: CachedPrompt, tokens: int) -> None:
        """Start from a cached prompt's first `tokens` (whole blocks): its KV cache and its prompt states."""
        assert self.prefilled == 0 and tokens % PROMPT_CACHE_BLOCK == 0 and tokens <= len(self.prompt_ids) - 1
        assert self.cache is not None
        for layer, (keys, values) in zip(self.cache, cached.layers):
            layer.keys, layer.values, layer.offset = keys[..., :tokens, :], values[..., :tokens, :], tokens
        blocks = tokens // PROMPT_CACHE_BLOCK
        self.snapshots = list(cached.strongest[:blocks])
        self.recorder.prompt.restore(*self.snapshots[-1])
        self.prefilled = self.cached_prompt_tokens = tokens

    def prefill(self, model: Any, most: int) -> tuple[int, list[mx.array]]:  # type: ignore[misc]
        """Queue up to `most` more prompt tokens' prefill, in unbatched decoding's chunks, left lazy;
        returns how many and what to evaluate before settle_prefill()."""
        count = min(most, self.prompt_left, PREFILL_STEP - self.prefilled % PREFILL_STEP)
        if count <= 0:
            return 0, []
        start = self.prefilled
        ids = mx.array(self.prompt_ids[start:start + count])
        hidden = model.model(ids[None], cache=self.cache)[0]
        # Recorded a block at a time, so the prompt cache keeps the state after each whole block.
        lazy: list[mx.array] = []
        row = start
        while row < start + count:
            end = min(start + count, (row // PROMPT_CACHE_BLOCK + 1) * PROMPT_CACHE_BLOCK)
            lazy.extend(self.recorder.prompt.add_lazy(hidden[row - start:end - start], row))
            self._blocks_whole.append(end % PROMPT_CACHE_BLOCK == 0)
            row = end
        self.prefilled += count
        return count, lazy

    def settle_prefill(self) -> None:
        """Once the queued prefill is evaluated: its prompt states, kept after each whole block."""
        after = self.recorder.prompt.merge_each()
        assert len(after) == len(self._blocks_whole)
        self.snapshots.extend(state for state, whole in zip(after, self._blocks_whole) if whole)
        self._blocks_whole = []

    def cached_prompt(self) -> CachedPrompt:
        """Its prefilled prompt, for later jobs sharing a prefix (before its cache joins the batch)."""
        assert self.cache is not None and self.prompt_left == 0
        n = self.prefilled
        return CachedPrompt(tuple(self.prompt_ids[:n]),
                            tuple((layer.keys[..., :n, :], layer.values[..., :n, :]) for layer in self.cache
                                  if layer.keys is not None),
                            tuple(self.snapshots))

    # -- one decode step's row -----------------------------------------------------------

    def record(self, row: mx.array) -> tuple[mx.array, ...]:
        """The final hidden state of the token fed this step; returns what to evaluate with it."""
        if self.fed == 0:
            return self.recorder.last_prompt_row(row, len(self.prompt_ids) - 1)
        recorded = self.recorder.generated_row(row)
        if recorded and self.sink.on_proven is not None:  # a chunk filled: its tokens are provable
            self._provable = tuple(self._generated)
        return recorded

    def prove(self) -> None:
        """After the step's evaluation: a partial record for the chunk that just filled, if any."""
        if self._provable is None:
            return
        tokens, self._provable = self._provable, None
        assert self.sink.on_proven is not None
        self.sink.on_proven(Decoded(tokens, FinishReason.CUT_OFF, len(self.prompt_ids),
                                    self.recorder.prompt.result(),
                                    tuple(c.result() for c in self.recorder.chunks)))

    @property
    def at_max_tokens(self) -> bool:
        """Its last token's state is recorded: nothing more to sample."""
        return self.fed == self.request.max_tokens

    def choose(self, logits_row: np.ndarray) -> tuple[int, np.ndarray]:
        """Its token from its own logits row, masked by its constraint first; and the row it chose from."""
        if self.constraint is not None:
            logits_row = self.constraint.mask_logits(logits_row)
        return sample_token(logits_row, self.request.temperature, self.request.top_p, self.request.seed,
                            self.fed), logits_row

    def take(self, token_id: int, logits: mx.array) -> FinishReason | None:
        """The token sampled for it this step; a finish reason when it ends here (None: goes on).

        Raises StoppedEarly when its stream asked to stop.
        """
        if self.constraint is not None:
            self.constraint.advance(token_id)
        if token_id in self._end_token_ids:
            return FinishReason.END_TOKEN
        index = self.fed
        if not self.first_token_at_ms:
            hop_trace.job_hop(self.job_id, "first token")
            self.first_token_at_ms = _now_ms()
        self._generated.append(token_id)
        if self.sink.on_logprob is not None and self.request.top_logprobs >= 0:
            self.sink.on_logprob(index, prompts.token_logprob(self._tokenizer, logits, token_id,
                                                              self.request.top_logprobs))
        self._detokenizer.add_token(token_id)
        if self._held and not self._hand_over(*self._held.pop()):
            raise StoppedEarly
        segment = self._detokenizer.last_segment
        if index == 0 and settled(self._tokenizer, token_id, segment):
            if not self._hand_over(index, token_id, segment):  # the first token goes at once
                raise StoppedEarly
        else:
            self._held.append((index, token_id, segment))
        self.fed += 1
        self.next_input = token_id
        return None

    def _hand_over(self, index: int, token_id: int, text: str) -> bool:
        if self.cancelled or not self.sink.on_token(index, token_id, text):
            return False
        self._accepted.append((token_id, text))
        return True

    # -- leaving ---------------------------------------------------------------------------

    def finish(self, reason: FinishReason) -> None:
        self._detokenizer.finalize()
        tail = self._detokenizer.last_segment
        if self._held:
            index, token_id, text = self._held.pop()
            self._hand_over(index, token_id, text + tail)
        elif tail:
            log.warning("job %s: text %r after the last token was dropped", self.job_id, tail)
        if self.sink.on_end is not None:
            self.sink.on_end()
        tokens = tuple(token_id for token_id, _ in self._accepted)
        text = "".join(text for _, text in self._accepted)
        if len(tokens) < len(self._generated):  # cancelled while its last token was held: no proof
            self.stop()
            return
        self.recorder.flush()
        decoded = Decoded(tuple(self._generated), reason, len(self.prompt_ids), self.recorder.prompt.result(),
                          tuple(c.result() for c in self.recorder.chunks))
        result = GenerationResult(tokens, text, len(self.prompt_ids), self.started_at_ms, _now_ms(), False,
                                  reason, self.first_token_at_ms, recorded=decoded,
                                  cached_prompt_tokens=self.cached_prompt_tokens)
        self.result = with_commitment(self.job_id, result) if self.commit else result

    def stop(self) -> None:
        """It leaves before its end (cancelled or its stream stopped): no proof."""
        tokens = tuple(token_id for token_id, _ in self._accepted)
        self.result = GenerationResult(tokens, "".join(text for _, text in self._accepted), len(self.prompt_ids),
                                       self.started_at_ms, _now_ms(), True)


class StoppedEarly(Exception):
    """A job's stream asked it to stop (cancelled, or the consumer went away)."""


class ModelBatch:
    """The running jobs of one model: a continuous batch, stepped by the one MLX thread."""

    def __init__(self, model: Any, tokenizer: Any, end_token_ids: frozenset[int],  # type: ignore[misc]
                 slots: int, memory_budget_bytes: int | None = None,
                 elsewhere: Callable[[], int] = lambda: 0, evict_elsewhere: Callable[[], bool] = lambda: False) -> None:
        """elsewhere: memory the node's other models hold now (their batches share the budget);
        evict_elsewhere: drop one of their prompt cache entries, False when they have none."""
        assert slots >= 1
        self._elsewhere, self._evict_elsewhere = elsewhere, evict_elsewhere
        self.model, self.tokenizer, self.end_token_ids = model, tokenizer, end_token_ids
        self.slots = slots
        self.weights_bytes = weights_bytes(model)
        self.kv_bytes_per_token = kv_bytes_per_token(model)
        self.memory_budget_bytes = memory_budget_bytes  # None: no cap (slots only)
        self.prompt_cache = PromptCache()
        self.waiting: deque[BatchJob] = deque()  # admitted to the node, not yet prefilling
        self.joining: list[BatchJob] = []  # prefilling, in arrival order
        self.running: list[BatchJob] = []  # in the batch, row by row
        self._cache: list[Any] | None = None  # the batch's, one per layer
        # A job decoding alone keeps its own KV cache (mlx-lm's KVCache, no padding mask): 3-5% faster
        # than a batch cache of one row, and the very computation its verifier replays.
        self._alone = False
        self._ahead: _Ahead | None = None  # the next decode step, queued before this one's tokens were read

    # -- admission -------------------------------------------------------------------------

    def job_context(self, job: BatchJob) -> int:
        return len(job.prompt_ids) + job.request.max_tokens

    def memory_with(self, jobs: list[BatchJob]) -> int:
        """Weights once, the prompt cache, and the padded KV cache these jobs hold together at their longest."""
        held = self.weights_bytes + self.prompt_cache.nbytes
        if not jobs:
            return held
        return held + len(jobs) * max(map(self.job_context, jobs)) * self.kv_bytes_per_token

    def fits_alone(self, job: BatchJob) -> bool:
        """With no other job and no prompt cache: whether it could ever run here."""
        if self.memory_budget_bytes is None:
            return True
        kv = self.job_context(job) * self.kv_bytes_per_token
        return self.weights_bytes + kv <= self.memory_budget_bytes

    def _fits(self, jobs: list[BatchJob]) -> bool:
        """Whether these jobs fit together; the prompt cache gives way first, oldest entry first."""
        if self.memory_budget_bytes is None:
            return True
        while self.memory_with(jobs) + self._elsewhere() > self.memory_budget_bytes:
            if not (self.prompt_cache.evict_oldest() or self._evict_elsewhere()):
                return False
        return True

    def _admit_waiting(self) -> None:
        """Waiting jobs start their prefill while a slot and the memory for them are free, oldest first."""
        while self.waiting and len(self.joining) + len(self.running) < self.slots:
            head = self.waiting[0]
            if head.cancelled:
                self.waiting.popleft()
                self._leave(head, None)
                continue
            if not self._fits([*self.joining, *self.running, head]):
                return  # waits for memory: jobs leave at every step
            self.joining.append(self.waiting.popleft())

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.joining or self.running)

    @property
    def in_use(self) -> int:
        return len(self.joining) + len(self.running)

    def add(self, job: BatchJob) -> None:
        self.waiting.append(job)

    # -- one step --------------------------------------------------------------------------

    def step(self, arrivals: Callable[[], None] | None = None) -> None:
        """A chunk of prefill for the jobs joining, then one token for every job in the batch.

        arrivals() starts the jobs that reached the node meanwhile. Those that arrive while the
        batch prefills are prefilled in the same step, within its prompt-token budget, before it
        joins and decodes: each join and decode step ahead of a job's first token adds to its wait
        (mlx-lm's BatchGenerator also prefills every waiting prompt first).
        A step queued ahead is taken first, alone: jobs that arrived meanwhile join at the next step."""
        if self._ahead is not None:
            self._decode_step()
            return
        self._admit_waiting()
        budget = PREFILL_TOKENS_PER_STEP - self._prefill_some(PREFILL_TOKENS_PER_STEP)
        while arrivals is not None and budget > 0 and self.joining:
            arrivals()
            self._admit_waiting()
            prefilled = self._prefill_some(budget)
            if prefilled == 0:
                break
            budget -= prefilled
        self._join_prefilled()
        if self.running:
            self._decode_step()

    def _prefill_some(self, budget: int) -> int:
        """Up to `budget` prompt tokens of the joining jobs' prefill, evaluated; returns how many."""
        most = budget
        queued: list[tuple[BatchJob, list[mx.array]]] = []
        for job in list(self.joining):
            if job.cancelled:
                self.joining.remove(job)
                self._leave(job, None)
                continue
            if budget <= 0:
                break
            lazy: list[mx.array] = []
            try:
                if not job.looked_up:
                    job.looked_up = True
                    found = self.prompt_cache.longest(job.prompt_ids)
                    if found is not None:
                        job.reuse(*found)
                    if job.sink.on_prompt_cache is not None:
                        job.sink.on_prompt_cache(len(job.prompt_ids), job.cached_prompt_tokens)
                while budget > 0 and job.prompt_left > 0:
                    done, arrays = job.prefill(self.model, budget)
                    budget -= done
                    lazy.extend(arrays)
            except Exception as error:  # one job's failure (a bad prompt) is that job's alone
                self.joining.remove(job)
                self._leave(job, error)
                continue
            queued.append((job, lazy))
        self._settle_prefills(queued)
        return most - budget

    def _settle_prefills(self, queued: list[tuple[BatchJob, list[mx.array]]]) -> None:
        """Every joining job's prefill of this step in one evaluation: on a loaded machine each wait
        for MLX costs a scheduler round (16 jobs joining took 0.2-0.9 s for 40 ms of CPU)."""
        try:
            mx.eval(*(array for _, lazy in queued for array in lazy))
        except Exception as error:  # noqa: BLE001 (one job's failure stays its own: each is evaluated alone below)
            log.warning("a joint prefill failed (%s); evaluating each job's alone", error)
        for job, lazy in queued:
            try:
                mx.eval(*lazy)
                job.settle_prefill()
            except Exception as error:  # one job's failure (a bad prompt) is that job's alone
                self.joining.remove(job)
                self._leave(job, error)

    def _join_prefilled(self) -> None:
        ready = [job for job in self.joining if job.prompt_left == 0]
        if not ready:
            return
        for job in ready:
            self.joining.remove(job)
            hop_trace.job_hop(job.job_id, "joined the batch")
            if job.prefilled >= PROMPT_CACHE_PROMPT_MIN:
                self.prompt_cache.store(job.cached_prompt())
        if self._cache is None and len(ready) == 1:
            self._cache, ready[0].cache, self._alone = ready[0].cache, None, True
            self.running.extend(ready)
            return
        room = _room_for(ready)
        merged = [_merged(list(layer), room) for layer in zip(*(job.cache for job in ready))]
        for job in ready:
            job.cache = None
        if self._alone:  # the lone job's cache becomes the batch's first row
            assert self._cache is not None
            self._cache = [_merged([layer], _room_for(self.running)) for layer in self._cache]
            self._alone = False
        if self._cache is None:
            self._cache = merged
        else:
            for ours, theirs in zip(self._cache, merged):
                ours.extend(theirs)
        self.running.extend(ready)

    def _forward(self, inputs: mx.array) -> _Ahead:
        """One decode step over the batch's rows, left lazy."""
        hidden = self.model.model(inputs, cache=self._cache)  # (jobs, 1, hidden): each job's own row
        logits = activations._logits(self.model, hidden[:, -1, :])
        return _Ahead(list(self.running), hidden, logits, mx.argmax(logits, axis=-1))

    def _can_run_ahead(self) -> bool:
        """Whether the next step's inputs are this step's argmax for every row, and nobody waits
        to join: then it is queued before this step's tokens are read, as mlx_lm's generate_step
        does, and the model computes it while this thread hands tokens over."""
        return not (self.waiting or self.joining) and not any(job.needs_row for job in self.running)

    def _decode_step(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            ahead = self._forward(mx.array([job.next_input for job in self.running])[:, None])
        # A row of a job that left after the step was queued is computed but not read.
        row_of = {id(job): i for i, job in enumerate(ahead.jobs)}
        jobs = self.running
        positions = [row_of[id(job)] for job in jobs]
        hidden, logits, greedy = ahead.hidden, ahead.logits, ahead.greedy
        recorded = [array for i, job in zip(positions, jobs) for array in job.record(hidden[i])]
        moved = positions != list(range(len(ahead.jobs)))  # some left: the cache keeps only these rows
        if self._can_run_ahead():
            if recorded:  # queued first: MLX runs a stream in order, and rows queued after the next step waited for it
                mx.async_eval(greedy, *recorded)
            self._ahead = self._forward((greedy[mx.array(positions)] if moved else greedy)[:, None])
            mx.async_eval(self._ahead.greedy)
        mx.eval(greedy, *recorded)
        for job in jobs:
            job.prove()
        every_greedy_id = greedy.tolist()
        greedy_ids = [every_greedy_id[i] for i in positions]
        if moved:
            logits = logits[mx.array(positions)]
        own_rows = [i for i, job in enumerate(jobs) if job.needs_row]
        rows = np.array(logits[mx.array(own_rows)].astype(mx.float32)) if own_rows else None
        chosen = {i: jobs[i].choose(rows[n]) for n, i in enumerate(own_rows)} if rows is not None else {}
        leaving: list[tuple[BatchJob, FinishReason | None, BaseException | None]] = []
        for i, job in enumerate(jobs):
            if job.cancelled:
                leaving.append((job, None, None))
                continue
            if job.at_max_tokens:
                leaving.append((job, FinishReason.LENGTH, None))
                continue
            if i in chosen:
                token_id, row = chosen[i]
                row_logits = mx.array(row)[None] if job.constraint is not None else logits[i:i + 1]
            else:
                token_id, row_logits = int(greedy_ids[i]), logits[i:i + 1]
            try:
                reason = job.take(token_id, row_logits)
            except StoppedEarly:
                leaving.append((job, None, None))
                continue
            except Exception as error:  # its stream's failure ends it, never the others
                leaving.append((job, None, error))
                continue
            if reason is not None:
                leaving.append((job, reason, None))
        if leaving:
            self._drop([job for job, _, _ in leaving])
            for job, reason, error in leaving:
                self._end(job, reason, error)

    def _drop(self, jobs: list[BatchJob]) -> None:
        gone = {id(job) for job in jobs}
        keep = [i for i, job in enumerate(self.running) if id(job) not in gone]
        self.running = [self.running[i] for i in keep]
        if not keep:
            self._cache = self._ahead = None
            self._alone = False
            return
        assert self._cache is not None and not self._alone, "a lone job that stays leaves no one"
        for layer in self._cache:
            layer.filter(keep)

    def _end(self, job: BatchJob, reason: FinishReason | None, error: BaseException | None) -> None:
        if error is None and reason is not None:
            try:
                job.finish(reason)
            except Exception as failure:  # its stream's or its proof's failure is its own
                error = failure
        elif error is None:
            job.stop()
        self._leave(job, error)

    def _leave(self, job: BatchJob, error: BaseException | None) -> None:
        if job.result is None and error is None:
            job.stop()
        job.error = error
        job.cache = None
        if job.sink.on_done is not None:
            job.sink.on_done(job)


def _room_for(jobs: list[BatchJob]) -> int:
    """Positions a merged cache keeps free for these jobs' coming tokens: what the longest may still
    decode, up to mlx-lm's own growth step."""
    return max(1, min(BatchKVCache.step, max(job.request.max_tokens - job.fed for job in jobs)))


def _merged(caches: list[Any], room: int) -> BatchKVCache:  # type: ignore[misc]
    """BatchKVCache.merge, into arrays with `room` free positions after the longest row. merge's
    arrays are exactly as long as it: the next decode step grew them, a zeroed copy of the whole
    cache (50-80 ms for 32 jobs joining on the test machine)."""
    lengths = [cache.offset for cache in caches]
    longest = max(lengths)
    if longest == 0:
        return BatchKVCache.merge(caches)
    first = next(cache for cache in caches if cache.keys is not None)
    heads, key_dim, value_dim = first.keys.shape[1], first.keys.shape[3], first.values.shape[3]
    keys = mx.zeros((len(caches), heads, longest + room, key_dim), dtype=first.keys.dtype)
    values = mx.zeros((len(caches), heads, longest + room, value_dim), dtype=first.values.dtype)
    for row, (cache, length) in enumerate(zip(caches, lengths)):
        if length:  # left-padded, as merge lays rows out
            keys[row:row + 1, :, longest - length:longest] = cache.keys[..., :length, :]
            values[row:row + 1, :, longest - length:longest] = cache.values[..., :length, :]
    merged = BatchKVCache([longest - length for length in lengths])
    merged.keys, merged.values = keys, values
    merged.offset += longest
    merged._idx = longest
    return merged


@dataclass(frozen=True)
class _Ahead:
    """A decode step over these jobs' rows (in this order), evaluated or in flight."""

    jobs: list[BatchJob]
    hidden: mx.array
    logits: mx.array
    greedy: mx.array


class Batches:
    """The node's batches, one per model, stepped in turn on the one MLX thread.

    `engine` loads models and keeps them warm (weights are loaded once and shared by every job
    of the model); `slots` caps the jobs decoding at once on each model.
    """

    def __init__(self, engine: Any, slots: int, memory_budget_bytes: int | None = None) -> None:  # type: ignore[misc]
        self._engine = engine
        self.slots = slots
        self.memory_budget_bytes = memory_budget_bytes
        self._batches: dict[str, ModelBatch] = {}

    def batch_for(self, model_path: str) -> ModelBatch:
        batch = self._batches.get(model_path)
        if batch is None:
            model, tokenizer = self._engine.model(model_path)
            batch = self._batches[model_path] = ModelBatch(
                model, tokenizer, self._engine.end_token_ids(model_path), self.slots, self.memory_budget_bytes,
                lambda: self._held_elsewhere(model_path), lambda: self._evict_elsewhere(model_path))
        return batch

    def _held_elsewhere(self, model_path: str) -> int:
        """What the node's other models hold: their weights, prompt caches and running jobs' KV caches."""
        return sum(batch.memory_with([*batch.joining, *batch.running])
                   for path, batch in self._batches.items() if path != model_path)

    def _evict_elsewhere(self, model_path: str) -> bool:
        return any(batch.prompt_cache.evict_oldest() for path, batch in self._batches.items() if path != model_path)

    def add(self, request: GenerationRequest, max_context_tokens: int, sink: JobSink,
            commit: bool = True) -> BatchJob:
        """Admit a job: it joins its model's batch at a step boundary.

        Raises PromptTooLong (before anything runs) when the prompt and max_tokens exceed the
        context, or the job could not fit this node's memory even alone; PromptRefused when its
        tool grammar cannot be applied (prompts.job_constraint).
        """
        batch = self.batch_for(request.model_path)
        prompt_ids = prompts.encode_job_prompt(batch.tokenizer, request.prompt)
        constraint = prompts.job_constraint(batch.tokenizer, request.prompt)  # raises PromptRefused
        if len(prompt_ids) + request.max_tokens > max_context_tokens:
            raise PromptTooLong(f"prompt is {len(prompt_ids)} tokens; with max_tokens "
                                f"{request.max_tokens} that exceeds the model's context of "
                                f"{max_context_tokens}")
        job = BatchJob(request, prompt_ids, batch.tokenizer, batch.end_token_ids, sink, batch.model, commit,
                       constraint)
        if not batch.fits_alone(job):
            raise PromptTooLong(f"the model and {len(prompt_ids) + request.max_tokens} tokens of KV cache "
                                f"need {batch.weights_bytes + batch.job_context(job) * batch.kv_bytes_per_token:,} "
                                f"bytes; this node lends "
                                f"{batch.memory_budget_bytes:,}")
        if sink.on_prompt is not None:
            sink.on_prompt(len(prompt_ids))
        hop_trace.job_hop(request.job_id, "prefill started")
        batch.add(job)
        return job

    @property
    def busy(self) -> bool:
        return any(batch.busy for batch in self._batches.values())

    @property
    def in_use(self) -> int:
        """Jobs prefilling or decoding now, over every model."""
        return sum(batch.in_use for batch in self._batches.values())

    def step(self, arrivals: Callable[[], None] | None = None) -> None:
        """One step of each busy batch; arrivals() starts jobs that arrived meanwhile (ModelBatch.step)."""
        for batch in list(self._batches.values()):
            if batch.busy:
                batch.step(arrivals)

    def run_until_idle(self) -> None:
        while self.busy:
            self.step()


def generate_batched(engine: Any, requests: list[GenerationRequest], max_context_tokens: int,  # type: ignore[misc]
                     slots: int | None = None) -> list[GenerationResult]:
    """The whole results of jobs run together in one batch (tests and benchmarks)."""
    batches = Batches(engine, slots or max(1, len(requests)))
    jobs = [batches.add(request, max_context_tokens, JobSink(lambda index, token_id, text: True))
            for request in requests]
    batches.run_until_idle()
    for job in jobs:
        if job.error is not None:
            raise job.error
    return [job.result for job in jobs if job.result is not None]

