"""The recording decode loop and the verifier's replay, on the project's tiny model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mlx_lm import load, stream_generate

from contracts.commitments import chunk_key, commit_chunk, value_differences
from contracts.receipts import FinishReason
from node_agent.inference.activations import Replay, decode, encode_prompt, replay

PROMPT = "And God called the light Day"


@pytest.fixture(scope="module")
def loaded(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    return load(str(tiny_model_dir))


def _decode(loaded, max_tokens: int, temperature: float = 0.0, ends: frozenset[int] = frozenset()):  # type: ignore[no-untyped-def]
    model, tokenizer = loaded
    decoded = decode(model, encode_prompt(tokenizer, PROMPT), max_tokens, temperature, 0.9, 5, ends,
                     lambda step: True)
    assert decoded is not None
    return decoded


def _replay(loaded, decoded, step_positions: int = 512) -> Replay:  # type: ignore[no-untyped-def]
    model, tokenizer = loaded
    return replay(model, encode_prompt(tokenizer, PROMPT), decoded.token_ids,
                  lambda step, logits: (step, int(np.argmax(logits))), step_positions)


def test_greedy_decoding_makes_exactly_mlx_lm_tokens(loaded) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = loaded
    expected = [r.token for r in stream_generate(model, tokenizer, PROMPT, max_tokens=40)]
    decoded = _decode(loaded, 40)
    assert list(decoded.token_ids) == expected
    assert decoded.finish_reason is FinishReason.LENGTH
    assert decoded.prompt_tokens == len(encode_prompt(tokenizer, PROMPT))
    assert len(decoded.generated) == 2  # tokens 0-31 and 32-39


@pytest.mark.parametrize("step_positions", [512, 7, 32])
def test_replay_recovers_every_chunk_and_token(loaded, step_positions: int) -> None:  # type: ignore[no-untyped-def]
    decoded = _decode(loaded, 70, temperature=0.0)
    replayed = _replay(loaded, decoded, step_positions)
    assert replayed.prompt_tokens == decoded.prompt_tokens
    assert len(replayed.generated) == len(decoded.generated) == 3
    for number, (mine, theirs) in enumerate(zip((decoded.prompt, *decoded.generated),
                                                (replayed.prompt, *replayed.generated))):
        key = chunk_key("job-t", number)
        assert value_differences(commit_chunk(mine, key), theirs, key).max() <= 1
    assert [step for step, _ in replayed.token_checks] == list(range(71))
    assert tuple(best for _, best in replayed.token_checks[:70]) == decoded.token_ids


def test_a_sampled_end_token_stops_the_output(loaded) -> None:  # type: ignore[no-untyped-def]
    free = _decode(loaded, 10)
    stop_at = free.token_ids[4]
    decoded = _decode(loaded, 10, ends=frozenset({stop_at}))
    assert decoded.finish_reason is FinishReason.END_TOKEN
    assert decoded.token_ids == free.token_ids[:4]
    assert len(decoded.generated) == 1


def test_stopping_early_returns_nothing(loaded) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = loaded
    seen: list[int] = []
    result = decode(model, encode_prompt(tokenizer, PROMPT), 20, 0.0, 1.0, 0, frozenset(),
                    lambda step: seen.append(step.token_id) is None and len(seen) < 3)
    assert result is None and len(seen) == 3
