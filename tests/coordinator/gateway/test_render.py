"""Response bodies and server-sent events in exactly OpenAI's shapes."""

from __future__ import annotations

import json

from contracts.ids import JobId
from contracts.logprobs import TokenLogprob, TopLogprob
from coordinator.gateway.render import (
    DONE_EVENT,
    StreamRenderer,
    completion_logprobs,
    final_body,
    finish_reason,
    logprobs_before,
    sse,
)
from coordinator.gateway.requests import ResponsePlan
from coordinator.model import ERROR_STOP_SEQUENCE, JobRecord, JobStatus, TokenChunk

CHAT = ResponsePlan("chat", "m", stream=True, include_usage=True, logprobs=False, top_logprobs=0,
                    stop=())
TEXT = ResponsePlan("text", "m", stream=False, include_usage=False, logprobs=True, top_logprobs=1,
                    stop=(" his",))


def _job(**changes: object) -> JobRecord:
    fields = dict(job_id=JobId("job-1"), consumer_id="c", request_id=None, model_id="m",
                  prompt="p", max_tokens=4, temperature=0.0, top_p=1.0, seed=0,
                  min_decode_tokens_per_s=0.0, context_tokens=10, status=JobStatus.COMPLETED,
                  created_at_ms=2_000, prompt_tokens=3, completion_tokens=4)
    fields.update(changes)
    return JobRecord(**fields)  # type: ignore[arg-type]


def _events(text: str) -> list[dict]:
    assert text.endswith("\n\n")
    return [json.loads(line[len("data: "):]) for line in text.split("\n\n") if line]


def test_events_are_data_lines_and_the_stream_ends_with_done() -> None:
    assert sse({"a": "é"}) == 'data: {"a":"é"}\n\n'
    assert DONE_EVENT == "data: [DONE]\n\n"


def test_chat_chunks_start_with_the_role_and_carry_usage_last() -> None:
    renderer = StreamRenderer(CHAT, "job-1", 7)
    role, content = _events(renderer.role_chunk())[0], _events(renderer.content_chunk("Hi", (), 0))[0]
    finish = _events(renderer.finish_chunk("stop"))[0]
    usage = _events(renderer.usage_chunk({"prompt_tokens": 3, "completion_tokens": 1,
                                          "total_tokens": 4}))[0]
    assert role["object"] == "chat.completion.chunk" and role["id"] == "chatcmpl-job-1"
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert content["choices"][0]["delta"] == {"content": "Hi"} and content["usage"] is None
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 4


def test_finish_reason_tells_length_from_stop() -> None:
    assert finish_reason(_job(), False) == "length"
    assert finish_reason(_job(completion_tokens=2), False) == "stop"  # end-of-sequence token
    assert finish_reason(_job(), True) == "stop"
    assert finish_reason(_job(status=JobStatus.FAILED, error_code=ERROR_STOP_SEQUENCE), False) == "stop"


def test_a_whole_completion_is_cut_at_its_stop_with_logprobs_up_to_it() -> None:
    entries = [TokenLogprob(-0.5, (TopLogprob(1, "x", -0.5),), text)
               for text in ("against", " Abel", " his", " brother")]
    chunks = [TokenChunk(0, (1, 2), "against Abel", tuple(entries[:2])),
              TokenChunk(2, (3, 4), " his brother", tuple(entries[2:]))]
    body = final_body(TEXT, _job(), chunks)
    choice = body["choices"][0]
    assert choice["text"] == "against Abel" and choice["finish_reason"] == "stop"
    assert choice["logprobs"]["tokens"] == ["against", " Abel"]
    assert choice["logprobs"]["text_offset"] == [0, 7]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7,
                             "prompt_tokens_details": {"cached_tokens": 0}}
    cached = final_body(TEXT, _job(cached_prompt_tokens=2), chunks)  # the node reused 2 of its prompt tokens
    assert cached["usage"]["prompt_tokens_details"] == {"cached_tokens": 2}
    assert body["object"] == "text_completion" and body["id"] == "cmpl-job-1" and body["created"] == 2


def test_completion_logprobs_map_top_tokens_to_their_logprobs() -> None:
    rendered = completion_logprobs([TokenLogprob(-1.0, (TopLogprob(5, "a", -1.0),
                                                        TopLogprob(6, "b", -2.0)), "a")], 10)
    assert rendered == {"tokens": ["a"], "token_logprobs": [-1.0],
                        "top_logprobs": [{"a": -1.0, "b": -2.0}], "text_offset": [10]}
    assert logprobs_before([TokenChunk(0, (5,), "a", (TokenLogprob(-1.0, (), "a"),))], 0) == []
