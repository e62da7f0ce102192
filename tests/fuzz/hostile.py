"""Hostile values for every field of every protobuf message, and a way to call every RPC with them.

Shared by the fuzz tests (tests/fuzz) and bench/security.py. A value is hostile when a client
controls it and an honest client would never send it: infinities and NaN, integers at their
type's edges, text at and past each limit, control characters, look-alike digits, bidi
overrides, garbage bytes. The only rule for the coordinator: answer with a status that says
what was wrong, never UNKNOWN or INTERNAL, and keep serving.
"""

from __future__ import annotations

import math
from urllib.parse import quote
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

from protos.mlxnet.v1 import job_pb2, node_pb2

SERVICES = (job_pb2.DESCRIPTOR.services_by_name["JobService"],
            node_pb2.DESCRIPTOR.services_by_name["NodeService"])
# Status codes that mean the server failed, not the request.
SERVER_FAILURES = frozenset({grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL,
                             grpc.StatusCode.DATA_LOSS, grpc.StatusCode.UNIMPLEMENTED})
FUZZ_MODEL_ID = "fuzz/model"  # the model the fuzzers' own node serves, so submits get placed
STREAM_WAIT_S = 0.5  # a server stream may rightly stay open (assignments): read this long
CALL_TIMEOUT_S = 30.0
DEPTH_MAX = 3

_FLOATS = st.one_of(st.sampled_from([math.inf, -math.inf, math.nan, -0.0, 0.0, 1.0, -1.0, 1e308,
                                     -1e308, 5e-324, 2.0**63, 1e4, 1e5]),
                    st.floats(allow_nan=True, allow_infinity=True))
_TEXT_LENGTHS = (0, 1, 33, 65, 129, 257, 513, 1_025, 70_000)
_TEXT_SAMPLES = ("", "\n", "a\n2026-12-06 INFO coordinator: forged line", "\x00", "\r\n\t", "²", "٣",
                 "１２", "\u202eevil", "𝟙𝟚", "🙂" * 5, "node-" + "0" * 24, "job-x", "../../etc/passwd",
                 "'; DROP TABLE nodes; --", "%s%s%n", "mlx-community/Qwen3-4B-4bit", "\\u0000",
                 "ultra_seat", "ultra", "not_apple", "rdma_tb5", "system", "user", FUZZ_MODEL_ID)
# Lone surrogates cannot go into a protobuf string (the client refuses to encode them); the
# raw-bytes cases (tests/fuzz/test_grpc.py) send invalid UTF-8 past the client instead.
_PLAIN_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
_TEXT = st.one_of(st.sampled_from(_TEXT_SAMPLES), _PLAIN_TEXT,
                  st.builds(lambda n, c: c * n, st.sampled_from(_TEXT_LENGTHS),
                            st.sampled_from(["x", "é", "\n", "7"])))
_BYTES = st.one_of(st.binary(max_size=80), st.sampled_from([b"", b"\x00" * 32, b"\xff" * 64,
                                                            b"\x00" * 5_000]))
