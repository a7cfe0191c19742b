"""Usage: the one meter of LLM calls and tokens (query components, synthesizers, pipeline)."""

from __future__ import annotations

import fastrag as fr
from fastrag.llms import Completion, MockLLM, Usage
from fastrag.query import Usage as QueryUsage


def test_record_counts_one_call_per_completion():
    u = Usage()
    u.record(Completion("a", 7, 3))
    u.record(Completion("b", 5, 2))
    assert u.as_dict() == {"llm_calls": 2, "prompt_tokens": 12, "completion_tokens": 5}


def test_add_total_and_plus_merge_meters():
    a, b = Usage(1, 10, 2), Usage(2, 5, 4)
    c = a + b
    assert c == Usage(3, 15, 6)
    assert a == Usage(1, 10, 2) and b == Usage(2, 5, 4)  # + leaves its operands alone
    a.add(b)
    assert a == Usage(3, 15, 6)
    assert Usage.total([Usage(1, 1, 1), Usage(2, 2, 2), Usage()]) == Usage(3, 3, 3)
    assert Usage.total([]) == Usage()


def test_from_metadata_reads_a_response_and_defaults_to_zero():
    meta = {"llm_calls": 2, "prompt_tokens": 40, "completion_tokens": 9, "seconds": 0.1}
    assert Usage.from_metadata(meta) == Usage(2, 40, 9)
    assert Usage.from_metadata({}) == Usage()


def test_query_layer_reexports_the_one_meter():
    assert QueryUsage is Usage


def test_synthesizer_metadata_matches_the_calls_made():
    llm = MockLLM()
    syn = fr.get_response_synthesizer("refine", llm=llm)
    resp = syn.synthesize("what?", ["one chunk", "another chunk"])
    want = Usage.total(Usage(1, c.prompt_tokens, c.completion_tokens) for c in llm.calls)
    assert Usage.from_metadata(resp.metadata) == want
    assert want.llm_calls == len(llm.calls) >= 1
