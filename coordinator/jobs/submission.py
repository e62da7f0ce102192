"""Accepting a consumer's job: validate every field, then build it for the submit to store once.

A request id chosen by the client makes a retried submit return the job it
already created, so a retry never creates a second job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts import limits
from contracts.chat import (
    MESSAGES_MAX,
    NO_TOOLS,
    ROLES,
    ChatMessage,
    ChatTools,
    encode_chat_prompt,
    is_chat_prompt,
)
from contracts.ids import JobId, job_id_for_request, new_job_id
from contracts.logprobs import TOP_LOGPROBS_MAX
from contracts.models import CHAT_FEATURE_TOOLS, ModelSpec
from coordinator.config import CoordinatorConfig
from coordinator.errors import InvalidRequest, UnknownModel
from coordinator.model import PROMPT_CHAT, PROMPT_TEXT, JobRecord, JobStatus
from coordinator.storage import job_rows

SEED_MAX = (1 << 63) - 1  # stored in a signed 64-bit column
STOP_SEQUENCES_MAX = limits.STOP_SEQUENCES_MAX  # as OpenAI
STOP_CHARS_MAX = limits.STOP_CHARS_MAX


@dataclass(frozen=True)
class Submission:
    consumer_id: str
    model_id: str
    prompt: str
    max_tokens: int  # 0 means the configured default
    temperature: float
    top_p: float  # 0 means 1.0
    seed: int
    request_id: str
    min_decode_tokens_per_s: float
    # Chat jobs send messages instead of a prompt; the node applies the model's template.
    messages: tuple[ChatMessage, ...] = ()
    stop: tuple[str, ...] = ()
    top_logprobs: int = -1  # -1: no logprobs; 0: the chosen token's; k: and the top k
    api_key_id: str | None = None
    tools: ChatTools = NO_TOOLS  # a chat's tools, rendered by the model's template

    @property
    def prompt_text(self) -> str:
        """What the job stores and the receipt digests: the prompt, or the canonical messages."""
        return encode_chat_prompt(self.messages, self.tools) if self.messages else self.prompt


def _check_template(sub: Submission, spec: ModelSpec) -> None:
    """Tools, or messages about calls, go only to a model whose chat template renders them."""
    if CHAT_FEATURE_TOOLS in spec.chat_features:
        return
    if sub.tools.definitions and sub.tools.choice != "none":
        raise InvalidRequest(f"model {spec.model_id!r} cannot take tools: its chat template does "
                             "not render them", param="tools")
    if any(m.tool_calls or m.tool_call_id for m in sub.messages):
        raise InvalidRequest(f"model {spec.model_id!r} cannot take tool calls or results: its "
                             "chat template does not render them", param="messages")


def _validate_messages(messages: tuple[ChatMessage, ...]) -> None:
    if len(messages) > MESSAGES_MAX:
        raise InvalidRequest(f"messages holds {len(messages)} messages; the limit is {MESSAGES_MAX}",
                             param="messages")
    for index, message in enumerate(messages):
        if message.role not in ROLES:
            raise InvalidRequest(f"messages[{index}].role must be one of {', '.join(ROLES)}",
                                 param=f"messages[{index}].role")


# Unicode's White_Space, as the API schema's prompt pattern spells it out. str.isspace()
# also counts the separators U+001C..U+001F, which the schema accepts as text.
_WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
                         + "".join(map(chr, range(0x2000, 0x200B))))


def is_blank(text: str) -> bool:
    """Only white space (or nothing): no text to complete."""
    return all(character in _WHITE_SPACE for character in text)


def _validate_prompt(sub: Submission, config: CoordinatorConfig) -> None:
    if sub.messages and sub.prompt:
        raise InvalidRequest("send either prompt or messages, not both", param="prompt")
    if sub.messages:
        _validate_messages(sub.messages)
    elif is_blank(sub.prompt):
        raise InvalidRequest("prompt is empty: send the text to complete", param="prompt")
    elif is_chat_prompt(sub.prompt):
        raise InvalidRequest("this prompt text is the canonical form of chat messages; send "
                             "them as messages instead", param="prompt")
    text = sub.prompt_text
    if not limits.is_valid_text(text):  # a lone surrogate: no store or tokenizer could take it
        raise InvalidRequest("the prompt is not valid Unicode text (it holds a lone surrogate)",
                             param="messages" if sub.messages else "prompt")
    if len(text) > config.prompt_chars_max:
        raise InvalidRequest(f"prompt is {len(text)} characters; the limit is "
                             f"{config.prompt_chars_max}",
                             param="messages" if sub.messages else "prompt")


def _validate_output_options(sub: Submission) -> None:
    if len(sub.stop) > STOP_SEQUENCES_MAX:
        raise InvalidRequest(f"stop holds {len(sub.stop)} sequences; the limit is "
                             f"{STOP_SEQUENCES_MAX}", param="stop")
    if any(not s or len(s) > STOP_CHARS_MAX for s in sub.stop):
        raise InvalidRequest(f"each stop sequence must be 1 to {STOP_CHARS_MAX} characters",
                             param="stop")
    if not -1 <= sub.top_logprobs <= TOP_LOGPROBS_MAX:
        raise InvalidRequest(f"top_logprobs must be between 0 and {TOP_LOGPROBS_MAX}",
                             param="top_logprobs")


def _validate(sub: Submission, config: CoordinatorConfig) -> None:
    if not sub.model_id:
        raise InvalidRequest("model is required: name a model id or a path a node serves",
                             param="model")
    _validate_prompt(sub, config)
    if sub.max_tokens < 0 or sub.max_tokens > config.max_tokens_max:
        raise InvalidRequest(f"max_tokens must be between 1 and {config.max_tokens_max} "
                             f"(0 means {config.max_tokens_default}); got {sub.max_tokens}",
                             param="max_tokens")
    if not (math.isfinite(sub.temperature) and 0.0 <= sub.temperature <= 2.0):
        raise InvalidRequest("temperature must be between 0 (greedy) and 2", param="temperature")
    if not (math.isfinite(sub.top_p) and 0.0 <= sub.top_p <= 1.0):
        raise InvalidRequest("top_p must be between 0 and 1 (0 means 1)", param="top_p")
    if not 0 <= sub.seed <= SEED_MAX:
        raise InvalidRequest(f"seed must be between 0 and {SEED_MAX}", param="seed")
    if len(sub.request_id) > config.request_id_chars_max:
        raise InvalidRequest(f"request_id is longer than {config.request_id_chars_max} characters",
                             param="request_id")
    if not (math.isfinite(sub.min_decode_tokens_per_s) and sub.min_decode_tokens_per_s >= 0):
        raise InvalidRequest("min_decode_tokens_per_s must be zero or positive",
                             param="min_decode_tokens_per_s")
    _validate_output_options(sub)


def prepare(session: Session, sub: Submission, config: CoordinatorConfig, now_ms: int,
            catalog: dict[str, ModelSpec]) -> tuple[JobRecord, bool]:
    """The job a submission asks for, as queued; returns (job, new). Nothing is written: the
    caller decides its placement and reservation first, then stores it once (`record`).
    A retried request id returns the first job, with new False.

    catalog is the fleet's models (coordinator.nodes.catalog), read once by the caller.
    """
    _validate(sub, config)
    job_id: JobId = (job_id_for_request(sub.consumer_id, sub.request_id)
                     if sub.request_id else new_job_id())
    if sub.request_id and (existing := job_rows.job_by_id(session, job_id)) is not None:
        return existing, False
    spec = catalog.get(sub.model_id)
    if spec is None:
        known = ", ".join(sorted(catalog)) or "none yet"
        raise UnknownModel(f"model {sub.model_id!r} is not served by any node; served models: {known}")
    _check_template(sub, spec)
    max_tokens = sub.max_tokens or config.max_tokens_default
    if max_tokens >= spec.max_context_tokens:
        raise InvalidRequest(f"max_tokens {max_tokens} leaves no room for the prompt in "
                             f"{sub.model_id}'s context of {spec.max_context_tokens} tokens",
                             param="max_tokens")
    prompt = sub.prompt_text
    # UTF-8 bytes bound the token count of any byte-level tokenizer from above.
    context_tokens = min(spec.max_context_tokens, len(prompt.encode()) + max_tokens)
    job = JobRecord(
        job_id=job_id, consumer_id=sub.consumer_id, request_id=sub.request_id or None,
        model_id=sub.model_id, prompt=prompt, max_tokens=max_tokens,
        temperature=sub.temperature, top_p=sub.top_p or 1.0, seed=sub.seed,
        min_decode_tokens_per_s=sub.min_decode_tokens_per_s, context_tokens=context_tokens,
        status=JobStatus.QUEUED, created_at_ms=now_ms, api_key_id=sub.api_key_id,
        prompt_format=PROMPT_CHAT if sub.messages else PROMPT_TEXT, stop=sub.stop,
        top_logprobs=sub.top_logprobs)
    return job, True


def record(session: Session, job: JobRecord) -> bool:
    """Store a prepared job, once; False when a retry of its request stored it first."""
    return job_rows.insert_job(session, job, id_is_new=job.request_id is None)
