"""An MCP server over a fastrag store, for agents (the ``[mcp]`` extra: the official ``mcp`` SDK).

Tools:

* ``search(query, topk=6, filter=None, group=None)``: the best passages, each with its node id,
  document id, score, source path (under the ingested folder: ``doc.source_path``), page,
  metadata, a snippet, and the ``uri`` of its whole document; when nothing matches,
  ``no_hits`` says why and what to change.
* ``ask(question, group=None, filter=None)``: an answer with its sources, written by the LLM
  when one is configured (an OpenAI-compatible ``base_url`` and ``model``, as for ``fastrag
  ask``), else extractive -- the best-matching sentences, as ``fastrag ask`` gives without an
  LLM; ``answer_type`` (``"generated"`` or ``"extractive"``, then with a ``note``) says which.
* ``list_groups()``: the node groups (knowledge bases) with node counts and similarities.

Resources: ``fastrag://doc/{doc_id}``, each document's text.

Transports: stdio (the default: an agent starts ``fastrag mcp STORE`` itself) or streamable
HTTP at ``http://HOST:PORT/mcp`` (``http=True``), where ``api_key`` requires
``Authorization: Bearer <key>`` on every request (401 otherwise, compared in constant time).

The server is ``fastrag serve``'s engine without its HTTP API
(:class:`~fastrag.serve.engine.ServeEngine`): the store opened read-only and refreshed when
another process commits, one retriever per group, concurrent searches micro-batched into one
``Retriever.batch`` call, and the same chat pipeline for ``ask``. This module imports the SDK
only when a server is built, so ``fastrag mcp --help`` works without it.

Run it as ``fastrag mcp STORE [...]`` or ``python -m fastrag.integrations.mcp_server STORE``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import inspect
import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from fastrag._checks import check_int
from fastrag.cli.storearg import add_store_argument, take_store
from fastrag.errors import ConfigError, FastragError, missing_extra
from fastrag.plugins import load_plugins
from fastrag.retrieval.present import hit_record
from fastrag.serve.config import LOOPBACK_HOSTS, ServeConfig

__all__ = ["BearerAuth", "add_arguments", "build_server", "cmd_mcp", "main", "run_mcp"]

SNIPPET_CHARS = 500
MCP_PATH = "/mcp"


def _server_class() -> type:
    """``MCPServer`` (mcp 2) or ``FastMCP`` (mcp 1): the SDK's decorator-based server."""
    try:
        from mcp.server.mcpserver import MCPServer

        return MCPServer
    except ImportError:
        pass
    try:
        from mcp.server.fastmcp import FastMCP

        return FastMCP
    except ImportError:
        raise missing_extra("mcp", "mcp", "fastrag's MCP server") from None


def _error_classes() -> tuple[type, type]:
    """The SDK's anticipated-failure errors (their message reaches the client): a tool's, a
    missing resource's."""
    try:
        from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
    except ImportError:  # mcp 1
        from mcp.server.fastmcp.exceptions import ResourceError as ResourceNotFoundError
        from mcp.server.fastmcp.exceptions import ToolError
    return ToolError, ResourceNotFoundError


def _hit(hit: Any, source_path: Callable[[str], str]) -> dict[str, Any]:
    return hit_record(hit, source_path, snippet_chars=SNIPPET_CHARS, metadata=True, uri=True)


NO_LLM_HOW = (
    "start the MCP server with --base-url and --model (or FASTRAG_LLM_BASE_URL and "
    "FASTRAG_LLM_MODEL; build_server(..., llm=...))"
)


def _check_text(name: str, text: str) -> None:
    """A query or question: not blank, at most ``ServeConfig.max_query_chars`` characters."""
    if not text.strip():
        raise ConfigError(f"{name} is empty; write it in words (any language)")
    if len(text) > ServeConfig.max_query_chars:
        raise ConfigError(
            f"{name} has {len(text):,} characters, over the limit of "
            f"{ServeConfig.max_query_chars}; shorten it"
        )


def _ask_description(llm: bool) -> str:
    """The ``ask`` tool's description: what this server's answers are."""
    how = (
        'written by the server\'s LLM from the retrieved passages (`answer_type`: "generated")'
        if llm
        else "extractive: this server has no LLM configured, so `answer` lists the sentences of "
        "the best passages that share the most words with the question, each with its source "
        '(`answer_type`: "extractive", and a `note` saying so)'
    )
    return (
        f"Answer `question` from the knowledge base; the answer is {how}. Returns `answer` and "
        "`sources` (`id`, `doc_id`, `score`, `path`, `page`, `snippet`, `metadata`, `uri`). "
        "`filter` and `group` work as for `search`. When nothing matches, `answer` says why "
        "and `sources` is empty. Use `search` to see passages without an answer."
    )


