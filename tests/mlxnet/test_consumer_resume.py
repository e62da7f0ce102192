"""A consumer's stream that resumes at another coordinator repeats nothing it already yielded."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mlxnet.consumer import Resume, StreamedTokens


def _messages(chunks: list[tuple[int, str]]) -> list[tuple[int, tuple[int, ...], str]]:
    """(token count, text) per message, as a stream from the first token sends them."""
    messages, index = [], 0
    for count, text in chunks:
        messages.append((index, tuple(range(index, index + count)), text))
        index += count
    return messages


def test_a_restarted_stream_yields_only_what_follows() -> None:
    messages = _messages([(1, "He"), (2, "llo"), (0, " held"), (3, " world")])
    resume = Resume()
    first = [resume.fresh(*m) for m in messages[:2]]
    resume.restart()
    second = [resume.fresh(*m) for m in messages]
    assert first == [StreamedTokens(0, (0,), "He"), StreamedTokens(1, (1, 2), "llo")]
    assert second == [None, None, StreamedTokens(3, (), " held"), StreamedTokens(3, (3, 4, 5), " world")]


@given(st.lists(st.tuples(st.integers(0, 4), st.text(max_size=5)), max_size=12),
       st.lists(st.integers(0, 12), max_size=4))
def test_breaks_anywhere_yield_every_token_and_character_once(
        chunks: list[tuple[int, str]], breaks: list[int]) -> None:
    messages = _messages(chunks)
    resume, yielded = Resume(), []
    for cut in [*breaks, len(messages)]:  # each stream gets this far, then breaks
        resume.restart()
        yielded += [t for t in (resume.fresh(*m) for m in messages[:cut]) if t is not None]
    assert [i for t in yielded for i in t.token_ids] == [i for m in messages for i in m[1]]
    assert "".join(t.text for t in yielded) == "".join(text for _, text in chunks)
    assert all(t.first_index == next_index for t, next_index in zip(
        yielded, _starts(yielded), strict=True))


def _starts(yielded: list[StreamedTokens]) -> list[int]:
    starts, index = [], 0
    for tokens in yielded:
        starts.append(index)
        index += len(tokens.token_ids)
    return starts
