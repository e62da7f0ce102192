"""Continuous batching: jobs join and leave a running batch, each keeps its own stream and proof."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from node_agent.inference.batch import PROMPT_CACHE_BLOCK, Batches, BatchJob, JobSink, generate_batched
from node_agent.inference.engine import Engine, GenerationRequest, GenerationResult, PromptTooLong
from node_agent.inference.prompts import encode_job_prompt

CONTEXT = 4096
PROMPTS = ("In the beginning", "And Noah", "And the LORD said unto Abram, Get thee out of thy country",
           "And God", "Isaac", "And it came to pass after these things")


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


def _request(model_dir: Path, i: int, max_tokens: int = 24, temperature: float = 0.0,
             seed: int = 0) -> GenerationRequest:
    return GenerationRequest(str(model_dir), PROMPTS[i % len(PROMPTS)], max_tokens, temperature,
                             0.9 if temperature else 1.0, seed, f"job-{i}")


def _alone(engine: Engine, request: GenerationRequest) -> GenerationResult:
    return engine.generate(request, CONTEXT, lambda index, token_id, text: True)


class Stream:
    """One job's stream as its consumer sees it, with the batch's step at each token."""

    def __init__(self, batches: Batches, stop_at: int | None = None, fail_at: int | None = None) -> None:
        self.batches, self.stop_at, self.fail_at = batches, stop_at, fail_at
        self.tokens: list[tuple[int, int]] = []  # (index, token id)
        self.texts: list[str] = []
        self.done: list[BatchJob] = []

    def sink(self) -> JobSink:
        return JobSink(self.on_token, on_done=self.done.append)

    def on_token(self, index: int, token_id: int, text: str) -> bool:
        if index == self.fail_at:
            raise RuntimeError("the consumer's side broke")
        self.tokens.append((index, token_id))
        self.texts.append(text)
        return index != self.stop_at


def test_jobs_join_a_running_batch_and_leave_it_as_they_end(engine: Engine, tiny_model_dir: Path) -> None:
    batches = Batches(engine, slots=8)
    long, short, late = Stream(batches), Stream(batches), Stream(batches)
    first = batches.add(_request(tiny_model_dir, 0, max_tokens=40), CONTEXT, long.sink())
    for _ in range(5):
        batches.step()
    joined_at = len(long.tokens)
    batches.add(_request(tiny_model_dir, 1, max_tokens=6), CONTEXT, short.sink())
    # It joins at a step boundary: the next one, or the one after when a step was already queued
    # ahead (a batch of greedy jobs queues its next step before reading this one's tokens).
    steps = 0
    while not short.tokens:
        batches.step()
        steps += 1
    assert steps <= 2 and len(short.tokens) == 1 and len(long.tokens) == joined_at + steps
    batches.add(_request(tiny_model_dir, 2, max_tokens=20), CONTEXT, late.sink())
    while not short.done:
        batches.step()
    assert first not in short.done and len(batches.batch_for(str(tiny_model_dir)).running) == 2  # left at once
    batches.run_until_idle()
    for stream, i, max_tokens in ((long, 0, 40), (short, 1, 6), (late, 2, 20)):
        (job,) = stream.done
        assert job.error is None and job.result is not None and not job.result.stopped_early
        alone = _alone(engine, _request(tiny_model_dir, i, max_tokens=max_tokens))
        assert job.result.token_ids == alone.token_ids and job.result.text == alone.text == "".join(stream.texts)
        assert [index for index, _ in stream.tokens] == list(range(len(alone.token_ids)))


def test_a_cancelled_job_leaves_while_the_others_go_on(engine: Engine, tiny_model_dir: Path) -> None:
    batches = Batches(engine, slots=4)
    streams = [Stream(batches) for _ in range(3)]
    jobs = [batches.add(_request(tiny_model_dir, i, max_tokens=30), CONTEXT, s.sink()) for i, s in enumerate(streams)]
    for _ in range(4):
        batches.step()
    jobs[1].cancelled = True  # as the agent's stop does, from any thread
    batches.step()
    assert streams[1].done and jobs[1].result is not None and jobs[1].result.stopped_early
    assert jobs[1].result.activation_commitment == b"" and len(batches.batch_for(str(tiny_model_dir)).running) == 2
    batches.run_until_idle()
    for i in (0, 2):
        assert jobs[i].result.token_ids == _alone(engine, _request(tiny_model_dir, i, max_tokens=30)).token_ids  # type: ignore[union-attr]
        assert jobs[i].result.activation_commitment  # type: ignore[union-attr]


def test_one_jobs_error_or_stop_never_ends_another(engine: Engine, tiny_model_dir: Path) -> None:
    batches = Batches(engine, slots=8)
    broken, stopped, fine = Stream(batches, fail_at=3), Stream(batches, stop_at=2), Stream(batches)
    batches.add(_request(tiny_model_dir, 0, max_tokens=20), CONTEXT, broken.sink())
    batches.add(_request(tiny_model_dir, 1, max_tokens=20), CONTEXT, stopped.sink())
    job = batches.add(_request(tiny_model_dir, 2, max_tokens=20), CONTEXT, fine.sink())
    with pytest.raises(PromptTooLong):  # a bad prompt is refused before it joins
        batches.add(_request(tiny_model_dir, 3, max_tokens=CONTEXT), CONTEXT, Stream(batches).sink())
    batches.run_until_idle()
    assert isinstance(broken.done[0].error, RuntimeError)
    assert stopped.done[0].result.stopped_early and len(stopped.tokens) == 3  # type: ignore[union-attr]
    assert job.error is None and job.result.token_ids == _alone(engine, _request(tiny_model_dir, 2, max_tokens=20)).token_ids  # type: ignore[union-attr]


@pytest.mark.parametrize("size", [2, 5])
def test_greedy_batched_jobs_equal_the_same_jobs_run_alone(engine: Engine, tiny_model_dir: Path, size: int) -> None:
    requests = [_request(tiny_model_dir, i, max_tokens=8 + 7 * i) for i in range(size)]
    for batched, request in zip(generate_batched(engine, requests, CONTEXT), requests):
        alone = _alone(engine, request)
        assert batched.token_ids == alone.token_ids and batched.text == alone.text
        assert batched.finish_reason == alone.finish_reason


def test_seeded_sampling_is_the_same_at_every_batch_size(engine: Engine, tiny_model_dir: Path) -> None:
    sampled = _request(tiny_model_dir, 2, max_tokens=32, temperature=0.8, seed=12345)
    others = [_request(tiny_model_dir, i, max_tokens=20 + i, temperature=(0.0, 1.0)[i % 2], seed=i) for i in range(7)]
    runs = [generate_batched(engine, [sampled, *others[:size - 1]], CONTEXT)[0].token_ids for size in (1, 2, 4, 8)]
    assert all(run == runs[0] for run in runs) and len(runs[0]) > 0
    assert runs[0] == _alone(engine, sampled).token_ids


def test_memory_admission_refuses_what_can_never_fit_and_holds_what_fits_later(
        engine: Engine, tiny_model_dir: Path) -> None:
    probe = Batches(engine, slots=4).batch_for(str(tiny_model_dir))
    per_token, weights = probe.kv_bytes_per_token, probe.weights_bytes
    # Room for the weights and one job of about 100 tokens of context, not two.
    batches = Batches(engine, slots=4, memory_budget_bytes=weights + 100 * per_token)
    with pytest.raises(PromptTooLong, match="this node lends"):
        batches.add(_request(tiny_model_dir, 0, max_tokens=400), CONTEXT, Stream(batches).sink())
    first, second = Stream(batches), Stream(batches)
    batches.add(_request(tiny_model_dir, 0, max_tokens=60), CONTEXT, first.sink())
    batches.add(_request(tiny_model_dir, 1, max_tokens=60), CONTEXT, second.sink())
    batch = batches.batch_for(str(tiny_model_dir))
    batches.step()
    assert len(batch.running) == 1 and len(batch.waiting) == 1  # the second waits for memory
    while not first.done:
        assert not second.tokens
        batches.step()
    batches.run_until_idle()
    assert second.done and second.done[0].result is not None and not second.done[0].result.stopped_early


def test_two_models_share_the_nodes_memory_budget(engine: Engine, tiny_model_dir: Path, tmp_path: Path) -> None:
    other_dir = tmp_path / "other-model"
    shutil.copytree(tiny_model_dir, other_dir)  # the same weights at another path: a second model
    probe = Batches(engine, slots=4).batch_for(str(tiny_model_dir))
    per_token, weights = probe.kv_bytes_per_token, probe.weights_bytes
    # Both models' weights and one job of about 100 tokens of context, not one job of each.
    batches = Batches(engine, slots=4, memory_budget_bytes=2 * weights + 100 * per_token)
    batches.batch_for(str(other_dir))  # loaded: its weights are held
    first, second = Stream(batches), Stream(batches)
    batches.add(_request(tiny_model_dir, 0, max_tokens=60), CONTEXT, first.sink())
    batches.add(_request(other_dir, 1, max_tokens=60), CONTEXT, second.sink())
    one, other = batches.batch_for(str(tiny_model_dir)), batches.batch_for(str(other_dir))
    batches.step()
    # Whichever model's batch steps first takes the memory; the other model's job waits for it.
    assert sorted((len(b.waiting), b.in_use) for b in (one, other)) == [(0, 1), (1, 0)]
    started, waiting = (first, second) if one.in_use else (second, first)
    while not started.done:
        assert not waiting.tokens
        batches.step()
    batches.run_until_idle()
    assert waiting.done and waiting.done[0].result is not None and not waiting.done[0].result.stopped_early


def test_no_token_of_one_job_reaches_another_under_random_arrivals(tiny_model_dir: Path) -> None:
    """A property over random arrivals, cancels and lengths, run in a child process (MLX work
    that could crash natively stays out of the pytest process)."""
    child = subprocess.run([sys.executable, "-m", "tests.node_agent.inference.batch_arrivals", str(tiny_model_dir),
                            "--schedules", "6", "--seed", "7"], capture_output=True, text=True, timeout=900,
                           cwd=Path(__file__).resolve().parents[3])
    assert child.returncode == 0, child.stderr[-3000:]
    report = json.loads(child.stdout.splitlines()[-1])
    assert report["schedules"] == 6 and report["jobs"] >= 30 and report["cancelled"] >= 1 and report["mid_step"] >= 5
    assert report["mismatches"] == [], report["mismatches"][:5]


SYSTEM = " ".join(["In the beginning God created the heaven and the earth."] * 40)  # some 500 tokens


def test_a_shared_prefix_is_reused_from_the_prompt_cache_with_the_same_tokens_and_proof(
        engine: Engine, tiny_model_dir: Path) -> None:
    batches = Batches(engine, slots=4)
    first = GenerationRequest(str(tiny_model_dir), SYSTEM + " And Noah", 16, 0.0, 1.0, 0, "job-first")
    second = GenerationRequest(str(tiny_model_dir), SYSTEM + " And the LORD said", 16, 0.7, 0.9, 3, "job-second")
    jobs = [batches.add(first, CONTEXT, Stream(batches).sink())]
    batches.run_until_idle()
    jobs.append(batches.add(second, CONTEXT, Stream(batches).sink()))
    batches.run_until_idle()
    assert jobs[0].result.cached_prompt_tokens == 0  # type: ignore[union-attr]
    # All but the last partial block of the shared prefix (the system prompt and " And").
    shared = _common_prefix_tokens(engine, tiny_model_dir, first.prompt, second.prompt)
    reused = jobs[1].result.cached_prompt_tokens  # type: ignore[union-attr]
    assert reused % PROMPT_CACHE_BLOCK == 0 and shared - PROMPT_CACHE_BLOCK < reused <= shared
    cache = batches.batch_for(str(tiny_model_dir)).prompt_cache
    assert (cache.lookups, cache.hits) == (2, 1)
    for job, request in zip(jobs, (first, second)):
        alone = _alone(engine, request)
        assert job.result.token_ids == alone.token_ids  # type: ignore[union-attr]
        assert job.result.activation_commitment == alone.activation_commitment  # type: ignore[union-attr]


def _common_prefix_tokens(engine: Engine, model_dir: Path, a: str, b: str) -> int:
    _, tokenizer = engine.model(str(model_dir))
    ids_a, ids_b = (encode_job_prompt(tokenizer, prompt) for prompt in (a, b))
    return next((i for i, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y), min(len(ids_a), len(ids_b)))


def test_short_prompts_are_not_kept_in_the_prompt_cache(engine: Engine, tiny_model_dir: Path) -> None:
    batches = Batches(engine, slots=4)
    for i in range(4):
        batches.add(_request(tiny_model_dir, i, max_tokens=4), CONTEXT, Stream(batches).sink())
    batches.run_until_idle()
    assert batches.batch_for(str(tiny_model_dir)).prompt_cache.nbytes == 0


def test_the_prompt_cache_gives_its_memory_way_to_jobs(engine: Engine, tiny_model_dir: Path) -> None:
    probe = Batches(engine, slots=2).batch_for(str(tiny_model_dir))
    job_tokens = 600  # the system prompt (some 560 tokens), a few words and 16 new tokens
    batches = Batches(engine, slots=2, memory_budget_bytes=probe.weights_bytes + job_tokens * probe.kv_bytes_per_token)
    batch = batches.batch_for(str(tiny_model_dir))
    batches.add(GenerationRequest(str(tiny_model_dir), SYSTEM + " And Noah", 16, 0.0, 1.0, 0, "a"), CONTEXT,
                Stream(batches).sink())
    batches.run_until_idle()
    assert batch.prompt_cache.nbytes > 0
    done = Stream(batches)
    # 100 tokens: it fits beside the weights, not beside the cached prompt too.
    batches.add(GenerationRequest(str(tiny_model_dir), "Isaac", 100, 0.0, 1.0, 0, "b"), CONTEXT, done.sink())
    batches.run_until_idle()
    assert done.done and batch.prompt_cache.nbytes == 0  # evicted, so the job could run


def test_a_tool_call_grammar_holds_in_a_batch_as_alone(engine: Engine, tiny_model_dir: Path) -> None:
    from tests.node_agent.inference.test_tool_constraint import _prompt

    constrained = [GenerationRequest(str(tiny_model_dir), _prompt("function:get_weather"), 96, temperature, 1.0, 11,
                                     f"job-tools-{temperature}") for temperature in (0.0, 0.9)]
    free = [_request(tiny_model_dir, i, max_tokens=30) for i in range(2)]
    for batched, request in zip(generate_batched(engine, [*constrained, *free], CONTEXT), [*constrained, *free]):
        alone = _alone(engine, request)
        assert batched.token_ids == alone.token_ids and batched.finish_reason == alone.finish_reason


def test_a_json_schema_grammar_holds_in_a_batch_as_alone(engine: Engine, tiny_model_dir: Path) -> None:
    """Each job decodes under its own grammar: a JSON answer and a forced call beside free jobs."""
    from contracts.structured_output import FORMAT_JSON_SCHEMA, canonical_format
    from tests.node_agent.inference.test_structured_output import PERSON
    from tests.node_agent.inference.test_structured_output import _prompt as json_prompt
    from tests.node_agent.inference.test_tool_constraint import _prompt as call_prompt

    constrained = [GenerationRequest(str(tiny_model_dir), json_prompt(canonical_format(FORMAT_JSON_SCHEMA, PERSON)),
                                     160, 0.0, 1.0, 3, "job-json"),
                   GenerationRequest(str(tiny_model_dir), call_prompt("function:get_weather"), 96, 0.0, 1.0, 3,
                                     "job-call")]
    free = [_request(tiny_model_dir, i, max_tokens=30) for i in range(2)]
    requests = [constrained[0], free[0], constrained[1], free[1]]
    for batched, request in zip(generate_batched(engine, requests, CONTEXT), requests):
        alone = _alone(engine, request)
        assert batched.token_ids == alone.token_ids and batched.finish_reason == alone.finish_reason
    assert json.loads(_alone(engine, constrained[0]).text)["kind"] in ("cat", "dog")


def test_a_job_alone_decodes_in_its_own_cache_until_another_joins(engine: Engine, tiny_model_dir: Path) -> None:
    """Alone, a job keeps mlx-lm's plain KV cache (no padding mask: the computation stream_generate
    and the verifier run), so its proof is an unbatched run's; a second job turns that cache into
    the batch's first row, and both give the tokens they give alone."""
    from mlx_lm.models.cache import BatchKVCache, KVCache

    batches = Batches(engine, slots=4)
    batch = batches.batch_for(str(tiny_model_dir))
    lone, joiner = Stream(batches), Stream(batches)
    batches.add(_request(tiny_model_dir, 2, max_tokens=30), CONTEXT, lone.sink())
    for _ in range(4):
        batches.step()
    assert batch._cache is not None and all(type(layer) is KVCache for layer in batch._cache)
    batches.add(_request(tiny_model_dir, 3, max_tokens=5), CONTEXT, joiner.sink())
    while not joiner.tokens:
        batches.step()
    assert all(type(layer) is BatchKVCache for layer in batch._cache)
    batches.run_until_idle()
    assert batch._cache is None
    for stream, i, max_tokens in ((lone, 2, 30), (joiner, 3, 5)):
        (job,) = stream.done
        alone = _alone(engine, _request(tiny_model_dir, i, max_tokens=max_tokens))
        assert job.result is not None and job.result.token_ids == alone.token_ids

    only = Stream(batches)
    batches.add(_request(tiny_model_dir, 4, max_tokens=12), CONTEXT, only.sink())
    batches.run_until_idle()
    (job,) = only.done
    alone = _alone(engine, _request(tiny_model_dir, 4, max_tokens=12))
    assert job.result is not None and job.result.token_ids == alone.token_ids
    assert job.result.activation_commitment == alone.activation_commitment != b""