class EngineSlot:
    """The server's :class:`~fastrag.serve.engine.ServeEngine`, made and started in a thread
    (:meth:`start_in_thread`, once the SDK has loaded) or given ready (:meth:`ready`); tools
    await it with :meth:`get`, so a startup error reaches every call (and stderr) instead of
    the process dying."""

    def __init__(self) -> None:
        self._future: Future = Future()

    @classmethod
    def ready(cls, engine: Any) -> EngineSlot:
        slot = cls()
        slot._future.set_result(engine)
        return slot

    def start_in_thread(self, make: Callable[[], Any]) -> None:
        """Make the engine with ``make()`` in a daemon thread."""

        def run() -> None:
            try:
                self._future.set_result(make())
            except BaseException as exc:
                print(f"fastrag mcp: cannot serve the store: {exc}", file=sys.stderr)
                self._future.set_exception(exc)

        threading.Thread(target=run, name="fastrag-mcp-engine", daemon=True).start()

    async def get(self) -> Any:
        """The started engine (waits while it starts); its startup error, raised again."""
        return await asyncio.wrap_future(self._future)

    def close(self) -> None:
        """Close the engine once it has started (a failed start has nothing to close)."""
        try:
            engine = self._future.result()
        except BaseException:
            return
        engine.close()


def _make_engine(target: Any, background_warmup: bool, **kw: Any) -> Any:
    from fastrag.serve.engine import ServeEngine  # lazy: the store opens after initialize

    engine = ServeEngine(target, **kw)
    with contextlib.redirect_stdout(sys.stderr):  # over stdio, stdout carries the protocol
        engine.start(background_warmup=background_warmup)
    return engine


def build_server(
    target: Any,
    *,
    group: str | None = None,
    similarity: Any = None,
    topk: int = ServeConfig.topk,
    llm: Any = None,
    mode: str = ServeConfig.mode,
    name: str = "fastrag",
    log_level: str = "warning",
    background_warmup: bool = False,
) -> tuple[Any, Any]:
    """The MCP server over ``target`` (a store path, a :class:`~fastrag.Document` or a
    :class:`~fastrag.RAGPipeline`) and its started engine: ``(server, engine)``; call
    ``engine.close()`` when done. ``similarity``: one name or ``GROUP=NAME`` pairs, as for
    ``fastrag serve``. ``llm`` (a fastrag LLM, e.g. ``fr.OpenAILike``) writes ``ask``'s answers
    (without one they are extractive).
    ``log_level``: the SDK's log level (its log goes to stderr). ``background_warmup``: the
    first queries (numba loading the kernels) run in a thread, not before this returns."""
    engine = _make_engine(
        target,
        background_warmup,
        group=group,
        similarity=similarity,
        topk=topk,
        llm=llm,
        mode=mode,
    )
    server = _server(EngineSlot.ready(engine), engine.topk, engine.can_chat, name, log_level)
    return server, engine


