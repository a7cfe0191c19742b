"""Fixtures of the analysis tests: the CMRC 2018 dev set as (contexts, questions, gold)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def cmrc():
    """848 unique paragraphs, 3,219 questions, and each question's paragraph index."""
    from fastrag.datasets import load_cmrc2018_dev

    squad = load_cmrc2018_dev()
    contexts: list[str] = []
    index: dict[str, int] = {}
    questions: list[str] = []
    gold: list[int] = []
    for article in squad["data"]:
        for para in article["paragraphs"]:
            ctx = para["context"]
            if ctx not in index:
                index[ctx] = len(contexts)
                contexts.append(ctx)
            for qa in para["qas"]:
                questions.append(qa["question"])
                gold.append(index[ctx])
    return contexts, questions, gold
