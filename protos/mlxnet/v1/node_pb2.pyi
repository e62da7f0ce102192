from protos.mlxnet.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobFailure(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_FAILURE_UNSPECIFIED: _ClassVar[JobFailure]
    JOB_FAILURE_PROMPT_TOO_LONG: _ClassVar[JobFailure]
JOB_FAILURE_UNSPECIFIED: JobFailure
JOB_FAILURE_PROMPT_TOO_LONG: JobFailure

class ThunderboltLink(_message.Message):
    __slots__ = ("port", "speed_gbps", "thunderbolt_version", "peer_model_identifier", "peer_name", "peer_uid", "peer_rdma_capable", "local_domain_uuid")
    PORT_FIELD_NUMBER: _ClassVar[int]
    SPEED_GBPS_FIELD_NUMBER: _ClassVar[int]
    THUNDERBOLT_VERSION_FIELD_NUMBER: _ClassVar[int]
    PEER_MODEL_IDENTIFIER_FIELD_NUMBER: _ClassVar[int]
    PEER_NAME_FIELD_NUMBER: _ClassVar[int]
    PEER_UID_FIELD_NUMBER: _ClassVar[int]
    PEER_RDMA_CAPABLE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_DOMAIN_UUID_FIELD_NUMBER: _ClassVar[int]
    port: str
    speed_gbps: int
    thunderbolt_version: int
    peer_model_identifier: str
    peer_name: str
    peer_uid: str
    peer_rdma_capable: bool
    local_domain_uuid: str
    def __init__(self, port: _Optional[str] = ..., speed_gbps: _Optional[int] = ..., thunderbolt_version: _Optional[int] = ..., peer_model_identifier: _Optional[str] = ..., peer_name: _Optional[str] = ..., peer_uid: _Optional[str] = ..., peer_rdma_capable: _Optional[bool] = ..., local_domain_uuid: _Optional[str] = ...) -> None: ...

class Hardware(_message.Message):
    __slots__ = ("chip", "chip_family", "chip_tier", "memory_bytes", "gpu_working_set_bytes", "gpu_cores", "memory_bandwidth_gb_s", "os_name", "model_identifier", "thunderbolt_links", "rdma_enabled", "simulated")
    CHIP_FIELD_NUMBER: _ClassVar[int]
    CHIP_FAMILY_FIELD_NUMBER: _ClassVar[int]
    CHIP_TIER_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    GPU_WORKING_SET_BYTES_FIELD_NUMBER: _ClassVar[int]
    GPU_CORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BANDWIDTH_GB_S_FIELD_NUMBER: _ClassVar[int]
    OS_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_IDENTIFIER_FIELD_NUMBER: _ClassVar[int]
    THUNDERBOLT_LINKS_FIELD_NUMBER: _ClassVar[int]
    RDMA_ENABLED_FIELD_NUMBER: _ClassVar[int]
    SIMULATED_FIELD_NUMBER: _ClassVar[int]
    chip: str
    chip_family: str
    chip_tier: str
    memory_bytes: int
    gpu_working_set_bytes: int
    gpu_cores: int
    memory_bandwidth_gb_s: float
    os_name: str
    model_identifier: str
    thunderbolt_links: _containers.RepeatedCompositeFieldContainer[ThunderboltLink]
    rdma_enabled: bool
    simulated: bool
    def __init__(self, chip: _Optional[str] = ..., chip_family: _Optional[str] = ..., chip_tier: _Optional[str] = ..., memory_bytes: _Optional[int] = ..., gpu_working_set_bytes: _Optional[int] = ..., gpu_cores: _Optional[int] = ..., memory_bandwidth_gb_s: _Optional[float] = ..., os_name: _Optional[str] = ..., model_identifier: _Optional[str] = ..., thunderbolt_links: _Optional[_Iterable[_Union[ThunderboltLink, _Mapping]]] = ..., rdma_enabled: _Optional[bool] = ..., simulated: _Optional[bool] = ...) -> None: ...

class LendingState(_message.Message):
    __slots__ = ("mode", "owner_active", "accepting_jobs", "reason", "memory_cap_bytes")
    MODE_FIELD_NUMBER: _ClassVar[int]
    OWNER_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    ACCEPTING_JOBS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MEMORY_CAP_BYTES_FIELD_NUMBER: _ClassVar[int]
    mode: str
    owner_active: bool
    accepting_jobs: bool
    reason: str
    memory_cap_bytes: int
    def __init__(self, mode: _Optional[str] = ..., owner_active: _Optional[bool] = ..., accepting_jobs: _Optional[bool] = ..., reason: _Optional[str] = ..., memory_cap_bytes: _Optional[int] = ...) -> None: ...

class Benchmark(_message.Message):
    __slots__ = ("memory_bandwidth_gb_s", "decode_tokens_per_s", "prefill_tokens_per_s", "reference_model", "reference_weights_bytes", "measured_at_ms", "run_time_ms", "batch_decode")
    MEMORY_BANDWIDTH_GB_S_FIELD_NUMBER: _ClassVar[int]
    DECODE_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    PREFILL_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_MODEL_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_WEIGHTS_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEASURED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    RUN_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    BATCH_DECODE_FIELD_NUMBER: _ClassVar[int]
    memory_bandwidth_gb_s: float
    decode_tokens_per_s: float
    prefill_tokens_per_s: float
    reference_model: str
    reference_weights_bytes: int
    measured_at_ms: int
    run_time_ms: int
    batch_decode: _containers.RepeatedCompositeFieldContainer[BatchDecode]
    def __init__(self, memory_bandwidth_gb_s: _Optional[float] = ..., decode_tokens_per_s: _Optional[float] = ..., prefill_tokens_per_s: _Optional[float] = ..., reference_model: _Optional[str] = ..., reference_weights_bytes: _Optional[int] = ..., measured_at_ms: _Optional[int] = ..., run_time_ms: _Optional[int] = ..., batch_decode: _Optional[_Iterable[_Union[BatchDecode, _Mapping]]] = ...) -> None: ...

class BatchDecode(_message.Message):
    __slots__ = ("batch_size", "tokens_per_s")
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    tokens_per_s: float
    def __init__(self, batch_size: _Optional[int] = ..., tokens_per_s: _Optional[float] = ...) -> None: ...

class PodLink(_message.Message):
    __slots__ = ("a", "b", "kind", "cables")
    A_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CABLES_FIELD_NUMBER: _ClassVar[int]
    a: str
    b: str
    kind: str
    cables: int
    def __init__(self, a: _Optional[str] = ..., b: _Optional[str] = ..., kind: _Optional[str] = ..., cables: _Optional[int] = ...) -> None: ...

class PodDeclaration(_message.Message):
    __slots__ = ("pod_id", "member_node_ids", "links")
    POD_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_NODE_IDS_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    pod_id: str
    member_node_ids: _containers.RepeatedScalarFieldContainer[str]
    links: _containers.RepeatedCompositeFieldContainer[PodLink]
    def __init__(self, pod_id: _Optional[str] = ..., member_node_ids: _Optional[_Iterable[str]] = ..., links: _Optional[_Iterable[_Union[PodLink, _Mapping]]] = ...) -> None: ...

class RegisterChallengeRequest(_message.Message):
    __slots__ = ("public_key",)
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    public_key: bytes
    def __init__(self, public_key: _Optional[bytes] = ...) -> None: ...

class RegisterChallengeResponse(_message.Message):
    __slots__ = ("nonce", "expires_at_ms")
    NONCE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    nonce: bytes
    expires_at_ms: int
    def __init__(self, nonce: _Optional[bytes] = ..., expires_at_ms: _Optional[int] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("public_key", "signature", "timestamp_ms", "hardware", "models", "operator_id", "display_name", "max_concurrent_jobs", "agent_version", "lending", "benchmark", "warm_models", "pod", "nonce", "operator_key", "region")
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_JOBS_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    LENDING_FIELD_NUMBER: _ClassVar[int]
    BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    WARM_MODELS_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_KEY_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    public_key: bytes
    signature: bytes
    timestamp_ms: int
    hardware: Hardware
    models: _containers.RepeatedCompositeFieldContainer[_common_pb2.ModelSpec]
    operator_id: str
    display_name: str
    max_concurrent_jobs: int
    agent_version: str
    lending: LendingState
    benchmark: Benchmark
    warm_models: _containers.RepeatedScalarFieldContainer[str]
    pod: PodDeclaration
    nonce: bytes
    operator_key: str
    region: str
    def __init__(self, public_key: _Optional[bytes] = ..., signature: _Optional[bytes] = ..., timestamp_ms: _Optional[int] = ..., hardware: _Optional[_Union[Hardware, _Mapping]] = ..., models: _Optional[_Iterable[_Union[_common_pb2.ModelSpec, _Mapping]]] = ..., operator_id: _Optional[str] = ..., display_name: _Optional[str] = ..., max_concurrent_jobs: _Optional[int] = ..., agent_version: _Optional[str] = ..., lending: _Optional[_Union[LendingState, _Mapping]] = ..., benchmark: _Optional[_Union[Benchmark, _Mapping]] = ..., warm_models: _Optional[_Iterable[str]] = ..., pod: _Optional[_Union[PodDeclaration, _Mapping]] = ..., nonce: _Optional[bytes] = ..., operator_key: _Optional[str] = ..., region: _Optional[str] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("node_id", "session_token", "heartbeat_interval_ms", "signed_heartbeat_interval_ms")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    SIGNED_HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    session_token: str
    heartbeat_interval_ms: int
    signed_heartbeat_interval_ms: int
    def __init__(self, node_id: _Optional[str] = ..., session_token: _Optional[str] = ..., heartbeat_interval_ms: _Optional[int] = ..., signed_heartbeat_interval_ms: _Optional[int] = ...) -> None: ...

class BindSessionRequest(_message.Message):
    __slots__ = ("nonce", "signature")
    NONCE_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    nonce: bytes
    signature: bytes
    def __init__(self, nonce: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class BindSessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("running_jobs", "sent_at_ms", "lending", "warm_models", "benchmark", "signature")
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LENDING_FIELD_NUMBER: _ClassVar[int]
    WARM_MODELS_FIELD_NUMBER: _ClassVar[int]
    BENCHMARK_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    running_jobs: int
    sent_at_ms: int
    lending: LendingState
    warm_models: _containers.RepeatedScalarFieldContainer[str]
    benchmark: Benchmark
    signature: bytes
    def __init__(self, running_jobs: _Optional[int] = ..., sent_at_ms: _Optional[int] = ..., lending: _Optional[_Union[LendingState, _Mapping]] = ..., warm_models: _Optional[_Iterable[str]] = ..., benchmark: _Optional[_Union[Benchmark, _Mapping]] = ..., signature: _Optional[bytes] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("server_time_ms",)
    SERVER_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    server_time_ms: int
    def __init__(self, server_time_ms: _Optional[int] = ...) -> None: ...

class HeartbeatsRequest(_message.Message):
    __slots__ = ("heartbeat",)
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    heartbeat: HeartbeatRequest
    def __init__(self, heartbeat: _Optional[_Union[HeartbeatRequest, _Mapping]] = ...) -> None: ...

class HeartbeatsResponse(_message.Message):
    __slots__ = ("heartbeat",)
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    heartbeat: HeartbeatResponse
    def __init__(self, heartbeat: _Optional[_Union[HeartbeatResponse, _Mapping]] = ...) -> None: ...

class ReceiveAssignmentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReceiveAssignmentsResponse(_message.Message):
    __slots__ = ("job_id", "model", "prompt", "sampling", "context_tokens", "strategy", "pod_node_ids", "layer_split", "pod_id", "pod_leader_node_id", "logprobs", "top_logprobs", "attempt", "check", "challenge", "traceparent")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    POD_NODE_IDS_FIELD_NUMBER: _ClassVar[int]
    LAYER_SPLIT_FIELD_NUMBER: _ClassVar[int]
    POD_ID_FIELD_NUMBER: _ClassVar[int]
    POD_LEADER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    CHALLENGE_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    model: _common_pb2.ModelSpec
    prompt: str
    sampling: _common_pb2.SamplingParams
    context_tokens: int
    strategy: str
    pod_node_ids: _containers.RepeatedScalarFieldContainer[str]
    layer_split: _containers.RepeatedScalarFieldContainer[int]
    pod_id: str
    pod_leader_node_id: str
    logprobs: bool
    top_logprobs: int
    attempt: int
    check: PeerCheckJob
    challenge: BenchmarkChallenge
    traceparent: str
    def __init__(self, job_id: _Optional[str] = ..., model: _Optional[_Union[_common_pb2.ModelSpec, _Mapping]] = ..., prompt: _Optional[str] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., context_tokens: _Optional[int] = ..., strategy: _Optional[str] = ..., pod_node_ids: _Optional[_Iterable[str]] = ..., layer_split: _Optional[_Iterable[int]] = ..., pod_id: _Optional[str] = ..., pod_leader_node_id: _Optional[str] = ..., logprobs: _Optional[bool] = ..., top_logprobs: _Optional[int] = ..., attempt: _Optional[int] = ..., check: _Optional[_Union[PeerCheckJob, _Mapping]] = ..., challenge: _Optional[_Union[BenchmarkChallenge, _Mapping]] = ..., traceparent: _Optional[str] = ...) -> None: ...

class PeerCheckJob(_message.Message):
    __slots__ = ("checked_job_id", "output_ids", "finish_reason", "logit_slack", "mass_slack")
    CHECKED_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    LOGIT_SLACK_FIELD_NUMBER: _ClassVar[int]
    MASS_SLACK_FIELD_NUMBER: _ClassVar[int]
    checked_job_id: str
    output_ids: _containers.RepeatedScalarFieldContainer[int]
    finish_reason: int
    logit_slack: float
    mass_slack: float
    def __init__(self, checked_job_id: _Optional[str] = ..., output_ids: _Optional[_Iterable[int]] = ..., finish_reason: _Optional[int] = ..., logit_slack: _Optional[float] = ..., mass_slack: _Optional[float] = ...) -> None: ...

class SignedCheckResult(_message.Message):
    __slots__ = ("body", "signature")
    BODY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    signature: bytes
    def __init__(self, body: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class ReportCheckRequest(_message.Message):
    __slots__ = ("check_id", "result", "failure_reason")
    CHECK_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    check_id: str
    result: SignedCheckResult
    failure_reason: str
    def __init__(self, check_id: _Optional[str] = ..., result: _Optional[_Union[SignedCheckResult, _Mapping]] = ..., failure_reason: _Optional[str] = ...) -> None: ...

class ReportCheckResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    def __init__(self, accepted: _Optional[bool] = ...) -> None: ...

class BenchmarkChallenge(_message.Message):
    __slots__ = ("challenge_id", "prompt", "seed", "decode_tokens")
    CHALLENGE_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    DECODE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    challenge_id: str
    prompt: str
    seed: int
    decode_tokens: int
    def __init__(self, challenge_id: _Optional[str] = ..., prompt: _Optional[str] = ..., seed: _Optional[int] = ..., decode_tokens: _Optional[int] = ...) -> None: ...

class AnswerChallengeRequest(_message.Message):
    __slots__ = ("challenge_id", "token_ids", "decode_tokens_per_s", "receipt")
    CHALLENGE_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    DECODE_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    challenge_id: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    decode_tokens_per_s: float
    receipt: _common_pb2.SignedReceipt
    def __init__(self, challenge_id: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., decode_tokens_per_s: _Optional[float] = ..., receipt: _Optional[_Union[_common_pb2.SignedReceipt, _Mapping]] = ...) -> None: ...

class AnswerChallengeResponse(_message.Message):
    __slots__ = ("passed", "reason")
    PASSED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    passed: bool
    reason: str
    def __init__(self, passed: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class StreamTokensRequest(_message.Message):
    __slots__ = ("job_id", "first_index", "token_ids", "text", "logprobs", "prompt_tokens", "partial_receipt", "attempt", "cached_prompt_tokens")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_RECEIPT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    first_index: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    logprobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TokenLogprob]
    prompt_tokens: int
    partial_receipt: _common_pb2.SignedReceipt
    attempt: int
    cached_prompt_tokens: int
    def __init__(self, job_id: _Optional[str] = ..., first_index: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., logprobs: _Optional[_Iterable[_Union[_common_pb2.TokenLogprob, _Mapping]]] = ..., prompt_tokens: _Optional[int] = ..., partial_receipt: _Optional[_Union[_common_pb2.SignedReceipt, _Mapping]] = ..., attempt: _Optional[int] = ..., cached_prompt_tokens: _Optional[int] = ...) -> None: ...

class StreamTokensResponse(_message.Message):
    __slots__ = ("tokens_accepted",)
    TOKENS_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    tokens_accepted: int
    def __init__(self, tokens_accepted: _Optional[int] = ...) -> None: ...

class StreamNodeTokensRequest(_message.Message):
    __slots__ = ("sequence", "chunks")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    chunks: _containers.RepeatedCompositeFieldContainer[StreamTokensRequest]
    def __init__(self, sequence: _Optional[int] = ..., chunks: _Optional[_Iterable[_Union[StreamTokensRequest, _Mapping]]] = ...) -> None: ...

class StreamNodeTokensResponse(_message.Message):
    __slots__ = ("sequence", "refused")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    refused: _containers.RepeatedCompositeFieldContainer[JobTokensRefused]
    def __init__(self, sequence: _Optional[int] = ..., refused: _Optional[_Iterable[_Union[JobTokensRefused, _Mapping]]] = ...) -> None: ...

class JobTokensRefused(_message.Message):
    __slots__ = ("job_id", "code", "message")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    code: str
    message: str
    def __init__(self, job_id: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ReportResultRequest(_message.Message):
    __slots__ = ("job_id", "receipt", "failure_reason", "handed_back", "failure", "partial_receipt", "attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    HANDED_BACK_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_RECEIPT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    receipt: _common_pb2.SignedReceipt
    failure_reason: str
    handed_back: bool
    failure: JobFailure
    partial_receipt: _common_pb2.SignedReceipt
    attempt: int
    def __init__(self, job_id: _Optional[str] = ..., receipt: _Optional[_Union[_common_pb2.SignedReceipt, _Mapping]] = ..., failure_reason: _Optional[str] = ..., handed_back: _Optional[bool] = ..., failure: _Optional[_Union[JobFailure, str]] = ..., partial_receipt: _Optional[_Union[_common_pb2.SignedReceipt, _Mapping]] = ..., attempt: _Optional[int] = ...) -> None: ...

class ReportPromptCacheRequest(_message.Message):
    __slots__ = ("job_id", "cached_prompt_tokens", "attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    cached_prompt_tokens: int
    attempt: int
    def __init__(self, job_id: _Optional[str] = ..., cached_prompt_tokens: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class ReportPromptCacheResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReportResultResponse(_message.Message):
    __slots__ = ("credited_base_units",)
    CREDITED_BASE_UNITS_FIELD_NUMBER: _ClassVar[int]
    credited_base_units: int
    def __init__(self, credited_base_units: _Optional[int] = ...) -> None: ...

class LeaveRequest(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class LeaveResponse(_message.Message):
    __slots__ = ("jobs_handed_back",)
    JOBS_HANDED_BACK_FIELD_NUMBER: _ClassVar[int]
    jobs_handed_back: int
    def __init__(self, jobs_handed_back: _Optional[int] = ...) -> None: ...