_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1), FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1), FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1), FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1), FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1), FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def _integers(low: int, high: int) -> st.SearchStrategy[int]:
    edges = [v for v in (low, high, -1, 0, 1, 2, 7, 255, 256, 1_024, 65_536, 2**31 - 1, 2**31,
                         2**53 + 1) if low <= v <= high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[object]:
    kind = field.type
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return _FLOATS
    if kind in _INT_RANGES:
        return _integers(*_INT_RANGES[kind])
    if kind == FieldDescriptor.TYPE_STRING:
        return _TEXT
    if kind == FieldDescriptor.TYPE_BYTES:
        return _BYTES
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_ENUM:
        return _integers(-3, 40)  # proto3 enums are open: unknown numbers arrive as they are
    raise AssertionError(f"no strategy for field type {kind}")


def _value(field: FieldDescriptor, depth: int) -> st.SearchStrategy[object]:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return messages(field.message_type, depth + 1)
    return _scalar(field)


def _field_value(field: FieldDescriptor, depth: int) -> st.SearchStrategy[object]:
    if not field.is_repeated:
        return _value(field, depth)
    few = st.lists(_value(field, depth), max_size=3)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        item: st.SearchStrategy[object] = st.builds(GetMessageClass(field.message_type))
    elif field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
        item = st.just("x" if field.type == FieldDescriptor.TYPE_STRING else b"x")
    else:
        item = _scalar(field)
    many = st.builds(lambda value, n: [value] * n, item, st.sampled_from([33, 300, 50_000]))
    return st.one_of(few, many)


def messages(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Messages of this type with any subset of their fields set to hostile values."""
    cls = GetMessageClass(descriptor)
    if depth >= DEPTH_MAX:
        return st.just(cls())
    fields = list(descriptor.fields)
    return st.builds(_fill, st.just(cls), st.fixed_dictionaries(
        {}, optional={field.name: _field_value(field, depth) for field in fields}))


def _fill(cls: type[Message], values: dict[str, object]) -> Message:
    message = cls()
    for name, value in values.items():
        field = message.DESCRIPTOR.fields_by_name[name]
        if field.is_repeated:
            getattr(message, name).extend(value)  # type: ignore[arg-type]
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            getattr(message, name).CopyFrom(value)  # type: ignore[arg-type]
        else:
            setattr(message, name, value)
    return message


Path = tuple[str | int, ...]  # field names, and an index into a repeated message field

_FLOAT_EDGES = (math.inf, -math.inf, math.nan, -1.0, 1e308, 5e-324, 1e6)
_TEXT_EDGES = ("", "x" * 70_000, "a\n2026-12-06 INFO coordinator: forged", "\x00", "²", "\u202e", "🙂")
_BYTES_EDGES = (b"", b"\xff" * 5_000)
ITEMS_MANY = 50_000


def edge_values(field: FieldDescriptor) -> list[object]:
    """The few values most likely to break a field of this type: its sweep (see sweep())."""
    kind = field.type
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return list(_FLOAT_EDGES)
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        return sorted({v for v in (low, high, -1, 0, 2**31, 2**53 + 1) if low <= v <= high})
    if kind == FieldDescriptor.TYPE_STRING:
        return list(_TEXT_EDGES)
    if kind == FieldDescriptor.TYPE_BYTES:
        return list(_BYTES_EDGES)
    if kind == FieldDescriptor.TYPE_ENUM:
        return [-1, 99]
    return [True, False]


def sweep(descriptor: Descriptor, depth: int = 0) -> Iterator[tuple[Path, object]]:
    """Every field (submessages down to DEPTH_MAX, the first item of lists of messages) with
    each of its edge values, and every list at a huge count: one change per case."""
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if depth + 1 >= DEPTH_MAX:
                continue
            prefix: Path = (field.name, 0) if field.is_repeated else (field.name,)
            for path, value in sweep(field.message_type, depth + 1):
                yield (*prefix, *path), value
            if field.is_repeated:
                yield (field.name,), [GetMessageClass(field.message_type)()] * 300
            continue
        for value in edge_values(field):
            yield (field.name,), [value] if field.is_repeated else value
        if field.is_repeated:
            benign = "x" if field.type == FieldDescriptor.TYPE_STRING else (
                b"x" if field.type == FieldDescriptor.TYPE_BYTES else 1)
            yield (field.name,), [benign] * ITEMS_MANY


def _mutation(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[tuple[Path, object]]:
    """One field somewhere in the message (a leaf, or a whole submessage) and a hostile value."""
    def at(field: FieldDescriptor) -> st.SearchStrategy[tuple[Path, object]]:
        here = st.tuples(st.just((field.name,)), _field_value(field, depth))
        if field.type != FieldDescriptor.TYPE_MESSAGE or field.is_repeated or depth + 1 >= DEPTH_MAX:
            return here
        if not field.message_type.fields:
            return here
        deeper = _mutation(field.message_type, depth + 1).map(
            lambda change: ((field.name, *change[0]), change[1]))
        return st.one_of(deeper, deeper, here)

    return st.sampled_from(list(descriptor.fields)).flatmap(at)


def mutation_of(descriptor: Descriptor) -> st.SearchStrategy[tuple[Path, object]]:
    return _mutation(descriptor)


def mutated(baseline: Message) -> st.SearchStrategy[Message]:
    """The baseline (an honest message) with one to three fields made hostile: deep enough to
    get past the first check and reach what a single bad value can break."""
    if not baseline.DESCRIPTOR.fields:
        return st.just(baseline)
    return st.lists(_mutation(baseline.DESCRIPTOR), min_size=1, max_size=3).map(
        lambda changes: apply_mutations(baseline, changes))


def apply_mutations(baseline: Message, changes: list[tuple[Path, object]]) -> Message:
    message = type(baseline)()
    message.CopyFrom(baseline)
    for path, value in changes:
        parent = message
        for part in path[:-1]:
            if isinstance(part, int):  # an item of a repeated message field, added if missing
                while len(parent) <= part:  # type: ignore[arg-type]
                    parent.add()  # type: ignore[attr-defined]
                parent = parent[part]  # type: ignore[index]
            else:
                parent = getattr(parent, part)
        assert isinstance(path[-1], str)
        field = parent.DESCRIPTOR.fields_by_name[path[-1]]
        parent.ClearField(path[-1])
        if field.is_repeated:
            getattr(parent, path[-1]).extend(value)  # type: ignore[arg-type]
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            getattr(parent, path[-1]).CopyFrom(value)  # type: ignore[arg-type]
        else:
            setattr(parent, path[-1], value)
    return message


def _baselines() -> dict[str, Message]:
    """An honest request per RPC, for mutated()."""
    from protos.mlxnet.v1 import common_pb2

    lending = node_pb2.LendingState(mode="idle", accepting_jobs=True)
    benchmark = node_pb2.Benchmark(memory_bandwidth_gb_s=250.0, decode_tokens_per_s=120.0,
                                   prefill_tokens_per_s=900.0, reference_model="tiny",
                                   reference_weights_bytes=1 << 20, measured_at_ms=1_700_000_000_000,
                                   run_time_ms=900)
    logprob = common_pb2.TokenLogprob(logprob=-0.5, text="a", top=[
        common_pb2.TopLogprob(token_id=1, text="a", logprob=-0.5)])
    return {
        "SubmitJob": job_pb2.SubmitJobRequest(
            model=FUZZ_MODEL_ID, prompt="Hello", sampling=common_pb2.SamplingParams(max_tokens=4),
            stop=["\n"], logprobs=True, top_logprobs=2),
        "GetJob": job_pb2.GetJobRequest(job_id="job-" + "0" * 32),
        "StreamJob": job_pb2.StreamJobRequest(job_id="job-" + "0" * 32),
        "CancelJob": job_pb2.CancelJobRequest(job_id="job-" + "0" * 32),
        "ExplainPlacement": job_pb2.ExplainPlacementRequest(model=FUZZ_MODEL_ID, context_tokens=64,
                                                            min_decode_tokens_per_s=1.0),
        "Heartbeat": node_pb2.HeartbeatRequest(running_jobs=0, sent_at_ms=1_700_000_000_000,
                                               lending=lending, warm_models=[FUZZ_MODEL_ID],
                                               benchmark=benchmark),
        "Heartbeats": node_pb2.HeartbeatsRequest(heartbeat=node_pb2.HeartbeatRequest(
            running_jobs=0, sent_at_ms=1_700_000_000_000, lending=lending, warm_models=[FUZZ_MODEL_ID])),
        "ReceiveAssignments": node_pb2.ReceiveAssignmentsRequest(),
        "StreamTokens": node_pb2.StreamTokensRequest(job_id="job-" + "0" * 32, first_index=0,
                                                     token_ids=[1], text="a", logprobs=[logprob],
                                                     prompt_tokens=3),
        "StreamNodeTokens": node_pb2.StreamNodeTokensRequest(sequence=1, chunks=[node_pb2.StreamTokensRequest(
            job_id="job-" + "0" * 32, first_index=0, token_ids=[1], text="a", logprobs=[logprob],
            prompt_tokens=3, cached_prompt_tokens=2)]),
        "ReportResult": node_pb2.ReportResultRequest(job_id="job-" + "0" * 32,
                                                     failure_reason="out of memory"),
        "ReportPromptCache": node_pb2.ReportPromptCacheRequest(job_id="job-" + "0" * 32, cached_prompt_tokens=256),
        "Leave": node_pb2.LeaveRequest(reason="maintenance"),
        "Register": node_pb2.RegisterRequest(),  # the real one is mutated in flight (tests/fuzz)
        "RegisterChallenge": node_pb2.RegisterChallengeRequest(public_key=b"\x01" * 32),
        "BindSession": node_pb2.BindSessionRequest(nonce=b"\x02" * 32, signature=b"\x03" * 64),
        "ReportCheck": node_pb2.ReportCheckRequest(check_id="check-" + "0" * 24,
                                                   failure_reason="out of memory"),
        "AnswerChallenge": node_pb2.AnswerChallengeRequest(challenge_id="challenge-" + "0" * 24,
                                                           token_ids=[1, 2, 3], decode_tokens_per_s=300.0),
    }


BASELINES = _baselines()


def requests_for(rpc: "Rpc") -> st.SearchStrategy[Message]:
    """Wholly hostile messages, and honest ones with a few hostile fields."""
    return st.one_of(messages(rpc.request), mutated(BASELINES[rpc.name]))


@dataclass(frozen=True)
class Rpc:
    service: str
    name: str
    request: Descriptor
    client_streaming: bool
    server_streaming: bool

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.name}"


def every_rpc() -> list[Rpc]:
    methods: list[MethodDescriptor] = [m for service in SERVICES for m in service.methods]
    return [Rpc(m.containing_service.full_name, m.name, m.input_type, m.client_streaming,
                m.server_streaming) for m in methods]


def call(channel: grpc.Channel, rpc: Rpc, requests: list[bytes],
         metadata: tuple[tuple[str, str], ...] = ()) -> grpc.StatusCode:
    """Send serialized requests (one unless the RPC streams them); the status it ended with.

    A server stream still open after STREAM_WAIT_S (assignments wait for work) counts as OK."""
    identity: Callable[[bytes], bytes] = lambda data: data  # noqa: E731
    try:
        if rpc.client_streaming and rpc.server_streaming:  # Heartbeats: every message sent, then closed
            for _ in channel.stream_stream(rpc.path, identity, identity)(
                    iter(requests), metadata=metadata, timeout=CALL_TIMEOUT_S):
                pass
        elif rpc.client_streaming:
            channel.stream_unary(rpc.path, identity, identity)(
                iter(requests), metadata=metadata, timeout=CALL_TIMEOUT_S)
        elif rpc.server_streaming:
            for _ in channel.unary_stream(rpc.path, identity, identity)(
                    requests[0], metadata=metadata, timeout=STREAM_WAIT_S):
                pass
        else:
            channel.unary_unary(rpc.path, identity, identity)(
                requests[0], metadata=metadata, timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as error:
        code = error.code()  # type: ignore[attr-defined]
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and rpc.server_streaming:
            return grpc.StatusCode.OK
        return code
    return grpc.StatusCode.OK


def raw_payloads() -> Iterator[bytes]:
    """Bytes that are no valid message of any type: invalid UTF-8 in field 1..15, lengths past
    the end, unknown wire types."""
    for tag in range(1, 16):
        yield bytes([(tag << 3) | 2, 3, 0xED, 0xA0, 0x80])  # a lone surrogate's UTF-8 bytes
        yield bytes([(tag << 3) | 2, 2, 0xFF, 0xFE])
        yield bytes([(tag << 3) | 2, 0x7F])  # a length past the end
    yield b"\xff\xff\xff\xff\xff"
    yield bytes([0x0F])  # wire type 7 does not exist


# HTTP: the routes, their query names (World's filters are not in the spec) and hostile values.
QUERY_NAMES = ("page", "page_size", "before", "status", "chip", "tier", "mode", "region", "sort",
               "q", "all", "model")
HOSTILE_TEXT = ("²", "٣", "１", "-1", "0", "1e3", "0x10", "9" * 40, "", " ", "\u202e", "a\nb",
                "%00", "%ff", "%ed%a0%80", "'; DROP TABLE nodes; --", "../../etc/passwd", "x" * 5_000,
                "NaN", "inf", "🙂")
GET_ROUTES = ("/world/api/fleet", "/world/api/fleet/facets", "/world/api/pods", "/world/api/totals",
              "/world/api/operator/me", "/world/api/operator/jobs", "/world/api/operator/epochs",
              "/v1/models")
PATH_ROUTES = ("/world/api/jobs/{}", "/world/api/operator/proofs/{}", "/v1/models/{}", "/v1/jobs/{}",
               "/v1/jobs/{}/receipt")


def quoted(value: str) -> str:
    """A value for a URL: percent-escaped, unless it is already a raw escape ("%ff") to send as is."""
    return value if value.startswith("%") else quote(value, safe="")
