"""Accepting a consumer's job: validate every field, then build it for the submit to store once.

A request id chosen by the client makes a retried submit return the job it
already created, so a retry never creates a second job.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts import limits
from contracts.chat import (
    MESSAGES_MAX,
    NO_OPTIONS,
    NO_TOOLS,
    ROLES,
    ChatMessage,
    ChatOptions,
    ChatTools,
    encode_chat_prompt,
    is_chat_prompt,
)
from contracts.ids import JobId, job_id_for_request, new_job_id
from contracts.logprobs import TOP_LOGPROBS_MAX
from contracts.models import (
    CHAT_FEATURE_ENABLE_THINKING,
    CHAT_FEATURE_REASONING_EFFORT,
    CHAT_FEATURE_TOOLS,
    ModelSpec,
)
from contracts.reasoning import starts_inside
from coordinator.config import CoordinatorConfig
from coordinator.errors import InvalidRequest, UnknownModel
from coordinator.model import (
    DELIVERY_STREAM, PROMPT_CHAT, PROMPT_TEXT, JobRecord, JobStatus, retry_runs_again,
)
from coordinator.storage import job_rows

SEED_MAX = (1 << 63) - 1  # stored in a signed 64-bit column
STOP_SEQUENCES_MAX = limits.STOP_SEQUENCES_MAX  # as OpenAI
ATTEMPTS_PER_REQUEST_MAX = 16  # retries of one request id that run again, at most
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
    # How the consumer reads the output: a stream, or a whole answer only when the job ends
    # well (then a failed job delivered nothing, and costs nothing; coordinator.jobs.ending).
    delivery: str = DELIVERY_STREAM
    options: ChatOptions = NO_OPTIONS  # a chat's response format and template options
    # The request field that set a template option, where the route names it otherwise
    # (the Responses API's reasoning.effort): (option, field) pairs, for refusals.
    option_fields: tuple[tuple[str, str], ...] = ()

    @property
    def prompt_text(self) -> str:
        """What the job stores and the receipt digests: the prompt, or the canonical messages."""
        return encode_chat_prompt(self.messages, self.tools, self.options) if self.messages else self.prompt


# Each template option: the chat feature a model needs to take it, and the field that sets it.
_TEMPLATE_OPTIONS = {"enable_thinking": (CHAT_FEATURE_ENABLE_THINKING, "chat_template_kwargs.enable_thinking"),
                     "reasoning_effort": (CHAT_FEATURE_REASONING_EFFORT, "reasoning_effort")}


def _check_options(sub: Submission, spec: ModelSpec) -> None:
    """Template options go only to a template that reads them; a JSON answer cannot follow a
    reasoning block the prompt opened (the grammar would bind the reasoning)."""
    kwargs, fields = sub.options.kwargs(), dict(sub.option_fields)
    for name in kwargs:
        feature, param = _TEMPLATE_OPTIONS.get(name, ("", f"chat_template_kwargs.{name}"))
        param = fields.get(name, param)
        if feature not in spec.chat_features:
            raise InvalidRequest(f"model {spec.model_id!r} cannot take {param}: its chat "
                                 f"template does not read {name}", param=param)
    thinking = kwargs.get("enable_thinking")
    if sub.options.response_format and starts_inside(spec.chat_features, thinking):
        raise InvalidRequest(f"model {spec.model_id!r} thinks before it answers, and a JSON "
                             "response_format cannot follow its reasoning; set "
                             "chat_template_kwargs.enable_thinking to false", param="response_format")


def _check_template(sub: Submission, spec: ModelSpec) -> None:
    """Tools, or messages about calls, go only to a model whose chat template renders them."""
    _check_options(sub, spec)
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


def _attempt_request_id(request_id: str, number: int) -> str:
    """The stored request id of a request's attempt: the id itself first, then a digest of it
    (so any id the consumer may send fits the column)."""
    if number == 1:
        return request_id
    return f"retry{number}:{hashlib.sha256(request_id.encode()).hexdigest()[:40]}"


def _request_attempt(session: Session, consumer_id: str,
                     request_id: str) -> JobRecord | tuple[JobId, str]:
    """A retried request's job to return, or the (job id, stored request id) of its next attempt:
    a retry after a failure that need not repeat runs again (model.retry_runs_again)."""
    latest: JobRecord | None = None
    for number in range(1, ATTEMPTS_PER_REQUEST_MAX + 1):
        stored = _attempt_request_id(request_id, number)
        job = job_rows.job_by_id(session, job_id_for_request(consumer_id, stored))
        if job is None:
            return job_id_for_request(consumer_id, stored), stored
        if not retry_runs_again(job):
            return job
        latest = job
    assert latest is not None
    return latest  # the request has failed its every attempt: its last failure stands


def prepare(session: Session, sub: Submission, config: CoordinatorConfig, now_ms: int,
            catalog: dict[str, ModelSpec]) -> tuple[JobRecord, bool]:
    """The job a submission asks for, as queued; returns (job, new). Nothing is written: the
    caller decides its placement and reservation first, then stores it once (`record`).
    A retried request id returns its job, with new False, unless that job failed for a reason
    a retry need not repeat: then the retry is the request's next attempt, a new job.

    catalog is the fleet's models (coordinator.nodes.catalog), read once by the caller.
    """
    _validate(sub, config)
    job_id, request_id = new_job_id(), None
    if sub.request_id:
        found = _request_attempt(session, sub.consumer_id, sub.request_id)
        if isinstance(found, JobRecord):
            return found, False
        job_id, request_id = found
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
        job_id=job_id, consumer_id=sub.consumer_id, request_id=request_id,
        model_id=sub.model_id, prompt=prompt, max_tokens=max_tokens,
        temperature=sub.temperature, top_p=sub.top_p or 1.0, seed=sub.seed,
        min_decode_tokens_per_s=sub.min_decode_tokens_per_s, context_tokens=context_tokens,
        status=JobStatus.QUEUED, created_at_ms=now_ms, api_key_id=sub.api_key_id,
        prompt_format=PROMPT_CHAT if sub.messages else PROMPT_TEXT, stop=sub.stop,
        top_logprobs=sub.top_logprobs, delivery=sub.delivery)
    return job, True


def record(session: Session, job: JobRecord) -> bool:
    """Store a prepared job, once; False when a retry of its request stored it first."""
    return job_rows.insert_job(session, job, id_is_new=job.request_id is None)
