"""Structured output and reasoning through the gateway, end to end, with the official openai
client against a coordinator and a node running real MLX inference (processes).

The tiny model's free output is word salad; under a JSON schema it still answers with JSON
that parses and validates, and the verifier's replay (which applies the same grammar) passes
it. With enable_thinking its template opens a <think> block, so its output is reasoning.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import grpc
import jsonschema
import openai
import pytest
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

from coordinator.storage.database import Database
from coordinator.verification.store import CheckStatus
from mlxnet.checks_view import wait_for_checks
from mlxnet.processes import start_coordinator, start_nodes
from protos.mlxnet.v1 import common_pb2, job_pb2, job_pb2_grpc
from protos.wire.channel import open_channel
from node_agent.tiny_model.builder import CHAT_TEMPLATE
from tests.coordinator.gateway.conftest import MODEL_ID, GatewayNetwork
from tests.coordinator.gateway.test_tools_e2e import PLAIN_MODEL_ID, WEATHER, _plain_copy, _Stopper

pytestmark = pytest.mark.e2e
PET = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 10},
    "kind": {"enum": ["cat", "dog", "newt"]},
    "legs": {"type": "integer", "enum": [0, 2, 4]},
    "friendly": {"type": "boolean"},
    "toys": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 2}},
    "required": ["name", "kind", "legs", "friendly", "toys"], "additionalProperties": False}
ASK = [{"role": "user", "content": "Describe a pet as JSON."}]
PET_FORMAT = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET, "strict": True}}
MAX_TOKENS = 120
THINKING_MODEL_ID = "test/tiny-thinks"


def _thinking_copy(model_dir: Path, into: Path) -> Path:
    """The tiny model with a template whose generation prompt always opens <think> (as
    DeepSeek-R1's does): its output is reasoning unless it closes the block."""
    shutil.copytree(model_dir, into)
    config_path = into / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    always = CHAT_TEMPLATE.replace("{% if enable_thinking is defined and enable_thinking %}<think>\n{% endif %}",
                                   "<think>\n")
    assert always != CHAT_TEMPLATE
    config_path.write_text(json.dumps({**config, "chat_template": always}))
    return into


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[GatewayNetwork]:
    tmp_path = tmp_path_factory.mktemp("structured")
    plain = _plain_copy(tiny_model_dir, tmp_path / "plain-model")
    thinks = _thinking_copy(tiny_model_dir, tmp_path / "thinking-model")
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    coordinator = start_coordinator(tmp_path, database_url=url, heartbeat_interval_ms=500,
                                    verify_models=(f"{MODEL_ID}={tiny_model_dir}",))
    net = GatewayNetwork(tmp_path, url, tiny_model_dir, coordinator, [], Database(url))
    with contextlib.closing(_Stopper(net)):
        net.nodes = start_nodes(tmp_path, net.grpc_address, [
            ("mini", [f"{MODEL_ID}={tiny_model_dir}", f"{PLAIN_MODEL_ID}={plain}",
                      f"{THINKING_MODEL_ID}={thinks}"], "m4-pro-64", "alice")],
            net.trust)
        yield net


def test_a_json_schema_answer_validates_and_the_verifier_passes_it(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("json"))
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL_ID, messages=ASK, response_format=PET_FORMAT,  # type: ignore[arg-type]
        max_tokens=MAX_TOKENS, temperature=0)
    choice = raw.parse().choices[0]
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content or ""), PET)
    (check,) = wait_for_checks(network.database_url, [raw.headers["x-mlxnet-job-id"]])
    assert check.status is CheckStatus.PASSED  # the replay applied the same grammar


class Owner(BaseModel):
    city: Literal["Paris", "Ur"]


class Pet(BaseModel):  # bounded fields: the tiny model never ends a free string by itself
    name: str = Field(max_length=8)
    kind: Literal["cat", "dog"]
    friendly: bool
    owner: Owner | None


