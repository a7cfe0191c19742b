"""LazyLLM's dataflow: ``pipeline`` (stages in turn) and ``parallel`` (branches on one input),
run batch-first.

Stages are added as LazyLLM adds them: as arguments (``pipeline(f, g)``, ``pipeline(a=f)``)
or by assignment inside a ``with`` block (``with pipeline() as ppl: ppl.name = stage``, nested
``with parallel().sum as ppl.prl: ppl.prl.r1 = ...``). A flow named at a module's top level is
also bound to that name there (``prl.r1 = ...`` after ``with parallel() as ppl.prl:``), as in
LazyLLM.

Underneath, a flow always runs a batch: ``ppl(x)`` is a batch of one and ``ppl.batch(xs)``
runs every stage once over all of ``xs`` (:func:`fastrag.flow.stages.run_stage`: one retriever
call, one rerank call, all LLM requests at once). Items stay aligned: stage ``k`` of item ``i``
sees only what item ``i`` produced. ``ppl([a, b])`` is one input that is a list, as in LazyLLM.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from fastrag._async import run_sync
from fastrag.errors import ConfigError
from fastrag.flow.bind import Bind, Input, package
from fastrag.flow.stages import run_stage
from fastrag.llms.base import BaseLLM

__all__ = ["FlowBase", "Parallel", "Pipeline", "parallel", "pipeline"]


def _as_calls(items: Sequence[Any], kws: Sequence[dict] | None) -> list[tuple[tuple, dict]]:
    """Each item as a call: a :class:`package` spreads into positional arguments."""
    return [
        (tuple(x) if isinstance(x, package) else (x,), dict(kws[i]) if kws else {})
        for i, x in enumerate(items)
    ]


def _check_stage(name: str | None, stage: Any) -> Any:
    if isinstance(stage, type):
        stage = stage()
    if not callable(stage) and not isinstance(stage, BaseLLM):  # an LLM: its prompt -> text
        label = f"stage {name!r}" if name else "a stage"
        raise ConfigError(
            f"{label} must be callable (a function, a fastrag Retriever/Reranker/LLM, a flow), "
            f"got {type(stage).__name__} {stage!r:.60}"
        )
    return stage


# LazyLLM flow arguments that would otherwise be taken for stage names
_LAZYLLM_OPTIONS = {"post_action", "auto_capture", "save_result", "multiprocessing", "_scatter"}


class FlowBase:
    """Stages (named or not) and how they are added; subclasses say how they run."""

    def __init__(self, *stages: Any, **named: Any) -> None:
        object.__setattr__(self, "_stages", [])
        object.__setattr__(self, "_names", [])
        object.__setattr__(self, "_capturing", True)
        object.__setattr__(self, "_frame", None)
        options = sorted(set(named) & _LAZYLLM_OPTIONS)
        if options:
            raise ConfigError(
                f"LazyLLM's flow option(s) {options} are not supported by fastrag's flows; "
                f"add the step as a last stage instead of post_action, name stages with "
                f"`ppl.name = stage`, and see docs/guide/dataflow.md for what runs concurrently"
            )
        if len(stages) == 1 and isinstance(stages[0], (list, tuple)):
            stages = tuple(stages[0])
        if stages and named:
            raise ConfigError(
                "give the stages either positionally or by name, not both "
                "(pipeline(f, g) or pipeline(a=f, b=g))"
            )
        for s in stages:
            self._add(None, s)
        for k, s in named.items():
            self._add(k, s)
        object.__setattr__(self, "_capturing", False)

    # -- building -----------------------------------------------------------------------------
    def _add(self, name: str | None, stage: Any) -> None:
        stage = _check_stage(name, stage)
        if name is not None:
            if name in self._names:
                raise ConfigError(f"a stage is already named {name!r} in this {self._kind()}")
            if hasattr(type(self), name):
                raise ConfigError(
                    f"{name!r} is an attribute of {type(self).__name__}; name the stage otherwise"
                )
        self._stages.append(stage)
        self._names.append(name)
        frame = self._frame
        if isinstance(stage, FlowBase) and name and frame is not None:
            if frame.f_locals is frame.f_globals and name not in frame.f_globals:
                frame.f_globals[name] = stage  # LazyLLM: `prl.r1 = ...` after `as ppl.prl`

    def __enter__(self) -> FlowBase:
        if self._stages:
            raise ConfigError(
                f"this {self._kind()} already has stages; `with {self._kind()}() as x:` "
                f"starts from an empty one"
            )
        object.__setattr__(self, "_capturing", True)
        object.__setattr__(self, "_frame", sys._getframe(1))
        return self

    def __exit__(self, *exc: object) -> bool:
        object.__setattr__(self, "_capturing", False)
        object.__setattr__(self, "_frame", None)
        return False

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        elif self._capturing:
            self._add(name, value)
        else:
            raise ConfigError(
                f"stage {name!r} set outside the flow's `with` block; add stages inside "
                f"`with {self._kind()}() as x:` (x.{name} = ...) or as arguments"
            )

    def __getattr__(self, name: str) -> Any:
        names = self.__dict__.get("_names", ())
        if name in names:
            return self._stages[names.index(name)]
        raise AttributeError(f"{type(self).__name__} has no stage or attribute {name!r}")

    def __len__(self) -> int:
        return len(self._stages)

    @property
    def stages(self) -> dict[str, Any]:
        """The stages in order, by name (unnamed ones as ``"#<position>"``)."""
        pairs = zip(self._names, self._stages, strict=True)
        return {n or f"#{i}": s for i, (n, s) in enumerate(pairs)}

    def _kind(self) -> str:
        return type(self).__name__.lower()

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.stages.items())
        return f"{self._kind()}({inner})"

    # -- running ------------------------------------------------------------------------------
    async def _run(
        self, items: list[Any], kws: list[dict] | None, inputs: list[dict[int, Any]]
    ) -> list[Any]:
        raise NotImplementedError

    async def _run_stage(
        self, stage: Any, items: list[Any], kws: list[dict] | None, inputs: list[dict[int, Any]]
    ) -> list[Any]:
        """Stage ``stage`` over ``items``; ``inputs[i]`` maps each enclosing pipeline to its
        input for item ``i`` (what ``ppl.input`` placeholders resolve to)."""
        if isinstance(stage, FlowBase):
            return await stage._run(items, kws, inputs)
        calls = _as_calls(items, kws)
        if isinstance(stage, Bind):
            calls = [stage.arguments(a, kw, inputs[i]) for i, (a, kw) in enumerate(calls)]
            target = stage.f
            if isinstance(target, FlowBase):
                return await target._run(
                    [a[0] if len(a) == 1 else package(a) for a, _ in calls],
                    [kw for _, kw in calls],
                    inputs,
                )
            return await run_stage(target, calls)
        return await run_stage(stage, calls)

    async def abatch(self, inputs: Sequence[Any], **kw: Any) -> list[Any]:
        """Run every input through the flow, each stage once over the whole batch;
        ``kw`` go to the first stage of every item."""
        if isinstance(inputs, (str, bytes, Mapping)) or not isinstance(inputs, Sequence):
            raise ConfigError(
                f"batch() takes a list of inputs, got {type(inputs).__name__}; "
                f"for one input call the flow: ppl(x)"
            )
        items = list(inputs)
        kws = [dict(kw) for _ in items] if kw else None
        return await self._run(items, kws, [{} for _ in items])

    def batch(self, inputs: Sequence[Any], **kw: Any) -> list[Any]:
        """Sync :meth:`abatch`: ``[flow(x) for x in inputs]`` with each stage run once."""
        return run_sync(self.abatch(inputs, **kw))

    async def acall(self, *args: Any, **kw: Any) -> Any:
        """Async ``flow(*args)``."""
        if not args:
            raise ConfigError(f"call the {self._kind()} with its input: ppl(query)")
        value = args[0] if len(args) == 1 else package(args)
        return (await self.abatch([value], **kw))[0]

    def __call__(self, *args: Any, **kw: Any) -> Any:
        """Run one input (several positional arguments travel as one :class:`package`)."""
        return run_sync(self.acall(*args, **kw))


class Pipeline(FlowBase):
    """Stages in turn: each stage's output is the next one's input; ``ppl.input`` stands for
    the pipeline's own input in a ``bind(...)``."""

    @property
    def input(self) -> Input:
        """Placeholder of this pipeline's input (``stage | bind(query=ppl.input)``)."""
        return Input(self)

    async def _run(
        self, items: list[Any], kws: list[dict] | None, inputs: list[dict[int, Any]]
    ) -> list[Any]:
        inputs = [{**scope, id(self): x} for scope, x in zip(inputs, items, strict=True)]
        out = items
        for k, stage in enumerate(self._stages):
            out = await self._run_stage(stage, out, kws if k == 0 else None, inputs)
        return out


