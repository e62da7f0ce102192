"""A job's prompt text as token ids, and a generated token's log-probabilities.

A chat job's prompt is its messages' canonical text (contracts/chat.py): it goes
through the model's chat template here, so the node that generates and a verifier
that replays turn the same prompt text into the same tokens.
"""

from __future__ import annotations

import mlx.core as mx

from contracts.chat import ChatFormatError, decode_chat_prompt
from contracts.logprobs import TOP_LOGPROBS_MAX, TokenLogprob, TopLogprob
from node_agent.inference.activations import encode_prompt


def encode_job_prompt(tokenizer, prompt: str) -> list[int]:  # type: ignore[no-untyped-def]
    """A job's prompt as token ids; chat prompts through the model's chat template."""
    try:
        messages = decode_chat_prompt(prompt) if prompt.startswith('{"messages":') else None
    except ChatFormatError:
        messages = None
    if messages is None:
        return encode_prompt(tokenizer, prompt)
    rendered = tokenizer.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in messages],
        add_generation_prompt=True, tokenize=False)
    # As Hugging Face tokenizes a rendered template: its special tokens are in the text.
    return list(tokenizer.encode(rendered, add_special_tokens=False))


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
