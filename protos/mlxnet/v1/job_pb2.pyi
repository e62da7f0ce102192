from protos.mlxnet.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATUS_UNSPECIFIED: _ClassVar[JobStatus]
    JOB_STATUS_QUEUED: _ClassVar[JobStatus]
    JOB_STATUS_ASSIGNED: _ClassVar[JobStatus]
    JOB_STATUS_RUNNING: _ClassVar[JobStatus]
    JOB_STATUS_COMPLETED: _ClassVar[JobStatus]
    JOB_STATUS_FAILED: _ClassVar[JobStatus]
JOB_STATUS_UNSPECIFIED: JobStatus
JOB_STATUS_QUEUED: JobStatus
JOB_STATUS_ASSIGNED: JobStatus
JOB_STATUS_RUNNING: JobStatus
JOB_STATUS_COMPLETED: JobStatus
JOB_STATUS_FAILED: JobStatus

class SubmitJobRequest(_message.Message):
    __slots__ = ("model", "prompt", "sampling", "request_id", "min_decode_tokens_per_s", "messages", "stop", "logprobs", "top_logprobs", "no_queue", "tools", "tool_choice", "tool_choice_function", "parallel_tool_calls", "response_format_json", "chat_template_kwargs_json")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_DECODE_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    NO_QUEUE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FUNCTION_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FORMAT_JSON_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    model: str
    prompt: str
    sampling: _common_pb2.SamplingParams
    request_id: str
    min_decode_tokens_per_s: float
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.ChatMessage]
    stop: _containers.RepeatedScalarFieldContainer[str]
    logprobs: bool
    top_logprobs: int
    no_queue: bool
    tools: _containers.RepeatedCompositeFieldContainer[FunctionTool]
    tool_choice: str
    tool_choice_function: str
    parallel_tool_calls: bool
    response_format_json: str
    chat_template_kwargs_json: str
    def __init__(self, model: _Optional[str] = ..., prompt: _Optional[str] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., request_id: _Optional[str] = ..., min_decode_tokens_per_s: _Optional[float] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.ChatMessage, _Mapping]]] = ..., stop: _Optional[_Iterable[str]] = ..., logprobs: _Optional[bool] = ..., top_logprobs: _Optional[int] = ..., no_queue: _Optional[bool] = ..., tools: _Optional[_Iterable[_Union[FunctionTool, _Mapping]]] = ..., tool_choice: _Optional[str] = ..., tool_choice_function: _Optional[str] = ..., parallel_tool_calls: _Optional[bool] = ..., response_format_json: _Optional[str] = ..., chat_template_kwargs_json: _Optional[str] = ...) -> None: ...

class FunctionTool(_message.Message):
    __slots__ = ("name", "description", "parameters_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json: _Optional[str] = ...) -> None: ...

class ChatAnswer(_message.Message):
    __slots__ = ("content", "reasoning", "tool_calls")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    content: str
    reasoning: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[_common_pb2.ChatToolCall]
    def __init__(self, content: _Optional[str] = ..., reasoning: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[_common_pb2.ChatToolCall, _Mapping]]] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class StreamJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class StreamJobResponse(_message.Message):
    __slots__ = ("first_index", "token_ids", "text", "final_job", "logprobs")
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FINAL_JOB_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    first_index: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    final_job: Job
    logprobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TokenLogprob]
    def __init__(self, first_index: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., final_job: _Optional[_Union[Job, _Mapping]] = ..., logprobs: _Optional[_Iterable[_Union[_common_pb2.TokenLogprob, _Mapping]]] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "status", "model", "node_ids", "strategy", "placement_explanation_json", "prompt_tokens", "completion_tokens", "text", "receipt", "receipt_verified", "credited_base_units", "error", "created_at_ms", "finished_at_ms", "queue_position", "chips", "signer_public_key", "error_code", "reserved_base_units", "prompt_format", "answer")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NODE_IDS_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_EXPLANATION_JSON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_VERIFIED_FIELD_NUMBER: _ClassVar[int]
    CREDITED_BASE_UNITS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    CHIPS_FIELD_NUMBER: _ClassVar[int]
    SIGNER_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    RESERVED_BASE_UNITS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    status: JobStatus
    model: str
    node_ids: _containers.RepeatedScalarFieldContainer[str]
    strategy: str
    placement_explanation_json: str
    prompt_tokens: int
    completion_tokens: int
    text: str
    receipt: _common_pb2.SignedReceipt
    receipt_verified: bool
    credited_base_units: int
    error: str
    created_at_ms: int
    finished_at_ms: int
    queue_position: int
    chips: _containers.RepeatedScalarFieldContainer[str]
    signer_public_key: bytes
    error_code: str
    reserved_base_units: int
    prompt_format: str
    answer: ChatAnswer
    def __init__(self, job_id: _Optional[str] = ..., status: _Optional[_Union[JobStatus, str]] = ..., model: _Optional[str] = ..., node_ids: _Optional[_Iterable[str]] = ..., strategy: _Optional[str] = ..., placement_explanation_json: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., text: _Optional[str] = ..., receipt: _Optional[_Union[_common_pb2.SignedReceipt, _Mapping]] = ..., receipt_verified: _Optional[bool] = ..., credited_base_units: _Optional[int] = ..., error: _Optional[str] = ..., created_at_ms: _Optional[int] = ..., finished_at_ms: _Optional[int] = ..., queue_position: _Optional[int] = ..., chips: _Optional[_Iterable[str]] = ..., signer_public_key: _Optional[bytes] = ..., error_code: _Optional[str] = ..., reserved_base_units: _Optional[int] = ..., prompt_format: _Optional[str] = ..., answer: _Optional[_Union[ChatAnswer, _Mapping]] = ...) -> None: ...

class ExplainPlacementRequest(_message.Message):
    __slots__ = ("model", "context_tokens", "min_decode_tokens_per_s")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MIN_DECODE_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    model: str
    context_tokens: int
    min_decode_tokens_per_s: float
    def __init__(self, model: _Optional[str] = ..., context_tokens: _Optional[int] = ..., min_decode_tokens_per_s: _Optional[float] = ...) -> None: ...

class ExplainPlacementResponse(_message.Message):
    __slots__ = ("placeable", "permanent", "reason", "node_ids", "strategy", "layer_split", "predicted_decode_tokens_per_s", "predicted_time_to_first_token_s", "explanation_json", "explanation_text")
    PLACEABLE_FIELD_NUMBER: _ClassVar[int]
    PERMANENT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NODE_IDS_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    LAYER_SPLIT_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_DECODE_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_TIME_TO_FIRST_TOKEN_S_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_JSON_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_TEXT_FIELD_NUMBER: _ClassVar[int]
    placeable: bool
    permanent: bool
    reason: str
    node_ids: _containers.RepeatedScalarFieldContainer[str]
    strategy: str
    layer_split: _containers.RepeatedScalarFieldContainer[int]
    predicted_decode_tokens_per_s: float
    predicted_time_to_first_token_s: float
    explanation_json: str
    explanation_text: str
    def __init__(self, placeable: _Optional[bool] = ..., permanent: _Optional[bool] = ..., reason: _Optional[str] = ..., node_ids: _Optional[_Iterable[str]] = ..., strategy: _Optional[str] = ..., layer_split: _Optional[_Iterable[int]] = ..., predicted_decode_tokens_per_s: _Optional[float] = ..., predicted_time_to_first_token_s: _Optional[float] = ..., explanation_json: _Optional[str] = ..., explanation_text: _Optional[str] = ...) -> None: ...
