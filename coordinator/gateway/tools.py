"""Tool calling on /v1/chat/completions: requests' tools in, the output's calls out. Pure.

The node renders the tools with the model's chat template and, for a required or named
tool choice, decodes under a grammar of calls. The gateway reads the calls back from the
output text (contracts/tool_calls.py) and answers as OpenAI does: `tool_calls` on the
message and finish_reason "tool_calls"; streamed, each call's id and name first, then
its arguments as a delta.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.chat import FUNCTION_CHOICE, NO_TOOLS, ChatTools, ToolCall, canonical_json
from contracts.tool_calls import CallReader, ParsedCall
from coordinator.errors import InvalidRequest
from coordinator.jobs.answers import call_id
from coordinator.gateway.schemas import ChatCompletionRequest, ChatMessageIn


def chat_tools(body: ChatCompletionRequest) -> ChatTools:
    """The request's tools and tool choice, checked against each other."""
    choice = body.tool_choice or "auto"
    named = None if isinstance(choice, str) else choice.function.name
    if not body.tools:
        if named is not None or choice == "required":
            raise InvalidRequest("tool_choice asks for a call, but the request offers no tools",
                                 param="tool_choice")
        return NO_TOOLS
    names = [tool.function.name for tool in body.tools]
    if len(set(names)) != len(names):
        raise InvalidRequest("tools holds two functions of one name", param="tools")
    if named is not None and named not in names:
        raise InvalidRequest(f"tool_choice names {named!r}, which is not among the tools",
                             param="tool_choice")
    definitions = tuple(canonical_json(tool.model_dump(exclude_none=True)) for tool in body.tools)
    return ChatTools(definitions, FUNCTION_CHOICE + named if named else str(choice),
                     True if body.parallel_tool_calls is None else body.parallel_tool_calls)


def message_tool_calls(message: ChatMessageIn) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(call.id, call.function.name, call.function.arguments)
                 for call in message.tool_calls or ())


def reads_calls(tools: ChatTools) -> bool:
    """Whether the answer's text is read for calls: tools offered, and not tool_choice none."""
    return bool(tools.definitions) and tools.choice != "none"


def call_json(job_id: str, index: int, call: ParsedCall) -> dict:
    return {"id": call_id(job_id, index), "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}


def call_deltas(job_id: str, index: int, call: ParsedCall) -> list[dict]:
    """A call as OpenAI streams it: id, type and name with empty arguments, then the arguments."""
    return [{"tool_calls": [{"index": index, "id": call_id(job_id, index), "type": "function",
                             "function": {"name": call.name, "arguments": ""}}]},
            {"tool_calls": [{"index": index, "function": {"arguments": call.arguments}}]}]


@dataclass
class StreamedCalls:
    """Separates a streamed answer's content from its calls, one piece of text at a time."""

    job_id: str
    reader: CallReader = field(default_factory=CallReader)
    sent: int = 0

    def feed(self, text: str) -> tuple[str, list[dict]]:
        """(content to send now, deltas of the calls that closed)."""
        return self.reader.feed(text), self._new_deltas()

    def finish(self) -> tuple[str, list[dict]]:
        return self.reader.finish(), self._new_deltas()

    def _new_deltas(self) -> list[dict]:
        deltas = []
        for index in range(self.sent, len(self.reader.calls)):
            deltas += call_deltas(self.job_id, index, self.reader.calls[index])
        self.sent = len(self.reader.calls)
        return deltas
