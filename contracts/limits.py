"""The limits on everything a client sends, in one place, and the checks that name field and limit.

Every gRPC request field is checked against FIELD_LIMITS (coordinator/rpc/guard.py walks each
message); the HTTP routes use the same constants. A field with no entry gets its type's
default: text and bytes at most DEFAULT_TEXT_CHARS_MAX, lists at most DEFAULT_ITEMS_MAX
items, floats finite. A refusal names the field and the limit, never echoes the input.

Shared by the coordinator's edges and the node agent; it imports neither.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

KIB = 1 << 10
MIB = 1 << 20
BYTES_MAX = 1 << 50  # a petabyte: more memory or weights than any Mac or model has
MS_MAX = 1 << 53  # a millisecond timestamp far past any real clock, exact in a float
TOKENS_MAX = 1 << 24  # a context or a token index no model reaches

MODEL_ID_CHARS_MAX = 512
JOB_ID_CHARS_MAX = 128
NODE_ID_CHARS_MAX = 64
NAME_CHARS_MAX = 128  # chips, display names, operators, versions
REASON_CHARS_MAX = 1_024  # free-text reasons a node gives (kept to 256 when stored)
PROMPT_CHARS_CEILING = 1 * MIB  # the edge's ceiling; the configured prompt_chars_max is lower
TOKEN_TEXT_CHARS_MAX = 256 * KIB  # one streamed chunk's text
STOP_SEQUENCES_MAX = 4  # as OpenAI
STOP_CHARS_MAX = 256
REQUEST_ID_CHARS_MAX = 1_024  # the edge's ceiling; the configured request_id_chars_max is lower
BANDWIDTH_GB_S_MAX = 10_000.0  # M3 Ultra is 819 GB/s; ten times the fastest chip there is
BANDWIDTH_GB_S_MIN = 0.01  # 10 MB/s; below it a figure is noise (and 5e-324 breaks logarithms)
TOKENS_PER_S_MIN = 0.001
TOKENS_PER_S_MAX = 10_000_000.0
THUNDERBOLT_LINKS_MAX = 32  # a Mac has at most 6 Thunderbolt ports
MODELS_PER_NODE_MAX = 256
GPU_CORES_MAX = 1_024
CONCURRENT_JOBS_MAX = 256
RECEIPT_BYTES_MAX = 2 * MIB
# A peer's signed check result: 192 (index, value) pairs per 32 tokens plus 18 bytes a token,
# about 115 bytes a token, so this holds a 32k-token job's answer (and gRPC's 4 MiB message limit).
CHECK_RESULT_BYTES_MAX = 4 * MIB
TOKENS_PER_CHUNK_MAX = 65_536
CHUNKS_PER_NODE_MESSAGE_MAX = 1_024  # one StreamNodeTokens message: a chunk per running job
HTTP_BODY_BYTES_MAX = 4 * MIB  # as gRPC's message limit; a 1 MiB prompt fits with JSON escapes
HTTP_HEADER_BYTES_MAX = 16 * KIB  # the request line and headers together
HTTP_HEADER_READ_S = 10.0  # a connection's request head must arrive within this
HTTP_BODY_READ_S = 30.0  # and its body within this
PAGE_DIGITS_MAX = 18  # a page or epoch number; int() of more is pointless work

DEFAULT_TEXT_CHARS_MAX = 1_024
DEFAULT_BYTES_MAX = 4 * KIB
DEFAULT_ITEMS_MAX = 256
LOGGED_CHARS_MAX = 200  # a client's value, when it must appear in a log line or an error
ERROR_CHARS_MAX = 1_024  # an error message sent back to a client
LOG_LINE_CHARS_MAX = 4_096  # one log line's message


@dataclass(frozen=True)
class Limit:
    """The bounds of one field: a number's range, a text's or list's length."""

    low: float | None = None  # numbers: inclusive range; None is unbounded on that side
    high: float | None = None
    chars_max: int | None = None  # text (characters) or bytes (bytes)
    items_max: int | None = None  # repeated fields: how many
    multiline: bool = False  # text that may hold newlines and tabs (prompts, outputs)
    zero_or_low: bool = False  # 0 (unset, unknown) is allowed below low

    def describe_range(self) -> str:
        if self.zero_or_low:
            return f"0 or from {_number(self.low or 0)} to {_number(self.high or 0)}"
        if self.low is not None and self.high is not None:
            return f"from {_number(self.low)} to {_number(self.high)}"
        if self.low is not None:
            return f"at least {_number(self.low)}"
        if self.high is not None:
            return f"at most {_number(self.high)}"
        return "finite"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _text(chars_max: int, multiline: bool = False) -> Limit:
    return Limit(chars_max=chars_max, multiline=multiline)