def _server(slot: EngineSlot, default_topk: int, can_chat: bool, name: str, log_level: str) -> Any:
    """The SDK server whose tools search ``slot``'s engine."""
    server_cls = _server_class()
    tool_error, not_found = _error_classes()

    @contextlib.contextmanager
    def told() -> Any:  # fastrag's errors name the value and the fix: the agent reads them
        try:
            yield
        except FastragError as exc:
            raise tool_error(str(exc)) from exc

    server = server_cls(
        name,
        log_level=log_level.upper(),
        instructions=(
            "Search a fastrag knowledge base: `search` finds passages (best first, with their "
            "source paths and scores), `ask` answers a question with sources ("
            + ("written by an LLM" if can_chat else "extractive: no LLM is configured")
            + "), `list_groups` shows the knowledge bases, the resource in a hit's `uri` gives "
            "its whole document."
        ),
    )

    @server.tool()
    async def search(
        query: str, topk: int = default_topk, filter: str | None = None, group: str | None = None
    ) -> dict[str, Any]:
        """Search the knowledge base for passages matching `query` (keywords or a question;
        any language). Returns `hits`, best first: `id`, `doc_id`, `score` (higher is better),
        `path` (the source file), `page`, `snippet`, `metadata`, and `uri`, the resource with
        the whole document. `filter` is a metadata condition in Spring AI syntax, e.g.
        "file_type == 'md'", "language == 'en' && page_label in ['1', '2']" or
        "file_name LIKE '%guide%'". `group` is a knowledge base from `list_groups` (default:
        the server's). When nothing matches, `no_hits` says why."""
        with told():
            from fastrag.serve.readiness import check_filter_text  # lazy: after initialize

            _check_text("query", query)
            check_filter_text(filter)
            engine = await slot.get()
            ret = await engine.aretriever(group)
            hits = (await engine.search(ret, [query], flt=filter, topk=topk, source="mcp"))[0]
            out: dict[str, Any] = {"hits": [_hit(h, engine.source_path) for h in hits]}
            if not hits:
                out["no_hits"] = (await engine.why_no_hits(ret, [query], filter))[0]
        return out

    @server.tool()
    async def list_groups() -> dict[str, Any]:
        """The knowledge bases (node groups) of the store: `name`, `parent`, `nodes` (how many
        passages), `similarity` (how it is searched) and `default` (searched when `search`
        names no group)."""
        with told():
            engine = await slot.get()
            return {"groups": engine.groups()}

    @server.tool(description=_ask_description(can_chat))
    async def ask(
        question: str, group: str | None = None, filter: str | None = None
    ) -> dict[str, Any]:
        with told():
            from fastrag.query.base import Query  # lazy: after initialize
            from fastrag.serve.extractive import (  # lazy: after initialize
                ANSWER_TYPE,
                EXTRACTIVE,
                GENERATED,
                aextractive_response,
                no_llm_note,
            )
            from fastrag.serve.readiness import check_filter_text  # lazy: after initialize

            _check_text("question", question)
            check_filter_text(filter)
            engine = await slot.get()
            if engine.can_chat:
                pipe = await engine.apipeline(group)
                ctx = {"filter": filter} if filter is not None else {}
                resp = await pipe.aquery(Query(question, context=ctx))
                label: dict[str, str] = {ANSWER_TYPE: GENERATED}
            else:
                ret = await engine.aretriever(group)
                resp = await aextractive_response(engine, ret, question, filter)
                label = {ANSWER_TYPE: EXTRACTIVE, "note": no_llm_note(NO_LLM_HOW)}
            if not resp.source_nodes:
                ret = await engine.aretriever(group)
                reason = (await engine.why_no_hits(ret, [question], filter))[0]
                return {
                    "answer": f"No passage in the knowledge base matches the question: {reason}.",
                    "sources": [],
                    **label,
                }
            return {
                "answer": await resp.aget_response(),
                "sources": [_hit(h, engine.source_path) for h in resp.source_nodes],
                **label,
            }

    @server.resource(
        "fastrag://doc/{doc_id}",
        name="document",
        mime_type="text/plain",
        description="A document of the store (a file, a PDF page, a record) by "
        "its id: the `doc_id` of a search hit",
    )
    async def document(doc_id: str) -> str:
        engine = await slot.get()
        if not engine.has_document(doc_id):
            raise not_found(
                f"no document {doc_id!r} in the store; the ids are the `doc_id` of search hits"
            )
        return engine.require_doc().group("root").node_by_id(doc_id).text

    return server


class BearerAuth:
    """ASGI wrapper: every HTTP request needs ``Authorization: Bearer <key>`` (compared in
    constant time); others get 401 with ``WWW-Authenticate: Bearer``. Lifespan events pass."""

    def __init__(self, app: Any, api_key: str) -> None:
        if not isinstance(api_key, str) or not api_key:
            raise ConfigError("api_key must be a non-empty string")
        self.app = app
        self._key = api_key.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self._authorized(scope):
            body = json.dumps(
                {
                    "error": "invalid_token",
                    "error_description": "missing or invalid API key: send the header "
                    "'Authorization: Bearer <key>'",
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b"Bearer"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: dict[str, Any]) -> bool:
        auth = next(
            (
                v.decode("latin-1")
                for k, v in scope.get("headers", ())
                if k.lower() == b"authorization"
            ),
            "",
        )
        scheme, _, token = auth.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self._key)


def http_app(server: Any, *, host: str = ServeConfig.host, api_key: str | None = None) -> Any:
    """The server's streamable-HTTP ASGI app (endpoint ``/mcp``), behind :class:`BearerAuth`
    when ``api_key`` is given."""
    factory = server.streamable_http_app
    kw = {"host": host} if "host" in inspect.signature(factory).parameters else {}
    app = factory(**kw)  # mcp 2 protects loopback hosts against DNS rebinding by host
    return BearerAuth(app, api_key) if api_key is not None else app