_POST = ("sum", "tuple", "list", "dict", "join")


class Parallel(FlowBase):
    """Branches on the same input, run concurrently; the result of each item is a
    :class:`package` of the branches' outputs (the next stage gets them as positional
    arguments), or, after ``.sum`` / ``.astuple`` / ``.aslist`` / ``.asdict`` / ``.join(s)``,
    their sum (lists concatenate, strings join), a tuple, a list, a dict by branch name, or
    the outputs joined by ``s``. ``parallel.sequential(...)`` runs the branches in turn."""

    def __init__(self, *stages: Any, _concurrent: bool = True, **named: Any) -> None:
        object.__setattr__(self, "_post", None)
        object.__setattr__(self, "_sep", "")
        object.__setattr__(self, "_concurrent", bool(_concurrent))
        super().__init__(*stages, **named)

    @classmethod
    def sequential(cls, *stages: Any, **named: Any) -> Parallel:
        """A parallel whose branches run one after another (LazyLLM's ``parallel.sequential``)."""
        return cls(*stages, _concurrent=False, **named)

    def _set_post(self, kind: str, sep: str = "") -> Parallel:
        if self._post is not None:
            raise ConfigError(f"this parallel already combines its outputs with .{self._post}")
        object.__setattr__(self, "_post", kind)
        object.__setattr__(self, "_sep", sep)
        return self

    @property
    def sum(self) -> Parallel:
        """Add the branches' outputs (lists concatenate, strings join)."""
        return self._set_post("sum")

    @property
    def astuple(self) -> Parallel:
        return self._set_post("tuple")

    @property
    def aslist(self) -> Parallel:
        return self._set_post("list")

    @property
    def asdict(self) -> Parallel:
        return self._set_post("dict")

    def join(self, sep: str = "") -> Parallel:
        """Join the branches' outputs (as str) with ``sep``."""
        if not isinstance(sep, str):
            raise ConfigError(f"join() takes a separator str, got {type(sep).__name__}")
        return self._set_post("join", sep)

    def _combine(self, outs: tuple) -> Any:
        kind = self._post
        if kind is None:
            return package(outs)
        if kind == "tuple":
            return tuple(outs)
        if kind == "list":
            return list(outs)
        if kind == "dict":
            if any(n is None for n in self._names):
                raise ConfigError("parallel().asdict needs every branch named (prl.name = ...)")
            return dict(zip(self._names, outs, strict=True))
        if kind == "join":
            return self._sep.join(str(o) for o in outs)
        if not outs:
            return package()
        if isinstance(outs[0], str):
            return "".join(str(o) for o in outs)
        try:
            return sum(outs, type(outs[0])())
        except TypeError as exc:
            raise ConfigError(
                f"parallel().sum cannot add the branches' outputs "
                f"({', '.join(type(o).__name__ for o in outs)}): {exc}"
            ) from None

    async def _run(
        self, items: list[Any], kws: list[dict] | None, inputs: list[dict[int, Any]]
    ) -> list[Any]:
        if self._concurrent:
            per_branch = await asyncio.gather(
                *(self._run_stage(s, items, kws, inputs) for s in self._stages)
            )
        else:
            per_branch = [await self._run_stage(s, items, kws, inputs) for s in self._stages]
        return [self._combine(tuple(b[i] for b in per_branch)) for i in range(len(items))]


pipeline = Pipeline
parallel = Parallel
