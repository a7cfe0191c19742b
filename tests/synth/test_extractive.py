"""Issue 42, goal 6: extractive answers (``fastrag ask`` without an LLM) are whole sentences,
never fragments such as ``- tar.`` (a hard-wrapped Markdown line) or ``- 3%；`` (a decimal
point and a semicolon taken for sentence ends), also where a chunk's edge cuts a sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

import fastrag as fr
from fastrag.analysis import get_analyzer
from fastrag.cli.main import main
from fastrag.datasets import load_cmrc2018_dev
from fastrag.synth.extractive import (
    EXTRACTIVE_HEADING,
    clean_sentence,
    extractive_answer,
    sentence_spans,
)

ROOT = Path(__file__).resolve().parents[2]
CORS = ROOT / "bench" / "data" / "fastapi_docs" / "corpus" / "en" / "tutorial" / "cors.md"
# CMRC 2018 dev (CC BY-SA 4.0): the paragraph on Modern Terminals, whose "55.3%；" the old
# splitter cut into "55." and "3%；"
SHARES = (
    "2001年初，九龙仓向汇丰购进4.5%股份，使其股权增至55.3%；而据年报其他主要股东为招商局国际"
    "（22.1%）及太古公司（17.62%）。"
)

MARKDOWN = """# tar

Create an archive of many files with GNU
tar. Compress it with gzip, e.g. tar -czf out.tar.gz dir/. Dr. Smith uses v1.2.3 of it!

- Extract with
  `tar -xf out.tar`.
- List it

```sh
tar -tf out.tar. Not a sentence.
```

| opt | meaning |
|-----|---------|
| -z | gzip |

增长率为3%；同比下降。这是第二句！第三句
在这里换行。
"""


def _sentences(text: str) -> list[str]:
    return [clean_sentence(text[a:b]) for a, b in sentence_spans(text)]


def test_sentence_spans_keep_wrapped_lines_abbreviations_and_numbers_whole():
    assert _sentences(MARKDOWN) == [
        "Create an archive of many files with GNU tar.",
        "Compress it with gzip, e.g. tar -czf out.tar.gz dir/.",
        "Dr. Smith uses v1.2.3 of it!",
        "Extract with `tar -xf out.tar`.",
        "List it",
        "增长率为3%；同比下降。",  # a semicolon does not end a sentence
        "这是第二句！",
        "第三句在这里换行。",  # a wrap between two CJK characters joins without a space
    ]  # headings, code blocks and tables are not sentences


def test_hard_wrapped_page_answers_with_the_whole_sentence(tmp_path, capsys):
    kb = tmp_path / "kb" / "en"
    kb.mkdir(parents=True)
    (kb / "tar.md").write_text(MARKDOWN, encoding="utf-8")
    st = tmp_path / "st"
    assert main(["ingest", str(kb.parent), "--store", str(st), "-q"]) == 0
    capsys.readouterr()
    assert main(["ask", str(st), "archive files with GNU tar"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [
        EXTRACTIVE_HEADING,
        "- Create an archive of many files with GNU tar.  [en/tar.md]",
    ]
    assert "- tar.  [en/tar.md]" not in lines


@pytest.mark.parametrize("group", ["windows", "sentences"])
def test_chinese_sentences_are_whole_across_chunk_edges(group):
    data = load_cmrc2018_dev()
    contexts = [p["context"] for a in data["data"] for p in a["paragraphs"]]
    text = next(c for c in contexts if SHARES in c)
    doc = fr.Document.from_texts([text])
    if group == "windows":  # a plain function: no offsets, chunks cut mid-sentence
        doc.create_node_group(
            group, transform=lambda t: [t[i : i + 80] for i in range(0, len(t), 80)]
        )
    else:
        doc.create_node_group(group, transform=fr.SentenceSplitter, chunk_size=32, chunk_overlap=0)
    query = "2001年初九龙仓向汇丰购进股份后股权增至多少？"
    hits = fr.Retriever(doc, group, "bm25_chinese", topk=3)(query)
    assert SHARES not in hits[0].text  # the best chunk holds part of the sentence only
    got = [s for s, _ in extractive_answer(query, hits, get_analyzer("bm25_chinese"), 5)]
    assert got[0] == SHARES
    whole = set(_sentences(text))
    assert all(s in whole and s.endswith("。") for s in got), got
    assert "3%；" not in got and "55." not in got


def test_english_page_from_bench_data():
    doc = fr.Document(CORS)
    doc.create_node_group("c", transform=fr.SentenceSplitter, chunk_size=48, chunk_overlap=8)
    query = "how to allow any origin"
    hits = fr.Retriever(doc, "c", "bm25", topk=3)(query)
    got = [s for s, _ in extractive_answer(query, hits, get_analyzer("bm25"), 3)]
    assert got == [
        "You can use `['*']` to allow any origin.",
        "Create a list of allowed origins (as strings).",
        "So, for everything to work correctly, it's better to specify explicitly the allowed "
        "origins.",
    ]
    page = " ".join(CORS.read_text(encoding="utf-8").split())
    assert all(s in page for s in got)
