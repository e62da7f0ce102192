"""bench.first_token_hops' arithmetic over a trace, and the trace of a real request through every process."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.first_token_hops import (
    CLIENT_FIRST_TEXT, CLIENT_SENT, FIRST_TOKEN, PREFILL_STARTED, hop_table, outside_prefill_ms,
)
from contracts import hop_trace

MS = 1_000_000


def _job(start: int, prefill_ms: int) -> list[tuple[int, str]]:
    return [(start, CLIENT_SENT), (start + 2 * MS, "request"), (start + 10 * MS, PREFILL_STARTED),
            (start + (10 + prefill_ms) * MS, FIRST_TOKEN), (start + (14 + prefill_ms) * MS, CLIENT_FIRST_TEXT)]


def test_hop_table_gives_medians_from_the_request_and_from_the_hop_before() -> None:
    jobs = {"a": _job(0, 30), "b": _job(10**12, 40), "c": _job(2 * 10**12, 50)}
    rows = {name: (at, step) for name, at, step in hop_table(jobs)}
    assert list(rows) == [CLIENT_SENT, "request", PREFILL_STARTED, FIRST_TOKEN, CLIENT_FIRST_TEXT]
    assert rows["request"] == (2.0, 2.0)
    assert rows[FIRST_TOKEN] == (50.0, 40.0)  # the median job's prefill
    assert rows[CLIENT_FIRST_TEXT] == (54.0, 4.0)
    # Whatever the prefill took, the rest of the way was 14 ms.
    assert outside_prefill_ms(jobs) == [14.0, 14.0, 14.0]


def test_a_job_missing_a_hop_is_left_out_of_the_time_outside_the_prefill() -> None:
    partial = [hop for hop in _job(0, 30) if hop[1] != PREFILL_STARTED]
    assert outside_prefill_ms({"a": partial, "b": _job(10**12, 30)}) == [14.0]


# The path of a streamed completion's first token, in the order each hop causes the next.
PATH = ("request", "submit", "key admitted", "placed", "balance reserved", "committed", "sent to its node",
        "node received", "node started", PREFILL_STARTED, "joined the batch", FIRST_TOKEN, "first chunk sent",
        "first chunk read", "first chunk stored", "first event on the event loop", "first text to the client")


@pytest.mark.parametrize("database", ["sqlite"])
def test_every_process_traces_its_hops_of_a_real_request(tmp_path: Path, tiny_model_dir: Path, database: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.coordinator.gateway.conftest import MODEL_ID, gateway_network

    trace = tmp_path / "hops.trace"
    monkeypatch.setenv(hop_trace.ENVIRONMENT_VARIABLE, str(trace))  # the processes inherit it
    with gateway_network(tmp_path, tiny_model_dir, database, (("studio", "m3-ultra-512", "bob"),)) as net:
        client = net.client(net.new_key("carol"))
        raw = client.completions.with_raw_response.create(model=MODEL_ID, prompt="In the beginning",
                                                          max_tokens=4, temperature=0, stream=True)
        assert "".join(chunk.choices[0].text for chunk in raw.parse() if chunk.choices)
        job_id = raw.headers["x-mlxnet-job-id"]
    hops = hop_trace.read(str(trace))[job_id]
    names = [name for _, name in hops]
    assert names == list(PATH)  # each once, in causal order, on the one clock all three processes share
