"""The HTTP API's request and response bodies: OpenAI's shapes, plus MLX Network's own.

Only the gateway imports these; they become coordinator values in requests.py.
A field a request model does not declare is refused with a 400 naming it, never
dropped (fields.py says why, and which fields are only hints).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, StrictInt, Tag

from contracts.chat import MESSAGES_MAX, TOOLS_MAX
from contracts.limits import MODEL_ID_CHARS_MAX, PROMPT_CHARS_CEILING, is_valid_text
from contracts.logprobs import TOP_LOGPROBS_MAX
from contracts.reasoning import REASONING_EFFORTS
from contracts.structured_output import ENUM_VALUES_MAX
from contracts.structured_output import SUPPORTED as STRUCTURED_SUPPORTED
from coordinator.config import CoordinatorConfig
from coordinator.gateway.fields import HINT_DESCRIPTION
from coordinator.jobs.submission import SEED_MAX, STOP_CHARS_MAX, STOP_SEQUENCES_MAX

MODEL_CHARS_MAX = MODEL_ID_CHARS_MAX
JSON_SAFE_INT_MAX = 2**53 - 1  # seeds above this lose digits in many JSON clients
assert JSON_SAFE_INT_MAX <= SEED_MAX
# The coordinator's default limits, published in the spec; a coordinator configured
# otherwise still answers 400 naming the field.
_DEFAULTS = CoordinatorConfig(database_url="")
MAX_TOKENS_MAX = _DEFAULTS.max_tokens_max
PROMPT_CHARS_MAX = _DEFAULTS.prompt_chars_max


def _valid_text(value: str) -> str:
    if not is_valid_text(value):  # a lone surrogate ("\\ud800") that JSON escapes can spell
        raise ValueError("text must be valid Unicode (it holds a lone surrogate)")
    return value


# Every text a request carries: valid Unicode, so no store or encoder fails on it later.
Text = Annotated[str, AfterValidator(_valid_text)]
METADATA_PAIRS_MAX = 16  # as OpenAI
METADATA_KEY_CHARS_MAX = 64
METADATA_VALUE_CHARS_MAX = 512
HINT_CHARS_MAX = 512


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class StreamOptions(_Request):
    include_usage: bool = False
    include_obfuscation: bool | None = Field(default=None, description=HINT_DESCRIPTION +
                                             " (no obfuscation padding is ever added)")


Hint = Annotated[Text | None, Field(default=None, max_length=HINT_CHARS_MAX,
                                   description=HINT_DESCRIPTION)]
Metadata = Annotated[dict[Annotated[Text, Field(max_length=METADATA_KEY_CHARS_MAX)],
                          Annotated[Text, Field(max_length=METADATA_VALUE_CHARS_MAX)]] | None,
                     Field(default=None, max_length=METADATA_PAIRS_MAX, description=HINT_DESCRIPTION)]
NoPenalty = Annotated[float | None, Field(default=None, ge=0.0, le=0.0,
                                          description="only 0 (no penalty) is supported")]


class ResponseFormatText(_Request):
    type: Literal["text"]


class ResponseFormatJsonObject(_Request):
    type: Literal["json_object"] = Field(description="the answer is a JSON object: decoded "
                                         "under a grammar of JSON on the node")


SCHEMA_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"  # as OpenAI
TypeName = Literal["object", "array", "string", "number", "integer", "boolean", "null"]
Count = Annotated[StrictInt, Field(ge=0)]
REF_PATTERN = r"^#/(\$defs|definitions)/"


class JsonSchemaSubset(_Request):
    """The JSON-schema features structured output decodes under (contracts/structured_output.py),
    published as a schema of schemas: any other keyword is a 400 naming it. Beyond what JSON
    Schema can state: a $ref names one of the schema's own $defs, and at most 16 levels nest."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)

    # Unset keywords stay out (as_json); the annotations leave null out of the published schema.
    type: TypeName | Annotated[list[TypeName], Field(min_length=1)] = None  # type: ignore[assignment]
    properties: dict[str, JsonSchemaSubset] = None  # type: ignore[assignment]
    required: list[str] = None  # type: ignore[assignment]
    additionalProperties: bool | JsonSchemaSubset = None  # type: ignore[assignment]
    items: JsonSchemaSubset = None  # type: ignore[assignment]
    enum: Annotated[list[Any], Field(min_length=1, max_length=ENUM_VALUES_MAX)] = None  # type: ignore[assignment]
    const: Any = None
    anyOf: Annotated[list[JsonSchemaSubset], Field(min_length=1)] = None  # type: ignore[assignment]
    minItems: Count = None  # type: ignore[assignment]
    maxItems: Count = None  # type: ignore[assignment]
    minLength: Count = None  # type: ignore[assignment]
    maxLength: Count = None  # type: ignore[assignment]
    defs: dict[str, JsonSchemaSubset] = Field(default=None, alias="$defs")  # type: ignore[assignment]
    definitions: dict[str, JsonSchemaSubset] = None  # type: ignore[assignment]
    ref: str = Field(default=None, alias="$ref", pattern=REF_PATTERN)  # type: ignore[assignment]
    title: str = None  # type: ignore[assignment]
    description: str = None  # type: ignore[assignment]
    default: Any = None
    examples: Any = None
    schema_uri: str = Field(default=None, alias="$schema")  # type: ignore[assignment]
    id_uri: str = Field(default=None, alias="$id")  # type: ignore[assignment]
    comment: str = Field(default=None, alias="$comment")  # type: ignore[assignment]

    def as_json(self) -> dict:
        """The schema as the client sent it (keywords it left out stay out)."""
        return self.model_dump(by_alias=True, exclude_unset=True)