def test_the_clients_parse_helper_gets_its_model_back(network: GatewayNetwork) -> None:
    """client.chat.completions.parse sends a strict schema made from a pydantic model (titles,
    $defs and $ref, anyOf with null, additionalProperties false) and parses the answer into it."""
    client = network.client(network.new_key("json-parse"))
    answer = client.chat.completions.parse(model=MODEL_ID, messages=ASK, response_format=Pet,  # type: ignore[arg-type]
                                           max_tokens=MAX_TOKENS, temperature=0)
    assert isinstance(answer.choices[0].message.parsed, Pet)


def test_a_streamed_json_answer_is_the_same_json(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("json-stream"))
    chunks = list(client.chat.completions.create(
        model=MODEL_ID, messages=ASK, response_format=PET_FORMAT,  # type: ignore[arg-type]
        max_tokens=MAX_TOKENS, temperature=0, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    jsonschema.validate(json.loads(text), PET)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_running_out_of_tokens_ends_with_length_not_broken_json_called_stop(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("json-short"))
    choice = client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=4, temperature=0,
                                            response_format={"type": "json_object"}).choices[0]
    assert choice.finish_reason == "length"
    assert (choice.message.content or "").startswith("{")


@pytest.mark.parametrize(("response_format", "param"), [
    ({"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "string", "pattern": "^a"}}},
     "response_format.json_schema.schema.pattern"),
    ({"type": "json_schema", "json_schema": {"name": "s", "schema": {
        "type": "object", "properties": {"n": {"type": "number", "minimum": 1}}}}},
     "response_format.json_schema.schema.properties.n.minimum"),
    ({"type": "json_schema", "json_schema": {"name": "s", "schema": {"$ref": "#/$defs/nowhere"}}},
     "response_format.json_schema.schema"),
])
def test_an_unsupported_schema_feature_is_a_400_naming_it(network: GatewayNetwork, response_format: dict,
                                                         param: str) -> None:
    client = network.client(network.new_key("json-bad"))
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=8,
                                       response_format=response_format)  # type: ignore[arg-type]
    body = raised.value.body
    assert isinstance(body, dict) and body["param"] == param
    assert param.split(".")[-1] in body["message"] or "nowhere" in body["message"]


def test_reasoning_comes_apart_from_the_answer_whole_and_streamed(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("think"))
    fields = {"model": MODEL_ID, "messages": ASK, "max_tokens": 12, "temperature": 0,
              "extra_body": {"chat_template_kwargs": {"enable_thinking": True}}}
    whole = client.chat.completions.create(**fields)  # type: ignore[call-overload]
    message = whole.choices[0].message.model_dump()
    assert message["reasoning_content"] and message["reasoning"] == message["reasoning_content"]
    assert not message["content"]  # the tiny model never closes its <think> block in 12 tokens
    assert whole.usage.completion_tokens_details.reasoning_tokens == whole.usage.completion_tokens
    chunks = list(client.chat.completions.create(**fields, stream=True,
                                                 stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta.model_dump() for c in chunks if c.choices]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == message["reasoning_content"]
    assert not "".join(d.get("content") or "" for d in deltas)
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == whole.usage.completion_tokens
    free = client.chat.completions.create(**{**fields, "extra_body": {}})  # type: ignore[call-overload]
    assert free.choices[0].message.content and not free.choices[0].message.model_dump().get("reasoning_content")
    again = client.chat.completions.create(  # the message sent back, reasoning and all, is taken
        model=MODEL_ID, max_tokens=2, messages=[*ASK, whole.choices[0].message, {"role": "user", "content": "And?"}])  # type: ignore[list-item]
    assert again.choices[0].message.content


def test_reasoning_effort_goes_to_a_template_that_reads_it(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("effort"))
    plain = client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=4, temperature=0)
    effort = client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=4, temperature=0,
                                            reasoning_effort="low")
    assert effort.usage.prompt_tokens > plain.usage.prompt_tokens  # rendered by the template


