"""Every server default comes from ``ServeConfig``: the ``fastrag serve`` and ``fastrag mcp``
flags, ``create_app``, ``serve``, ``ServeEngine``, ``ServeSettings``, ``MicroBatcher`` and the
MCP server."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest

pytest.importorskip("fastapi")

from fastrag.cli.main import build_parser  # noqa: E402
from fastrag.integrations import mcp_server  # noqa: E402
from fastrag.serve import ServeConfig, serve  # noqa: E402
from fastrag.serve.app import create_app  # noqa: E402
from fastrag.serve.batching import MicroBatcher  # noqa: E402
from fastrag.serve.engine import ServeEngine  # noqa: E402
from fastrag.serve.guard import ServeSettings  # noqa: E402
from fastrag.settings import DEFAULT_TOPK  # noqa: E402


def test_one_topk_default():
    assert DEFAULT_TOPK == 6 == ServeConfig.topk
    parser = build_parser()
    for argv in (["search", "S", "q"], ["ask", "S", "q"], ["serve", "S"], ["mcp", "S"]):
        assert parser.parse_args(argv).topk == DEFAULT_TOPK, argv


def test_serve_flags_are_the_config_fields(capsys):
    """One flag per field, built from it: name, default, and the field's help in --help."""
    parser = build_parser()
    args = vars(parser.parse_args(["serve", "S"]))
    fields = {f.name: f for f in dataclasses.fields(ServeConfig)}
    assert set(fields) - {"store"} <= set(args)
    for name in set(fields) - {"store"}:
        assert args[name] == getattr(ServeConfig, name), name
    flipped = vars(parser.parse_args(["serve", "S", "--no-batching", "--compress-history"]))
    assert flipped["batching"] is False and flipped["compress_history"] is True
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split()).lower()
    for name, f in fields.items():
        flag = "store" if name == "store" else "--" + name.replace("_", "-")
        if f.default is True:
            flag = "--no-" + name.replace("_", "-")
        assert flag in shown, flag
        assert " ".join(f.metadata["help"].split())[:30].lower() in shown, name
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "S", "--log-level", "loud"])  # the field's choices


def test_mcp_flags_default_to_the_config():
    args = vars(build_parser().parse_args(["mcp", "S"]))
    for name in ("host", "port", "topk", "mode"):
        assert args[name] == getattr(ServeConfig, name), name


@pytest.mark.parametrize(
    "fn",
    [
        create_app,
        serve,
        ServeEngine.__init__,
        ServeSettings.__init__,
        MicroBatcher.__init__,
        mcp_server.build_server,
        mcp_server.run_mcp,
    ],
    ids=lambda f: f.__qualname__,
)
def test_keyword_defaults_are_the_config(fn):
    params = inspect.signature(fn).parameters
    own = {"log_level"} if fn.__module__ == mcp_server.__name__ else set()  # MCP: "warning"
    checked = [
        name
        for name, p in params.items()
        if hasattr(ServeConfig, name)
        and name not in own
        and p.default is not inspect.Parameter.empty
    ]
    assert checked, fn
    for name in checked:
        assert params[name].default == getattr(ServeConfig, name), (fn, name)


def test_config_is_frozen_and_round_trips_as_json():
    config = ServeConfig(store="/s", topk=3, llm_base_url="http://x", llm_model="m")
    with pytest.raises(AttributeError):
        config.topk = 4  # type: ignore[misc]
    again = ServeConfig.from_mapping(json.loads(config.to_json()))
    assert again == config
    assert config.replace(workers=2).workers == 2 and config.workers == 1
    assert ServeSettings(**config.limits).max_body_bytes == config.max_body_bytes
