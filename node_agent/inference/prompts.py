"""A job's prompt text as token ids, and a generated token's log-probabilities.

A chat job's prompt is its messages' canonical text (contracts/chat.py): it goes
through the model's chat template here, so the node that generates and a verifier
that replays turn the same prompt text into the same tokens. Tools, the assistant's
tool calls and the tool results go through the template too, and so do the template's
keyword arguments (enable_thinking, reasoning_effort). A required or named tool choice,
or a JSON response format, gives the job a grammar to decode under (`job_constraint`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

import mlx.core as mx
import numpy as np

from contracts.chat import (
    NO_OPTIONS, NO_TOOLS, ChatFormatError, ChatMessage, ChatOptions, ChatTools, decode_chat_all,
)
from contracts.logprobs import TOP_LOGPROBS_MAX, TokenLogprob, TopLogprob
from contracts.structured_output import answer_rule, schema_problem
from contracts.tool_calls import job_grammar
from node_agent import chat_templates
from node_agent.inference.activations import encode_prompt
from node_agent.inference.constraints import GrammarError, TokenConstraint

T = TypeVar("T")


class PromptRefused(ValueError):
    """The model cannot take this prompt: its template has no tools, or the grammar fails."""


def _chat(prompt: str) -> tuple[tuple[ChatMessage, ...], ChatTools, ChatOptions] | None:
    try:
        return decode_chat_all(prompt) if prompt.startswith('{"messages":') else None
    except ChatFormatError:
        return None


def _arguments(text: str) -> object:
    """A call's arguments as templates expect them: an object where the text is one."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text
    return value if isinstance(value, dict) else text


def _template_message(message: ChatMessage) -> dict:
    body: dict = {"role": message.role, "content": message.content}
    if message.tool_calls:
        body["tool_calls"] = [{"id": c.id, "type": "function", "function": {
            "name": c.name, "arguments": _arguments(c.arguments)}} for c in message.tool_calls]
    if message.tool_call_id:
        body["tool_call_id"] = message.tool_call_id
    return body


def _template(tokenizer) -> str:  # type: ignore[no-untyped-def]
    return getattr(tokenizer, "chat_template", None) or ""


def encode_job_prompt(tokenizer, prompt: str) -> list[int]:  # type: ignore[no-untyped-def]
    """A job's prompt as token ids; chat prompts through the model's chat template."""
    chat = _chat(prompt)
    if chat is None:
        return encode_prompt(tokenizer, prompt)
    messages, tools, options = chat
    offered = tools.definitions if tools.choice != "none" else ()
    uses_tools = bool(offered) or any(m.tool_calls or m.tool_call_id for m in messages)
    template = _template(tokenizer)
    if uses_tools and not chat_templates.renders_tools(template):
        raise PromptRefused("this model's chat template does not render tools")
    kwargs = options.kwargs()
    unread = [name for name in kwargs if not chat_templates.reads_variable(template, name)]
    if unread:
        raise PromptRefused(f"this model's chat template does not read {', '.join(unread)}")
    rendered = tokenizer.apply_chat_template(
        [_template_message(m) for m in messages],
        tools=[json.loads(d) for d in offered] or None,
        add_generation_prompt=True, tokenize=False, **kwargs)
    # As Hugging Face tokenizes a rendered template: its special tokens are in the text.
    return list(tokenizer.encode(rendered, add_special_tokens=False))


def job_constraint(tokenizer, prompt: str) -> TokenConstraint | None:  # type: ignore[no-untyped-def]
    """The grammar a job decodes under (forced calls, or a JSON answer), or None."""
    chat = _chat(prompt)
    tools, options = (chat[1], chat[2]) if chat is not None else (NO_TOOLS, NO_OPTIONS)
    response_format = options.format()
    try:
        if response_format is not None and response_format.get("type") == "json_schema":
            problem = schema_problem(response_format.get("schema"))
            if problem:
                raise ValueError(problem)
        answer = answer_rule(response_format) if response_format is not None else None
        grammar = job_grammar(tools, chat_templates.tool_call_style(_template(tokenizer)), answer)
    except (ValueError, KeyError) as error:
        raise PromptRefused(str(error)) from error
    if grammar is None:
        return None
    try:
        return TokenConstraint(tokenizer, grammar)
    except GrammarError as error:
        raise PromptRefused(str(error)) from error


def constrained_check(constraint: TokenConstraint | None, output_ids: tuple[int, ...],
                      check_step: Callable[[int, np.ndarray], T]) -> Callable[[int, np.ndarray], T]:
    """The verifier's step check under the job's constraint, as the node decoded under it."""
    if constraint is None:
        return check_step

    def checked(step: int, logits: np.ndarray) -> T:
        masked = constraint.mask_logits(logits)
        if step < len(output_ids):
            constraint.advance(output_ids[step])
        return check_step(step, masked)
    return checked


def token_logprob(tokenizer, logits: mx.array, token_id: int, top: int) -> TokenLogprob:  # type: ignore[no-untyped-def]
    """The chosen token's log-probability and the `top` likeliest tokens' (text filled in later)."""
    assert 0 <= top <= TOP_LOGPROBS_MAX
    row = logits.reshape(-1).astype(mx.float32)
    logprobs = row - mx.logsumexp(row)
    alternatives: tuple[TopLogprob, ...] = ()
    if top:
        picked = mx.argpartition(-logprobs, kth=top - 1)[:top]
        values = mx.take(logprobs, picked)
        pairs = sorted(zip(picked.tolist(), values.tolist()), key=lambda p: (-p[1], p[0]))
        alternatives = tuple(TopLogprob(int(i), tokenizer.decode([int(i)]), float(v))
                             for i, v in pairs)
    return TokenLogprob(float(logprobs[token_id].item()), alternatives)