def _range(low: float | None, high: float | None) -> Limit:
    return Limit(low=low, high=high)


def _zero_or(low: float, high: float) -> Limit:
    return Limit(low=low, high=high, zero_or_low=True)


def _items(items_max: int, chars_max: int | None = None) -> Limit:
    return Limit(items_max=items_max, chars_max=chars_max)


CHALLENGE_TOKENS_MAX = 4_096  # a challenge benchmark's decode, at most (coordinator/nodes/spot_benchmarks.py)

# "Message.field" in package mlxnet.v1 -> its limit. Fields without an entry get the defaults.
FIELD_LIMITS: dict[str, Limit] = {
    # common.proto
    "ModelSpec.model_id": _text(MODEL_ID_CHARS_MAX),
    "ModelSpec.weights_bytes": _range(0, BYTES_MAX),
    "ModelSpec.parameter_count": _range(0, BYTES_MAX),
    "ModelSpec.num_layers": _range(0, 4_096),
    "ModelSpec.num_attention_heads": _range(0, 16_384),
    "ModelSpec.num_kv_heads": _range(0, 16_384),
    "ModelSpec.head_dim": _range(0, 65_536),
    "ModelSpec.max_context_tokens": _range(0, TOKENS_MAX),
    "ModelSpec.kv_bytes_per_element": _range(0, 16),
    "ModelSpec.weights_digest": _text(128),
    "SamplingParams.max_tokens": _range(0, TOKENS_MAX),
    "SamplingParams.temperature": _range(0.0, 2.0),
    "SamplingParams.top_p": _range(0.0, 1.0),
    "ChatMessage.role": _text(32),
    "ChatMessage.content": _text(PROMPT_CHARS_CEILING, multiline=True),
    "ChatMessage.tool_calls": _items(128),
    "ChatMessage.tool_call_id": _text(128),
    "ChatToolCall.id": _text(128),
    "ChatToolCall.name": _text(64),
    "ChatToolCall.arguments_json": _text(PROMPT_CHARS_CEILING, multiline=True),
    "TopLogprob.text": _text(DEFAULT_TEXT_CHARS_MAX, multiline=True),
    "TopLogprob.logprob": _range(-1e9, 1.0),
    "TokenLogprob.logprob": _range(-1e9, 1.0),
    "TokenLogprob.top": _items(20),
    "TokenLogprob.text": _text(DEFAULT_TEXT_CHARS_MAX, multiline=True),
    "SignedReceipt.body": _text(RECEIPT_BYTES_MAX),
    "SignedReceipt.signature": _text(128),
    # job.proto
    "SubmitJobRequest.model": _text(MODEL_ID_CHARS_MAX),
    "SubmitJobRequest.prompt": _text(PROMPT_CHARS_CEILING, multiline=True),
    "SubmitJobRequest.request_id": _text(REQUEST_ID_CHARS_MAX),
    "SubmitJobRequest.min_decode_tokens_per_s": _range(0.0, TOKENS_PER_S_MAX),
    "SubmitJobRequest.messages": _items(256),
    "SubmitJobRequest.stop": Limit(items_max=STOP_SEQUENCES_MAX, chars_max=STOP_CHARS_MAX,
                                   multiline=True),
    "SubmitJobRequest.top_logprobs": _range(0, 20),
    "SubmitJobRequest.tools": _items(128),  # contracts.chat.TOOLS_MAX
    "SubmitJobRequest.tool_choice": _text(16),
    "SubmitJobRequest.tool_choice_function": _text(64),
    "SubmitJobRequest.response_format_json": _text(PROMPT_CHARS_CEILING, multiline=True),
    "SubmitJobRequest.chat_template_kwargs_json": _text(DEFAULT_TEXT_CHARS_MAX, multiline=True),
    "FunctionTool.name": _text(64),
    "FunctionTool.description": _text(PROMPT_CHARS_CEILING, multiline=True),
    "FunctionTool.parameters_json": _text(PROMPT_CHARS_CEILING, multiline=True),
    "GetJobRequest.job_id": _text(JOB_ID_CHARS_MAX),
    "StreamJobRequest.job_id": _text(JOB_ID_CHARS_MAX),
    "CancelJobRequest.job_id": _text(JOB_ID_CHARS_MAX),
    "ExplainPlacementRequest.model": _text(MODEL_ID_CHARS_MAX),
    "ExplainPlacementRequest.context_tokens": _range(0, TOKENS_MAX),
    "ExplainPlacementRequest.min_decode_tokens_per_s": _range(0.0, TOKENS_PER_S_MAX),
    # node.proto
    "ThunderboltLink.port": _text(64),
    "ThunderboltLink.speed_gbps": _range(0, 1_000),
    "ThunderboltLink.thunderbolt_version": _range(0, 16),
    "ThunderboltLink.peer_model_identifier": _text(64),
    "ThunderboltLink.peer_name": _text(NAME_CHARS_MAX),
    "ThunderboltLink.peer_uid": _text(128),
    "ThunderboltLink.local_domain_uuid": _text(128),
    "Hardware.chip": _text(NAME_CHARS_MAX),
    "Hardware.chip_family": _text(32),
    "Hardware.chip_tier": _text(32),
    "Hardware.memory_bytes": _range(0, BYTES_MAX),
    "Hardware.gpu_working_set_bytes": _range(0, BYTES_MAX),
    "Hardware.gpu_cores": _range(0, GPU_CORES_MAX),
    "Hardware.memory_bandwidth_gb_s": _zero_or(BANDWIDTH_GB_S_MIN, BANDWIDTH_GB_S_MAX),
    "Hardware.os_name": _text(NAME_CHARS_MAX),
    "Hardware.model_identifier": _text(64),
    "Hardware.thunderbolt_links": _items(THUNDERBOLT_LINKS_MAX),
    "LendingState.mode": _text(32),
    "LendingState.reason": _text(REASON_CHARS_MAX),
    "LendingState.memory_cap_bytes": _range(0, BYTES_MAX),
    "Benchmark.memory_bandwidth_gb_s": _range(BANDWIDTH_GB_S_MIN, BANDWIDTH_GB_S_MAX),
    "Benchmark.decode_tokens_per_s": _range(TOKENS_PER_S_MIN, TOKENS_PER_S_MAX),
    "Benchmark.prefill_tokens_per_s": _range(TOKENS_PER_S_MIN, TOKENS_PER_S_MAX),
    "Benchmark.reference_model": _text(256),
    "Benchmark.reference_weights_bytes": _range(0, BYTES_MAX),
    "Benchmark.measured_at_ms": _range(0, MS_MAX),
    "Benchmark.run_time_ms": _range(0, MS_MAX),
    "Benchmark.batch_decode": _items(16),
    "BatchDecode.batch_size": _range(1, CONCURRENT_JOBS_MAX),
    "BatchDecode.tokens_per_s": _range(TOKENS_PER_S_MIN, TOKENS_PER_S_MAX),
    "PodLink.a": _text(NODE_ID_CHARS_MAX),
    "PodLink.b": _text(NODE_ID_CHARS_MAX),
    "PodLink.kind": _text(32),
    "PodLink.cables": _range(0, 16),
    "PodDeclaration.pod_id": _text(128),
    "PodDeclaration.member_node_ids": _items(16, NODE_ID_CHARS_MAX),
    "PodDeclaration.links": _items(256),
    "RegisterRequest.public_key": _text(64),
    "RegisterRequest.signature": _text(128),
    "RegisterRequest.timestamp_ms": _range(0, MS_MAX),
    "BindSessionRequest.nonce": _text(64),
    "BindSessionRequest.signature": _text(128),
    "RegisterRequest.models": _items(MODELS_PER_NODE_MAX),
    "RegisterRequest.operator_id": _text(NAME_CHARS_MAX),
    "RegisterRequest.display_name": _text(NAME_CHARS_MAX),
    "RegisterRequest.max_concurrent_jobs": _range(0, CONCURRENT_JOBS_MAX),
    "RegisterRequest.agent_version": _text(64),
    "RegisterRequest.warm_models": _items(MODELS_PER_NODE_MAX, MODEL_ID_CHARS_MAX),
    "HeartbeatRequest.running_jobs": _range(0, CONCURRENT_JOBS_MAX),
    "HeartbeatRequest.sent_at_ms": _range(0, MS_MAX),
    "HeartbeatRequest.warm_models": _items(MODELS_PER_NODE_MAX, MODEL_ID_CHARS_MAX),
    "HeartbeatRequest.signature": _text(128),
    "StreamTokensRequest.job_id": _text(JOB_ID_CHARS_MAX),
    "StreamTokensRequest.first_index": _range(0, TOKENS_MAX),
    "StreamTokensRequest.token_ids": _items(TOKENS_PER_CHUNK_MAX),
    "StreamTokensRequest.text": _text(TOKEN_TEXT_CHARS_MAX, multiline=True),
    "StreamTokensRequest.logprobs": _items(TOKENS_PER_CHUNK_MAX),
    "StreamTokensRequest.prompt_tokens": _range(0, TOKENS_MAX),
    "StreamTokensRequest.cached_prompt_tokens": _range(0, TOKENS_MAX),
    "StreamNodeTokensRequest.sequence": _range(0, MS_MAX),
    "StreamNodeTokensRequest.chunks": _items(CHUNKS_PER_NODE_MESSAGE_MAX),
    "ReportResultRequest.job_id": _text(JOB_ID_CHARS_MAX),
    "ReportPromptCacheRequest.job_id": _text(JOB_ID_CHARS_MAX),
    "ReportPromptCacheRequest.cached_prompt_tokens": _range(0, TOKENS_MAX),
    "ReportPromptCacheRequest.attempt": _range(0, 1 << 31),
    "ReportResultRequest.failure_reason": _text(REASON_CHARS_MAX, multiline=True),
    "ReportCheckRequest.check_id": _text(JOB_ID_CHARS_MAX),
    "ReportCheckRequest.failure_reason": _text(REASON_CHARS_MAX, multiline=True),
    "SignedCheckResult.body": _text(CHECK_RESULT_BYTES_MAX),
    "SignedCheckResult.signature": _text(128),
    "LeaveRequest.reason": _text(REASON_CHARS_MAX),
    "AnswerChallengeRequest.challenge_id": _text(JOB_ID_CHARS_MAX),
    "AnswerChallengeRequest.token_ids": _items(CHALLENGE_TOKENS_MAX),
    "AnswerChallengeRequest.decode_tokens_per_s": _range(0, TOKENS_PER_S_MAX),
}


