"""Request bodies (pydantic, strict: unknown fields and wrong types are 400 errors naming the
field). Limits that are settings (query length, queries per request) are checked by the app.

``ChatCompletionRequest`` takes OpenAI's chat-completions fields; the ones fastrag cannot honour
(tools, logprobs, n > 1, ...) are known, so the error says "not supported" rather than
"unknown". fastrag's own additions: ``group`` (which knowledge base to answer from, see
``GET /v1/groups``) and ``filter`` (a metadata filter in Spring AI syntax).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AddTextsRequest",
    "ChatCompletionRequest",
    "ChatMessage",
    "RetrieveRequest",
    "UNSUPPORTED_CHAT_FIELDS",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RetrieveRequest(_Body):
    queries: Annotated[list[str], Field(min_length=1)]
    topk: Annotated[int, Field(ge=1, le=1000)] | None = None
    filter: str | None = None
    group: str | None = None
    similarity: str | None = None  # default: the group's (``fastrag serve --similarity``)


class AddTextsRequest(_Body):
    texts: Annotated[list[str], Field(min_length=1)]
    metadatas: list[dict[str, Any]] | None = None
    # accepted for symmetry with the chat's knowledge-base picker: documents always go to the
    # store's root, and every group is rebuilt from it
    group: str | None = None


class TextPart(_Body):
    type: Literal["text"]
    text: str


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class StreamOptions(_Body):
    include_usage: bool = False


# OpenAI fields fastrag accepts but cannot honour: a non-default value is a 400 naming it.
UNSUPPORTED_CHAT_FIELDS = (
    "tools",
    "tool_choice",
    "functions",
    "function_call",
    "parallel_tool_calls",
    "logprobs",
    "top_logprobs",
    "response_format",
    "audio",
    "modalities",
    "prediction",
    "logit_bias",
    "reasoning_effort",
    "web_search_options",
    "service_tier",
    "store",
    "metadata",
)


class ChatCompletionRequest(_Body):
    model: str | None = None  # OpenAI requires it; here it defaults to the server's name
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    n: Annotated[int, Field(ge=1, le=1)] | None = None
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    seed: int | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    user: str | None = None
    # fastrag's additions
    group: str | None = None
    filter: str | None = None
    similarity: str | None = None
    session_id: str | None = None  # default: ``user``; continues a conversation the server keeps
    # known OpenAI fields without support here (see UNSUPPORTED_CHAT_FIELDS)
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    parallel_tool_calls: Any = None
    logprobs: Any = None
    top_logprobs: Any = None
    response_format: Any = None
    audio: Any = None
    modalities: Any = None
    prediction: Any = None
    logit_bias: Any = None
    reasoning_effort: Any = None
    web_search_options: Any = None
    service_tier: Any = None
    store: Any = None
    metadata: Any = None

    def llm_options(self) -> dict[str, Any]:
        """The call options passed through to the LLM (only those given)."""
        out = {
            k: getattr(self, k)
            for k in (
                "temperature",
                "top_p",
                "stop",
                "seed",
                "presence_penalty",
                "frequency_penalty",
                "user",
            )
            if getattr(self, k) is not None
        }
        max_tokens = self.max_completion_tokens or self.max_tokens
        if max_tokens is not None:
            out["max_tokens"] = max_tokens
        return out
