"""LazyLLM's dataflow, batch-first: ``pipeline``, ``parallel`` (``.sum``, ``.sequential``, ...)
and ``bind`` with ``ppl.input``.

Modules: ``bind`` (bind, the ``ppl.input`` placeholder, ``package``), ``stages`` (one stage
over a batch: retrievers, rerankers and LLMs batched, other callables mapped), ``flows``
(Pipeline, Parallel: building with ``with`` blocks, running a batch). ``fastrag.pipeline(...)``
and ``fastrag.parallel(...)`` are these classes; see docs/guide/dataflow.md.
"""

from fastrag.flow.bind import Bind, Input, bind, package
from fastrag.flow.flows import FlowBase, Parallel, Pipeline, parallel, pipeline
from fastrag.flow.stages import run_stage

__all__ = [
    "Bind",
    "FlowBase",
    "Input",
    "Parallel",
    "Pipeline",
    "bind",
    "package",
    "parallel",
    "pipeline",
    "run_stage",
]