class JsonSchemaFormat(_Request):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)

    name: str = Field(pattern=SCHEMA_NAME_PATTERN)
    description: Text | None = Field(default=None, max_length=HINT_CHARS_MAX)
    schema_: JsonSchemaSubset = Field(alias="schema", description=(
        "the JSON schema the answer follows, decoded under its grammar on the node. "
        "Supported: " + STRUCTURED_SUPPORTED + "; any other feature gets a 400 naming it"))
    strict: bool | None = Field(default=None, description="true or false: the schema is "
                                "enforced either way (constrained decoding)")


class ResponseFormatJsonSchema(_Request):
    type: Literal["json_schema"]
    json_schema: JsonSchemaFormat


def format_tag(value: object) -> str:
    """A format's union tag: "type=..." (errors.py leaves such tags out of a field's path)."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return f"type={kind}"


ResponseFormat = Annotated[Annotated[ResponseFormatText, Tag("type=text")]
                           | Annotated[ResponseFormatJsonObject, Tag("type=json_object")]
                           | Annotated[ResponseFormatJsonSchema, Tag("type=json_schema")],
                           Discriminator(format_tag)]


class ChatTemplateKwargs(_Request):
    enable_thinking: bool | None = Field(default=None, description=(
        "passed to the model's chat template; a 400 when its template does not read it"))
    reasoning_effort: Literal[REASONING_EFFORTS] | None = Field(  # type: ignore[valid-type]
        default=None, description="as the top-level reasoning_effort (which wins when both are sent)")


class TextPart(_Request):
    type: Literal["text"]
    text: Annotated[Text, Field(max_length=PROMPT_CHARS_CEILING)]


FUNCTION_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"  # as OpenAI
TOOL_CALL_ID_CHARS_MAX = 128
FunctionName = Annotated[str, Field(pattern=FUNCTION_NAME_PATTERN)]


class FunctionCallIn(_Request):
    name: FunctionName
    arguments: Text = Field(description="the call's arguments as JSON text")


class ToolCallIn(_Request):
    id: Text = Field(min_length=1, max_length=TOOL_CALL_ID_CHARS_MAX)
    type: Literal["function"]
    function: FunctionCallIn


class ChatMessageIn(_Request):
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: Annotated[Text, Field(max_length=PROMPT_CHARS_CEILING)] | list[TextPart] | None = None
    name: Text | None = Field(default=None, max_length=HINT_CHARS_MAX, description=HINT_DESCRIPTION)
    tool_calls: list[ToolCallIn] | None = Field(default=None, max_length=TOOLS_MAX,
                                                description="an assistant's calls, sent back")
    tool_call_id: Text | None = Field(default=None, min_length=1, max_length=TOOL_CALL_ID_CHARS_MAX,
                                     description="a tool message: the call it answers")
    refusal: None = Field(default=None, description="only null (as an assistant message echoed)")
    reasoning_content: Text | None = Field(default=None, max_length=PROMPT_CHARS_CEILING, description=(
        HINT_DESCRIPTION + ": an assistant's reasoning sent back is not rendered (as thinking "
        "models' templates drop past turns' reasoning)"))
    reasoning: Text | None = Field(default=None, max_length=PROMPT_CHARS_CEILING,
                                   description="as reasoning_content")


class FunctionDefinition(_Request):
    name: FunctionName
    description: Text | None = None
    parameters: dict | None = Field(default=None, description="a JSON schema of the arguments")
    strict: Literal[False] | None = Field(default=None, description="strict true (arguments "
                                          "forced to the schema under tool_choice auto) is refused")


class ToolDefinition(_Request):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(_Request):
    name: FunctionName


class NamedToolChoice(_Request):
    type: Literal["function"]
    function: NamedFunction


StopText = Annotated[Text, Field(min_length=1, max_length=STOP_CHARS_MAX)]
Stop = StopText | Annotated[list[StopText], Field(max_length=STOP_SEQUENCES_MAX)] | None
# A character outside Unicode's White_Space, spelled out: `\S` means other sets in other
# regex engines (ECMA-262's, which JSON Schema uses, counts U+0085 as text; pydantic's does not).
NOT_WHITE_SPACE = r"[^\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
PromptText = Annotated[Text, Field(min_length=1, max_length=PROMPT_CHARS_MAX,
                                  pattern=NOT_WHITE_SPACE,
                                  description="text to complete, not only whitespace")]


class _Generation(_Request):
    model: Text = Field(min_length=1, max_length=MODEL_CHARS_MAX)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_MAX)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=0, le=JSON_SAFE_INT_MAX)
    stop: Stop = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(default=None, ge=1, le=1, description="only 1 is supported")
    frequency_penalty: NoPenalty = None
    presence_penalty: NoPenalty = None
    user: Hint = None
    metadata: Metadata = None
    store: bool | None = Field(default=None, description=HINT_DESCRIPTION + " (every job is "
                               "kept as a job record whatever it says)")
    safety_identifier: Hint = None
    prompt_cache_key: Hint = None


class ChatCompletionRequest(_Generation):
    # As OpenAI: top_logprobs only with logprobs true (published for spec-driven clients).
    model_config = ConfigDict(json_schema_extra={"dependentSchemas": {"top_logprobs": {
        "required": ["logprobs"], "properties": {"logprobs": {"const": True}}}}})

    messages: list[ChatMessageIn] = Field(min_length=1, max_length=MESSAGES_MAX)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_MAX)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(default=None, ge=0, le=TOP_LOGPROBS_MAX)
    response_format: ResponseFormat | None = Field(default=None, description=(
        "json_object and json_schema are decoded under a grammar on the node, and the "
        "verifier replays under the same grammar"))
    reasoning_effort: Literal[REASONING_EFFORTS] | None = Field(  # type: ignore[valid-type]
        default=None, description="passed to the model's chat template; a 400 when its "
                                  "template does not read reasoning_effort")
    chat_template_kwargs: ChatTemplateKwargs | None = Field(default=None, description=(
        "options for the model's chat template (as vLLM and mlx_lm.server take them)"))
    tools: list[ToolDefinition] | None = Field(default=None, max_length=TOOLS_MAX, description=(
        "rendered by the model's chat template on the node; a model whose template has no "
        "tools is refused with a 400"))
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = Field(
        default=None, description="required or a named function: the node decodes under a "
                                  "grammar that admits only calls to the offered tools. Both need "
                                  "tools, and a named function must be one of them (else a 400); "
                                  "tools must be named once each")
    parallel_tool_calls: bool | None = None


class CompletionRequest(_Generation):
    prompt: PromptText | Annotated[list[PromptText], Field(min_length=1, max_length=1)] = Field(
        description="one prompt; a list must hold exactly one")
    logprobs: int | None = Field(default=None, ge=0, le=TOP_LOGPROBS_MAX)
    echo: Literal[False] | None = Field(default=False, description="not supported: must be false")
    best_of: int | None = Field(default=None, ge=1, le=1, description="only 1 is supported")
    suffix: None = Field(default=None, description="not supported")


# --- responses -------------------------------------------------------------

class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int = Field(description="tokens of the reasoning block (chunks that began "
                                  "inside it)")


class PromptTokensDetails(BaseModel):
    cached_tokens: int = Field(description="prompt tokens the node reused from its prompt cache")


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    completion_tokens_details: CompletionTokensDetails | None = None
    prompt_tokens_details: PromptTokensDetails | None = None


class TopLogprobOut(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprobOut(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprobOut]


class ChatLogprobs(BaseModel):
    content: list[TokenLogprobOut] | None
    refusal: None = None


class FunctionCallOut(BaseModel):
    name: str
    arguments: str


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"]
    function: FunctionCallOut


class ChatMessageOut(BaseModel):
    role: Literal["assistant"]
    content: str | None
    refusal: None = None
    tool_calls: list[ToolCallOut] | None = None
    reasoning_content: str | None = Field(default=None, description="a thinking model's "
                                          "reasoning, apart from its answer")
    reasoning: str | None = Field(default=None, description="the same, as mlx_lm.server names it")


class ChatChoice(BaseModel):
    index: int
    message: ChatMessageOut
    logprobs: ChatLogprobs | None
    finish_reason: Literal["stop", "length", "tool_calls"]


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: str | None = None


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: Literal["stop", "length"]


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    system_fingerprint: str | None = None


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    error: ErrorBody


class ModelCapacityOut(BaseModel):
    macs_serving: int = Field(description="online Macs that serve the model")
    macs_available: int = Field(description="of those, Macs that could start a job now")
    predicted_decode_tokens_per_s: float = Field(description="the fastest available Mac's "
                                                 "predicted decode speed (0 when none)")
    context_tokens: int = Field(description="the job size the figures are for")


class ModelOut(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    max_context_tokens: int
    parameter_count: int
    weights_bytes: int
    capacity: ModelCapacityOut


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelOut]


class NodeOut(BaseModel):
    node_id: str
    chip: str


class JobTiming(BaseModel):
    created_at_ms: int
    assigned_at_ms: int | None
    first_token_at_ms: int | None
    finished_at_ms: int | None
    queued_ms: int | None = Field(description="submit to placement")
    run_ms: int | None = Field(description="placement to the end")


class JobCostOut(BaseModel):
    currency: Literal["MLX"]
    base_units_per_mlx: int
    paid_by: Literal["consumer", "network"]
    reserved_base_units: int
    charged_base_units: int
    refunded_base_units: int
    operator_credit_base_units: int
    operator_credit_state: str = Field(description="pending (held until verified), posted, "
                                       "voided, expired, or empty")
    network_fee_base_units: int


class JobOut(BaseModel):
    id: str
    object: Literal["mlxnet.job"]
    status: Literal["queued", "assigned", "running", "completed", "failed"]
    model: str
    strategy: str | None = Field(description="single (one Mac), tensor or pipeline (a pod)")
    pod_id: str | None
    nodes: list[NodeOut]
    attempt: int
    timing: JobTiming
    usage: Usage
    cost: JobCostOut
    text: str
    finish_reason: Literal["stop", "length"] | None
    receipt_available: bool
    receipt_verified: bool
    error: str | None
    error_code: str | None
    placement: dict | None = Field(description="why the job went where it did")


class ReceiptOut(BaseModel):
    job_id: str
    object: Literal["mlxnet.receipt"]
    body_base64: str = Field(description="the canonical receipt bytes the node signed")
    signature_base64: str = Field(description="Ed25519 signature over body")
    signer_public_key_base64: str = Field(description="raw Ed25519 key; sha256 of it, "
                                          "hex, first 24 digits, prefixed node-, is node_id")
    verified_by_coordinator: bool
    fields: dict = Field(description="the decoded receipt; digests in hex")
    how_to_verify: str
