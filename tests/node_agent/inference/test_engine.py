"""The engine's hand-over of tokens: text as mlx_lm makes it, the first token without delay."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlx_lm import load, stream_generate

from node_agent.inference.engine import Engine, GenerationRequest, settled, with_commitment


class _Tokenizer:
    """Decodes each token id to the text given for it."""

    def __init__(self, texts: dict[int, str]) -> None:
        self._texts = texts

    def decode(self, ids: list[int]) -> str:
        return "".join(self._texts[i] for i in ids)


@pytest.mark.parametrize(("text", "segment", "expected"), [
    ("hello", "hello", True),
    (" hello", "hello", True),  # a leading space dropped at the start stays dropped
    ("a ", "a", False),  # a trailing space held back may still come
    ("  ", " ", False),
    ("\ufffd", "", False),  # half a character
    ("ab\ufffd", "ab", False),
    ("\n", "\n", False),
    ("x", "", False),
])
def test_a_first_token_is_settled_only_when_nothing_of_it_is_held_back(
        text: str, segment: str, expected: bool) -> None:
    assert settled(_Tokenizer({7: text}), 7, segment) is expected


@pytest.mark.parametrize("prompt", ["In the beginning", "And Noah", "And the LORD said"])
def test_the_first_token_goes_before_the_second_is_made_and_the_text_is_mlx_lms(
        tiny_model_dir: Path, prompt: str) -> None:
    events: list[tuple[str, int]] = []
    texts: list[str] = []

    def on_token(index: int, token_id: int, text: str) -> bool:
        events.append(("token", index))
        texts.append(text)
        return True

    result = Engine().generate(
        GenerationRequest(str(tiny_model_dir), prompt, 24, 0.0, 1.0, 0, "job-e", top_logprobs=0),
        4096, on_token, None, lambda index, _: events.append(("logprobs", index)))
    model, tokenizer = load(str(tiny_model_dir))
    expected = [r for r in stream_generate(model, tokenizer, prompt, max_tokens=24)]
    assert result.token_ids == tuple(r.token for r in expected)
    assert "".join(texts) == result.text == "".join(r.text for r in expected)
    assert events.index(("token", 0)) < events.index(("logprobs", 1))
    assert [index for kind, index in events if kind == "token"] == list(range(24))


def test_the_last_token_goes_before_the_proof_and_a_later_commitment_is_the_same(
        tiny_model_dir: Path) -> None:
    engine = Engine()
    request = GenerationRequest(str(tiny_model_dir), "And Abraham", 40, 0.0, 1.0, 0, "job-p")
    events: list[str] = []
    deferred = engine.generate(request, 4096, lambda index, *_: events.append(f"token {index}") is None,
                               on_end=lambda: events.append("end"), commit=False)
    assert events[-2:] == ["token 39", "end"]
    assert deferred.activation_commitment == b"" and deferred.recorded is not None
    inline = engine.generate(request, 4096, lambda *_: True)
    assert inline.recorded is None and inline.activation_commitment
    finished = with_commitment("job-p", deferred)
    assert finished.activation_commitment == inline.activation_commitment
    assert finished.recorded is None and finished.token_ids == inline.token_ids