class LimitExceeded(ValueError):
    """A value outside its field's limit; the message names the field and the limit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def check_number(field: str, value: float, limit: Limit) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise LimitExceeded(field, f"{field} must be a finite number {limit.describe_range()}; "
                                   f"got {value}")
    if limit.zero_or_low and value == 0:
        return
    if (limit.low is not None and value < limit.low) or (limit.high is not None and value > limit.high):
        raise LimitExceeded(field, f"{field} must be {limit.describe_range()}; got "
                                   f"{shown(str(value), 40)}")


# Control characters (C0, DEL and C1), found in one regex pass rather than a Python loop per character.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_LINE_BREAKS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # not \t \n \r


def check_text(field: str, value: str, limit: Limit, chars_max: int) -> None:
    """At most chars_max characters, valid Unicode (no lone surrogates), no control characters
    (line breaks and tabs only where the field is multiline)."""
    if len(value) > chars_max:
        raise LimitExceeded(field, f"{field} is {len(value)} characters; the limit is {chars_max}")
    if not is_valid_text(value):
        raise LimitExceeded(field, f"{field} is not valid Unicode text (it holds a lone surrogate)")
    if (_CONTROL_BUT_LINE_BREAKS if limit.multiline else _CONTROL).search(value):
        raise LimitExceeded(field, f"{field} must not hold control characters"
                                   + ("" if limit.multiline else " or line breaks"))


def check_count(field: str, count: int, items_max: int) -> None:
    if count > items_max:
        raise LimitExceeded(field, f"{field} holds {count} items; the limit is {items_max}")


def is_valid_text(value: str) -> bool:
    """True unless the text holds a lone surrogate, which no UTF-8 encoder accepts."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def ascii_int(text: str, digits_max: int = PAGE_DIGITS_MAX) -> int | None:
    """The whole number spelled by text in ASCII digits 0-9, or None ("²", "٣", "-1", "1e3" are not)."""
    if not text or len(text) > digits_max or not (text.isascii() and text.isdigit()):
        return None
    return int(text)


def shown(value: object, chars_max: int = LOGGED_CHARS_MAX) -> str:
    """A client's value as it may appear in a log line or an error: escaped and truncated.

    Characters that are not printable (a newline that would forge a log line, a lone
    surrogate) and backslashes are escaped; past chars_max the text is cut and says how long
    it was."""
    text = value if isinstance(value, str) else str(value)
    escaped = "".join(c if c.isprintable() and c != "\\" else c.encode("unicode_escape").decode("ascii")
                      for c in text[:chars_max])
    if len(text) > chars_max:
        escaped += f"... ({len(text)} characters)"
    return escaped
