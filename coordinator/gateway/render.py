"""Pure rendering of OpenAI response bodies and server-sent events from job values."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from contracts.logprobs import TokenLogprob
from contracts.reasoning import ReasoningReader, split_reasoning
from contracts.tool_calls import parse_tool_calls
from coordinator.gateway import tools
from coordinator.gateway.requests import ResponsePlan
from coordinator.jobs.stops import cut_at_stop
from coordinator.model import ERROR_STOP_SEQUENCE, JobRecord, JobStatus, TokenChunk

DONE_EVENT = "data: [DONE]\n\n"


def sse(data: dict) -> str:
    """One server-sent event, exactly as OpenAI's clients parse them."""
    return f"data: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n"


def usage(prompt_tokens: int, completion_tokens: int, cached_prompt_tokens: int = 0) -> dict:
    """OpenAI's usage; cached_tokens: prompt tokens the node reused from its prompt cache."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_prompt_tokens}}


def job_usage(job: JobRecord, streamed_tokens: int, reasoning_tokens: int | None = None) -> dict:
    """Counts from the receipt once completed; before that, what the node reported and streamed.
    A thinking model's answer also counts its reasoning tokens."""
    counts = usage(job.prompt_tokens, job.completion_tokens or streamed_tokens,
                   job.cached_prompt_tokens)
    if reasoning_tokens is not None:
        counts["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return counts


class ReasoningCounter:
    """Splits streamed text into reasoning and answer, counting the reasoning's tokens: those
    of each chunk that began inside the block (the gateway sees chunks, not single tokens)."""

    def __init__(self, inside: bool) -> None:
        self.reader = ReasoningReader(inside)
        self.tokens = 0

    def feed(self, text: str, token_count: int) -> tuple[str, str]:
        was_inside = self.reader.inside
        reasoning, answer = self.reader.feed(text)
        if was_inside or reasoning or self.reader.inside:
            self.tokens += token_count
        return reasoning, answer

    def finish(self) -> tuple[str, str]:
        return self.reader.finish()


def reasoning_delta(text: str) -> dict:
    return {"reasoning_content": text, "reasoning": text}


def ended_well(job: JobRecord) -> bool:
    """Completed, or ended by the gateway at a stop sequence the consumer asked for."""
    return job.status is JobStatus.COMPLETED or job.error_code == ERROR_STOP_SEQUENCE


def finish_reason(job: JobRecord, stopped_by_sequence: bool) -> str:
    if stopped_by_sequence or job.error_code == ERROR_STOP_SEQUENCE:
        return "stop"
    # Fewer tokens than allowed means the model sampled its end-of-sequence token.
    return "stop" if job.completion_tokens < job.max_tokens else "length"


def tool_calls_reason(reason: str) -> str:
    """An answer that called tools ends with "tool_calls", unless it ran out of tokens."""
    return "tool_calls" if reason == "stop" else reason


def response_id(plan: ResponsePlan, job_id: str) -> str:
    return f"{'chatcmpl' if plan.kind == 'chat' else 'cmpl'}-{job_id}"


def _token_bytes(text: str) -> list[int]:
    return list(text.encode())


def chat_logprobs(entries: Iterable[TokenLogprob]) -> dict:
    return {"content": [
        {"token": entry.text, "logprob": entry.logprob, "bytes": _token_bytes(entry.text),
         "top_logprobs": [{"token": top.text, "logprob": top.logprob,
                           "bytes": _token_bytes(top.text)} for top in entry.top]}
        for entry in entries], "refusal": None}


def completion_logprobs(entries: Iterable[TokenLogprob], first_offset: int = 0) -> dict:
    tokens, token_logprobs, tops, offsets = [], [], [], []
    offset = first_offset
    for entry in entries:
        tokens.append(entry.text)
        token_logprobs.append(entry.logprob)
        tops.append({top.text: top.logprob for top in entry.top})
        offsets.append(offset)
        offset += len(entry.text)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": tops,
            "text_offset": offsets}


def logprobs_before(chunks: list[TokenChunk], chars: int) -> list[TokenLogprob]:
    """The logprobs of tokens that begin before `chars` characters of output."""
    kept, offset = [], 0
    for entry in (e for chunk in chunks for e in chunk.logprobs):
        if offset >= chars:
            break
        kept.append(entry)
        offset += len(entry.text)
    return kept