def run_mcp(
    store: Any,
    group: str | None = None,
    similarity: Any = None,
    http: bool = False,
    host: str = ServeConfig.host,
    port: int = ServeConfig.port,
    api_key: str | None = None,
    llm: Any = None,
    *,
    topk: int = ServeConfig.topk,
    mode: str = ServeConfig.mode,
    log_level: str = "warning",
) -> None:
    """Serve ``store`` (a store path, a Document or a RAGPipeline) over MCP until stopped:
    stdio by default, streamable HTTP at ``http://host:port/mcp`` with ``http=True``
    (``api_key``: bearer-token auth). ``llm`` writes the ``ask`` tool's answers (without one
    they are extractive)."""
    if api_key is not None and not http:
        raise ConfigError(
            "api_key applies to http=True only (stdio needs no key: the client "
            "starts the server itself)"
        )
    kw = {"group": group, "similarity": similarity, "topk": topk, "llm": llm, "mode": mode}
    if isinstance(store, (str, os.PathLike)):
        # the store opens in a thread while the SDK answers ``initialize`` (about 1 s sooner);
        # an error in it is every tool's answer, and is printed to stderr
        default_topk = check_int("topk", topk, min=1, note="the number of hits per query")
        slot = EngineSlot()
        server = _server(slot, default_topk, llm is not None, "fastrag", log_level)
        slot.start_in_thread(lambda: _make_engine(store, True, **kw))
    else:
        server, engine = build_server(store, log_level=log_level, background_warmup=True, **kw)
        slot = EngineSlot.ready(engine)
    try:
        if not http:
            server.run("stdio")
            return
        import uvicorn

        uvicorn.run(
            http_app(server, host=host, api_key=api_key), host=host, port=port, log_level=log_level
        )
    finally:
        slot.close()


# -- command line (`fastrag mcp` and `python -m fastrag.integrations.mcp_server`) ---------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``fastrag mcp``."""
    add_store_argument(p, help="a store built with fastrag ingest (opened read-only)")
    p.add_argument("--group", help="default node group (default: the last one built)")
    p.add_argument(
        "--similarity",
        help="one name (bm25, the default; bm25_chinese, hybrid, "
        "...) or GROUP=NAME pairs, comma-separated",
    )
    p.add_argument(
        "--topk",
        type=int,
        default=ServeConfig.topk,
        help=f"hits per search (default {ServeConfig.topk})",
    )
    p.add_argument(
        "--http",
        action="store_true",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    )
    p.add_argument(
        "--host",
        default=ServeConfig.host,
        help=f"interface for --http (default {ServeConfig.host}: this machine only)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=ServeConfig.port,
        help=f"port for --http (default {ServeConfig.port})",
    )
    p.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="with --http: require 'Authorization: Bearer <key>', the key read from "
        "this environment variable",
    )
    p.add_argument(
        "--mode",
        default=ServeConfig.mode,
        help="response mode of `ask` (compact, refine, tree_summarize, ...)",
    )
    p.add_argument(
        "--base-url",
        help="OpenAI-compatible LLM endpoint for the `ask` tool (or FASTRAG_LLM_BASE_URL; "
        "without one, `ask` answers extractively)",
    )
    p.add_argument(
        "--model",
        help="the LLM's model name (or FASTRAG_LLM_MODEL); its key is read from OPENAI_API_KEY",
    )
    p.add_argument(
        "--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"]
    )


def _llm(base_url: str | None, model: str | None) -> Any:
    from fastrag.llms.openai_like import OpenAILike  # lazy: httpx, only with an LLM

    base = base_url or os.environ.get("FASTRAG_LLM_BASE_URL")
    model = model or os.environ.get("FASTRAG_LLM_MODEL")
    if not base and not model:
        return None
    if not base or not model:
        raise ConfigError(
            "an LLM needs both a base URL and a model: --base-url/--model or "
            "FASTRAG_LLM_BASE_URL/FASTRAG_LLM_MODEL"
        )
    return OpenAILike(model=model, base_url=base, api_key=os.environ.get("OPENAI_API_KEY"))


def cmd_mcp(args: argparse.Namespace) -> int:
    """``fastrag mcp``: check the arguments, then serve until stopped."""
    from fastrag.documents.store import MANIFEST  # lazy: numpy and pyarrow

    load_plugins()  # $FASTRAG_PLUGINS (python -m fastrag.integrations.mcp_server)
    take_store(args, "mcp")
    if not os.path.isfile(os.path.join(args.store, MANIFEST)):
        raise ConfigError(
            f"{args.store} is not a fastrag store (no {MANIFEST}); create one "
            f"with `fastrag ingest FILES --store {args.store}`"
        )
    api_key = None
    if args.api_key_env is not None:
        if not args.http:
            raise ConfigError(
                "--api-key-env applies to --http only (over stdio the client "
                "starts the server itself)"
            )
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise ConfigError(
                f"--api-key-env {args.api_key_env}: that environment variable is not set or empty"
            )
    if args.http and args.host not in LOOPBACK_HOSTS and api_key is None:
        print(
            f"warning: listening on {args.host} without --api-key-env: anyone who can reach "
            "this port can search the store",
            file=sys.stderr,
        )
    run_mcp(
        args.store,
        group=args.group,
        similarity=args.similarity,
        http=args.http,
        host=args.host,
        port=args.port,
        api_key=api_key,
        llm=_llm(args.base_url, args.model),
        topk=args.topk,
        mode=args.mode,
        log_level=args.log_level,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fastrag.integrations.mcp_server",
        description="An MCP server over a fastrag store (stdio, or streamable HTTP).",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return cmd_mcp(args)
    except FastragError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