@pytest.mark.parametrize(("fields", "param"), [
    ({"reasoning_effort": "low"}, "reasoning_effort"),
    ({"extra_body": {"chat_template_kwargs": {"enable_thinking": True}}}, "chat_template_kwargs.enable_thinking"),
])
def test_template_options_a_template_does_not_read_are_400s(network: GatewayNetwork, fields: dict,
                                                            param: str) -> None:
    client = network.client(network.new_key("effort-plain"))
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=PLAIN_MODEL_ID, messages=ASK, max_tokens=4, **fields)
    body = raised.value.body
    assert isinstance(body, dict) and body["param"] == param and "does not read" in body["message"]


def test_the_responses_api_passes_reasoning_effort_to_a_template_that_reads_it(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("effort-responses"))
    plain = client.responses.create(model=MODEL_ID, input="Why?", max_output_tokens=4, temperature=0)
    effort = client.responses.create(model=MODEL_ID, input="Why?", max_output_tokens=4, temperature=0,
                                     reasoning={"effort": "high"})
    assert plain.usage is not None and effort.usage is not None
    assert effort.usage.input_tokens > plain.usage.input_tokens  # rendered by the template
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=PLAIN_MODEL_ID, input="Why?", max_output_tokens=4,
                                reasoning={"effort": "high"})
    assert isinstance(raised.value.body, dict) and raised.value.body["param"] == "reasoning.effort"


def test_an_unknown_template_option_is_a_400_naming_it(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("kwargs-bad"))
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=4,
                                       extra_body={"chat_template_kwargs": {"tools_in_user_message": True}})
    body = raised.value.body
    assert isinstance(body, dict) and body["param"] == "chat_template_kwargs.tools_in_user_message"


def test_a_json_format_with_an_opened_reasoning_block_is_a_400(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("think-json"))
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=4,
                                       response_format={"type": "json_object"},
                                       extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    body = raised.value.body
    assert isinstance(body, dict) and body["param"] == "response_format"


def _grpc_job(network: GatewayNetwork, key: str, **fields: object) -> job_pb2.Job:
    metadata = (("authorization", f"Bearer {key}"),)
    with open_channel(network.grpc_address, network.trust)[0] as channel:
        stub = job_pb2_grpc.JobServiceStub(channel)
        job = stub.SubmitJob(job_pb2.SubmitJobRequest(
            model=MODEL_ID, sampling=common_pb2.SamplingParams(max_tokens=MAX_TOKENS), **fields),
            metadata=metadata, timeout=30).job
        streamed = list(stub.StreamJob(job_pb2.StreamJobRequest(job_id=job.job_id),
                                       metadata=metadata, timeout=120))
    return streamed[-1].final_job


def test_grpc_takes_tools_and_answers_with_the_calls(network: GatewayNetwork) -> None:
    weather = WEATHER["function"]
    final = _grpc_job(network, network.new_key("grpc-tools"),
                      messages=[common_pb2.ChatMessage(role="user", content="Weather in Paris?")],
                      tools=[job_pb2.FunctionTool(name=weather["name"], description=weather["description"],
                                                  parameters_json=json.dumps(weather["parameters"]))],
                      tool_choice_function="get_weather")
    assert final.status == job_pb2.JOB_STATUS_COMPLETED
    (call,) = final.answer.tool_calls
    assert call.name == "get_weather" and call.id == f"call_{final.job_id}_0"
    assert json.loads(call.arguments_json)["city"] in ("Paris", "Ur")
    assert final.answer.content == "" and "<tool_call>" in final.text  # the raw text stays whole
    history = [common_pb2.ChatMessage(role="user", content="Weather in Paris?"),
               common_pb2.ChatMessage(role="assistant", tool_calls=[common_pb2.ChatToolCall(
                   id=call.id, name=call.name, arguments_json=call.arguments_json)]),
               common_pb2.ChatMessage(role="tool", tool_call_id=call.id, content="Sunny")]
    second = _grpc_job(network, network.new_key("grpc-tools-2"), messages=history,
                       tools=[job_pb2.FunctionTool(name=weather["name"], description=weather["description"],
                                                   parameters_json=json.dumps(weather["parameters"]))])
    assert second.status == job_pb2.JOB_STATUS_COMPLETED
    assert second.answer.content or second.answer.tool_calls
    assert second.prompt_tokens > final.prompt_tokens  # the call and its result were rendered


