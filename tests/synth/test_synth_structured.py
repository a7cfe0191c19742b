"""structured_answer_filtering: unsatisfied steps are dropped and change nothing."""

from __future__ import annotations

import json

import pytest

from fastrag.llms import MockLLM
from fastrag.llms.base import schema_instruction
from fastrag.synth import REFINE_SCHEMA, default_prompts, get_response_synthesizer

Q = "What is the river called?"
RELEVANT = "Local records (RIVER-FACT) say the river is called Amber."
IRRELEVANT = ["Bananas are yellow.", "The bridge opened in 1901.", "Cats sleep a lot."]


def judge(prompt: str) -> str:
    """A fake LLM: satisfied only when the relevant fact is in the prompt's context."""
    if "RIVER-FACT" in prompt:
        obj = {"answer": "The river is called Amber.", "query_satisfied": True}
        return f"Sure! Here it is:\n```json\n{json.dumps(obj)}\n```"
    return json.dumps({"answer": "I cannot tell from this context.", "query_satisfied": False})


@pytest.mark.parametrize("mode", ["refine", "compact"])
@pytest.mark.parametrize("json_mode", [False, True])
def test_irrelevant_chunks_change_nothing(mode, json_mode):
    # small window so compact needs several steps too
    kw = {"structured_answer_filtering": True, "context_window": 200, "num_output": 10}
    only = MockLLM(judge, supports_json_mode=json_mode)
    alone = get_response_synthesizer(mode, llm=only, **kw).synthesize(Q, [RELEVANT])
    assert str(alone) == "The river is called Amber."

    llm = MockLLM(judge, supports_json_mode=json_mode)
    nodes = [IRRELEVANT[0], RELEVANT, *IRRELEVANT[1:]] * 3
    resp = get_response_synthesizer(mode, llm=llm, **kw).synthesize(Q, nodes)
    assert str(resp) == str(alone)
    assert len(llm.calls) > 1
    assert resp.metadata["filtered"] >= 1
    if json_mode:  # the backend's JSON mode: no schema text appended by fastrag
        assert all(c.method == "structured" for c in llm.calls)
        assert not any(schema_instruction(REFINE_SCHEMA) in p for p in llm.prompts)
    else:  # text mode: the schema is asked for in the prompt and parsed from the text
        assert all(p.endswith(schema_instruction(REFINE_SCHEMA)) for p in llm.prompts)

    # without filtering the irrelevant chunks do change the answer
    plain = MockLLM(judge)
    unfiltered = get_response_synthesizer(mode, llm=plain, context_window=200, num_output=10)
    assert str(unfiltered.synthesize(Q, nodes)) != str(alone)


def test_first_step_unsatisfied_then_relevant_uses_qa_then_refine_prompts():
    llm = MockLLM(judge)
    syn = get_response_synthesizer("refine", llm=llm, structured_answer_filtering=True)
    resp = syn.synthesize(Q, [IRRELEVANT[0], RELEVANT, IRRELEVANT[1]])
    en = default_prompts("en")
    tail = schema_instruction(REFINE_SCHEMA)
    # the unsatisfied first answer is dropped, so the next chunk is asked as a fresh question
    assert llm.prompts[0] == en["text_qa"].format(context_str=IRRELEVANT[0], query_str=Q) + tail
    assert llm.prompts[1] == en["text_qa"].format(context_str=RELEVANT, query_str=Q) + tail
    assert (
        llm.prompts[2]
        == en["refine"].format(
            query_str=Q, existing_answer="The river is called Amber.", context_msg=IRRELEVANT[1]
        )
        + tail
    )
    assert str(resp) == "The river is called Amber."
    assert resp.metadata["filtered"] == 2


def test_unparseable_answers_are_ignored_and_counted():
    answers = iter(['{"answer": "Amber", "query_satisfied": "yes"}', "no json here at all"])
    llm = MockLLM(lambda p: next(answers))
    resp = get_response_synthesizer("refine", llm=llm, structured_answer_filtering=True).synthesize(
        Q, ["a", "b"]
    )
    assert str(resp) == "Amber"  # "yes" coerced to true; the garbage step changed nothing
    assert resp.metadata["structured_errors"] == 1
    assert resp.metadata["llm_calls"] == 2
