"""Stop sequences cut the same text however it is split into streamed pieces."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.jobs.stops import StopScanner, cut_at_stop

ALPHABET = "ab\n."


def test_cut_at_the_earliest_stop_of_any_sequence() -> None:
    assert cut_at_stop("one. two\nthree", (".", "\n")) == ("one", True)
    assert cut_at_stop("one two", ("\n",)) == ("one two", False)
    assert cut_at_stop("abc", ()) == ("abc", False)


def test_a_stop_split_across_pieces_is_never_shown() -> None:
    scanner = StopScanner(("END",))
    shown = [scanner.feed(piece) for piece in ("it is E", "N", "D here")]
    assert shown == ["it is ", "", ""]
    assert scanner.stopped and scanner.flush() == ""


def test_a_held_back_prefix_is_shown_once_it_cannot_be_a_stop() -> None:
    scanner = StopScanner(("END",))
    assert scanner.feed("EN") == ""
    assert scanner.feed("ough") == "ENough"
    assert scanner.feed("E") == ""
    assert scanner.flush() == "E" and not scanner.stopped


@given(text=st.text(ALPHABET, max_size=40),
       stops=st.lists(st.text(ALPHABET, min_size=1, max_size=4), max_size=4),
       cuts=st.lists(st.integers(0, 40), max_size=10))
def test_streamed_output_equals_the_whole_text_cut_once(text: str, stops: list[str],
                                                        cuts: list[int]) -> None:
    bounds = sorted({0, len(text), *(min(c, len(text)) for c in cuts)})
    pieces = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    scanner = StopScanner(tuple(stops))
    shown = "".join(scanner.feed(piece) for piece in pieces) + scanner.flush()
    assert (shown, scanner.stopped) == cut_at_stop(text, tuple(stops))
    assert scanner.shown_chars == len(shown)