def test_grpc_takes_a_response_format(network: GatewayNetwork) -> None:
    final = _grpc_job(network, network.new_key("grpc-json"),
                      messages=[common_pb2.ChatMessage(**m) for m in ASK],
                      response_format_json=json.dumps(PET_FORMAT))
    jsonschema.validate(json.loads(final.answer.content), PET)


@pytest.mark.parametrize(("fields", "named"), [
    ({"tool_choice": "required"}, "tool_choice"),
    ({"response_format_json": json.dumps({"type": "json_schema", "json_schema": {
        "name": "s", "schema": {"type": "string", "format": "uri"}}})}, "'format'"),
    ({"chat_template_kwargs_json": '{"voice": 1}'}, "chat_template_kwargs_json.voice"),
])
def test_grpc_refuses_what_it_cannot_honour_naming_it(network: GatewayNetwork, fields: dict,
                                                      named: str) -> None:
    key = network.new_key("grpc-bad")
    with open_channel(network.grpc_address, network.trust)[0] as channel:
        stub = job_pb2_grpc.JobServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.SubmitJob(job_pb2.SubmitJobRequest(
                model=MODEL_ID, messages=[common_pb2.ChatMessage(**m) for m in ASK],
                sampling=common_pb2.SamplingParams(max_tokens=4), **fields),
                metadata=(("authorization", f"Bearer {key}"),), timeout=30)
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert named in (raised.value.details() or "")


def test_langchains_structured_output_gets_its_model_back(network: GatewayNetwork) -> None:
    """LangChain's with_structured_output (json_schema method: response_format with a strict schema)."""
    model = ChatOpenAI(model=MODEL_ID, base_url=network.base_url, api_key=network.new_key("lc-json"),
                       temperature=0, max_tokens=MAX_TOKENS, max_retries=0, timeout=120,
                       http_client=network.http_client())
    pet = model.with_structured_output(Pet, method="json_schema", strict=True).invoke("Describe a pet.")
    assert isinstance(pet, Pet) and pet.kind in ("cat", "dog")


def test_a_model_that_thinks_by_default_reasons_without_being_asked(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("thinks"))
    answer = client.chat.completions.create(model=THINKING_MODEL_ID, messages=ASK, max_tokens=8, temperature=0)
    message = answer.choices[0].message.model_dump()
    assert message["reasoning_content"] and not message["content"]
    with pytest.raises(openai.BadRequestError) as raised:  # its reasoning cannot be bound by a grammar
        client.chat.completions.create(model=THINKING_MODEL_ID, messages=ASK, max_tokens=8,
                                       response_format={"type": "json_object"})
    assert isinstance(raised.value.body, dict) and raised.value.body["param"] == "response_format"


def test_the_responses_api_gives_reasoning_its_own_item_whole_and_streamed(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("thinks-responses"))
    response = client.responses.create(model=THINKING_MODEL_ID, input="Why?", max_output_tokens=8, temperature=0)
    (item,) = [i for i in response.output if i.type == "reasoning"]
    reasoning = "".join(c.text for c in item.content or ())
    assert reasoning and response.output_text == ""
    assert response.usage is not None and response.usage.output_tokens_details.reasoning_tokens == 8
    events = list(client.responses.create(model=THINKING_MODEL_ID, input="Why?", max_output_tokens=8,
                                          temperature=0, stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert deltas == reasoning
    (done,) = [e for e in events if e.type == "response.reasoning_text.done"]
    assert done.text == reasoning and events[-1].type == "response.incomplete"