@dataclass(frozen=True)
class StreamRenderer:
    """Renders one job's events as OpenAI chunks (chat.completion.chunk or text_completion)."""

    plan: ResponsePlan
    job_id: str
    created_s: int

    def _chunk(self, choice: dict, with_usage: bool = False) -> str:
        body = {"id": response_id(self.plan, self.job_id), "created": self.created_s,
                "model": self.plan.model, "system_fingerprint": None,
                "object": "chat.completion.chunk" if self.plan.kind == "chat" else "text_completion",
                "choices": [{"index": 0, **choice}]}
        if self.plan.include_usage and with_usage:
            body["usage"] = None  # OpenAI sends usage null on every chunk but the last
        return sse(body)

    def role_chunk(self) -> str:
        assert self.plan.kind == "chat"
        return self._chunk({"delta": {"role": "assistant", "content": ""}, "logprobs": None,
                            "finish_reason": None}, with_usage=True)

    def content_chunk(self, text: str, logprobs: tuple[TokenLogprob, ...], offset: int) -> str:
        if self.plan.kind == "chat":
            rendered = chat_logprobs(logprobs) if self.plan.logprobs else None
            choice = {"delta": {"content": text}, "logprobs": rendered, "finish_reason": None}
        else:
            rendered = completion_logprobs(logprobs, offset) if self.plan.logprobs else None
            choice = {"text": text, "logprobs": rendered, "finish_reason": None}
        return self._chunk(choice, with_usage=True)

    def delta_chunk(self, delta: dict) -> str:
        """A chat delta of its own (a tool call's part)."""
        return self._chunk({"delta": delta, "logprobs": None, "finish_reason": None},
                           with_usage=True)

    def finish_chunk(self, reason: str) -> str:
        if self.plan.kind == "chat":
            choice = {"delta": {}, "logprobs": None, "finish_reason": reason}
        else:
            choice = {"text": "", "logprobs": None, "finish_reason": reason}
        return self._chunk(choice, with_usage=True)

    def usage_chunk(self, counts: dict) -> str:
        return sse({"id": response_id(self.plan, self.job_id), "created": self.created_s,
                    "model": self.plan.model, "system_fingerprint": None,
                    "object": "chat.completion.chunk" if self.plan.kind == "chat" else "text_completion",
                    "choices": [], "usage": counts})


def final_body(plan: ResponsePlan, job: JobRecord, chunks: list[TokenChunk]) -> dict:
    """The whole (non-streamed) response of a completed job."""
    full_text = "".join(chunk.text for chunk in chunks)
    text, stopped = cut_at_stop(full_text, plan.stop)
    entries = logprobs_before(chunks, len(text)) if plan.logprobs else []
    streamed = sum(len(chunk.token_ids) for chunk in chunks)
    reason = finish_reason(job, stopped)
    reasoning, reasoning_tokens = "", None
    if plan.reasoning:
        counter = ReasoningCounter(plan.reasoning_inside)
        for chunk in chunks:
            counter.feed(chunk.text, len(chunk.token_ids))
        reasoning, text = split_reasoning(text, plan.reasoning_inside)
        reasoning_tokens = counter.tokens
    common = {"id": response_id(plan, job.job_id), "created": job.created_at_ms // 1000,
              "model": plan.model, "usage": job_usage(job, streamed, reasoning_tokens),
              "system_fingerprint": None}
    if plan.kind == "chat":
        message: dict = {"role": "assistant", "content": text, "refusal": None}
        if reasoning:
            message.update(reasoning_content=reasoning, reasoning=reasoning)
        if plan.tool_calls and (parsed := parse_tool_calls(text)).calls:
            message["content"] = parsed.content.strip() or None
            message["tool_calls"] = [tools.call_json(job.job_id, index, call)
                                     for index, call in enumerate(parsed.calls)]
            reason = tool_calls_reason(reason)
        choice = {"index": 0, "message": message,
                  "logprobs": chat_logprobs(entries) if plan.logprobs else None,
                  "finish_reason": reason}
        return {**common, "object": "chat.completion", "choices": [choice]}
    choice = {"index": 0, "text": text, "finish_reason": reason,
              "logprobs": completion_logprobs(entries) if plan.logprobs else None}
    return {**common, "object": "text_completion", "choices": [choice]}