def test_jobs_arriving_during_a_prefill_are_prefilled_before_the_batch_decodes(
        engine: Engine, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job that reaches the node while the batch prefills joins in the same step: its first
    token comes with the earlier jobs' first tokens, not after their join and decode step. The
    step's prompt-token budget still bounds how long the running jobs wait."""
    from node_agent.inference import batch as batch_module

    batches = Batches(engine, slots=8)
    early, late, later = Stream(batches), Stream(batches), Stream(batches)
    arriving = [(late, 1), (later, 5)]

    def arrivals() -> None:  # one job reaches the node during each prefill
        if arriving:
            stream, i = arriving.pop(0)
            batches.add(_request(tiny_model_dir, i, max_tokens=8), CONTEXT, stream.sink())

    batches.add(_request(tiny_model_dir, 0, max_tokens=8), CONTEXT, early.sink())
    batches.step(arrivals)
    assert not arriving and [len(s.tokens) for s in (early, late, later)] == [1, 1, 1]
    while batches.busy:
        batches.step(arrivals)
    for stream, i in ((early, 0), (late, 1), (later, 5)):
        (job,) = stream.done
        alone = _alone(engine, _request(tiny_model_dir, i, max_tokens=8))
        assert job.result is not None and job.result.token_ids == alone.token_ids

    # With a budget of one prompt's tokens, the step spends it all on the first job and decodes:
    # arrivals are not even looked for until the next step.
    first_prompt = len(encode_job_prompt(engine.model(str(tiny_model_dir))[1], PROMPTS[0])) - 1
    monkeypatch.setattr(batch_module, "PREFILL_TOKENS_PER_STEP", first_prompt)
    capped, waits = Stream(batches), Stream(batches)
    arriving[:] = [(waits, 1)]
    batches.add(_request(tiny_model_dir, 0, max_tokens=8), CONTEXT, capped.sink())
    batches.step(arrivals)
    assert len(capped.tokens) == 1 and arriving == [(waits, 1)]
    batches.run_until_idle()
    assert capped.done and not waits.done


def test_joined_caches_keep_room_for_the_coming_tokens(engine: Engine, tiny_model_dir: Path) -> None:
    """The batch's merged cache holds what mlx-lm's merge holds, with free positions after it, so the
    first decode step writes in place instead of growing (copying) the whole cache."""
    import mlx.core as mx
    from mlx_lm.models.cache import BatchKVCache, make_prompt_cache

    from node_agent.inference.batch import _merged

    model, tokenizer = engine.model(str(tiny_model_dir))
    caches = []
    for prompt in PROMPTS[:3]:
        cache = make_prompt_cache(model)
        model.model(mx.array(encode_job_prompt(tokenizer, prompt))[None], cache=cache)
        caches.append(cache[0])
    theirs, ours = BatchKVCache.merge(caches), _merged(caches, room=5)
    longest = theirs.keys.shape[2]
    assert ours.keys.shape[2] == longest + 5 and ours._idx == theirs._idx == longest
    assert ours.offset.tolist() == theirs.offset.tolist() and ours.left_padding.tolist() == theirs.left_padding.tolist()
    for a, b in zip(ours.keys_and_values(), theirs.keys_and_values()):
        assert mx.array_equal(a, b).item()
    step = mx.ones((3, ours.keys.shape[1], 1, ours.keys.shape[3]))
    ours.update_and_fetch(step, step)
    assert ours.keys.shape[2] == longest + 5  # written in place
