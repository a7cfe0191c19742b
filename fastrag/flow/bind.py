"""``bind``: fix a stage's arguments, LazyLLM's way (``stage | bind(query=ppl.input)``).

A bound argument is a value or a placeholder of a pipeline's input (:class:`Input`, what
``ppl.input`` returns); the pipeline resolves placeholders for each item of the batch it runs.
:class:`package` is LazyLLM's tuple of several outputs (a plain ``parallel``'s result), which
the next stage receives as positional arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fastrag.errors import ConfigError

__all__ = ["Bind", "Input", "bind", "package"]


class package(tuple):  # noqa: N801 - LazyLLM's name
    """Several values passed on as positional arguments of the next stage."""


_NOTHING = object()


class Input:
    """The input of one pipeline (``ppl.input``), optionally one item or attribute of it
    (``ppl.input["query"]``, ``ppl.input.text``); resolved when the pipeline runs."""

    def __init__(self, owner: Any, path: tuple[tuple[str, Any], ...] = ()) -> None:
        self.owner = owner
        self.path = path

    def __getitem__(self, key: Any) -> Input:
        return Input(self.owner, (*self.path, ("item", key)))

    def __getattr__(self, name: str) -> Input:
        if name.startswith("_"):
            raise AttributeError(name)
        return Input(self.owner, (*self.path, ("attr", name)))

    def resolve(self, value: Any) -> Any:
        """This placeholder's value, given the owner pipeline's input ``value``."""
        for kind, key in self.path:
            value = value[key] if kind == "item" else getattr(value, key)
        return value

    def __repr__(self) -> str:
        tail = "".join(f"[{k!r}]" if kind == "item" else f".{k}" for kind, k in self.path)
        # the owner's kind and id, not its repr: the owner's stages hold this placeholder
        return f"<input of {type(self.owner).__name__.lower()} {id(self.owner):#x}{tail}>"


class Bind:
    """A callable with some arguments fixed: ``bind(f, *args, **kw)`` or ``f | bind(...)``.

    Positional bound arguments replace the call's positional ones (as in LazyLLM); keyword
    ones are added to them. An :class:`Input` among them is the pipeline's input for the
    item being processed, so ``reranker | bind(query=ppl.input)`` reranks each item's nodes
    for that item's query.
    """

    def __init__(self, f: Any = _NOTHING, *args: Any, **kw: Any) -> None:
        self.f = f
        self.args = args
        self.kwargs = kw

    def __ror__(self, f: Any) -> Bind:
        if not callable(f):
            raise ConfigError(
                f"`x | bind(...)` needs a callable stage on the left, got {type(f).__name__}"
            )
        if self.f is not _NOTHING:
            self.args = (self.f, *self.args)
        self.f = f
        return self

    def placeholders(self) -> list[Input]:
        """Every :class:`Input` among the bound arguments."""
        values = [*self.args, *self.kwargs.values()]
        return [v for v in values if isinstance(v, Input)]

    def arguments(
        self, args: tuple, kw: Mapping[str, Any], inputs: Mapping[int, Any]
    ) -> tuple[tuple, dict[str, Any]]:
        """The call's ``(args, kwargs)`` for one item; ``inputs`` maps a pipeline's id to
        its input for this item."""
        taken = sorted(set(kw) & set(self.kwargs))
        if taken:
            raise ConfigError(f"keyword argument(s) {taken} are already bound by bind(...)")

        def value(v: Any) -> Any:
            if not isinstance(v, Input):
                return v
            if id(v.owner) not in inputs:
                raise ConfigError(
                    f"{v!r} is not known here: bind a pipeline's input only in a stage of "
                    f"that pipeline (or of a flow inside it), and run it through the pipeline"
                )
            return v.resolve(inputs[id(v.owner)])

        call_args = tuple(value(a) for a in self.args) if self.args else args
        return call_args, {**{k: value(v) for k, v in self.kwargs.items()}, **kw}

    def __call__(self, *args: Any, **kw: Any) -> Any:
        if self.f is _NOTHING:
            raise ConfigError("bind(...) has no function; write `stage | bind(...)`")
        call_args, call_kw = self.arguments(args, kw, {})
        return self.f(*call_args, **call_kw)

    def __repr__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        f = "?" if self.f is _NOTHING else repr(self.f)
        return f"{f} | bind({', '.join(parts)})"


def bind(f: Callable | Any = _NOTHING, *args: Any, **kw: Any) -> Bind:
    """``bind(f, *args, **kw)``, or ``f | bind(*args, **kw)``: ``f`` with arguments fixed
    (values or ``ppl.input`` placeholders)."""
    return Bind(f, *args, **kw)
