"""stemmer="minimal": English plurals to the singular (Harman's S-stemmer), nothing more."""

from __future__ import annotations

from fastrag.analysis import get_analyzer
from fastrag.analysis.english import PluralStemmer


def test_minimal_stemmer_turns_plurals_into_the_singular_only():
    words = ["files", "queries", "cookies", "images", "toes", "class", "status", "is", "as"]
    words += ["containers", "executable", "compressed", "eies", "aies", "trees"]
    want = ["file", "query", "cooky", "image", "toe", "class", "status", "is", "as"]
    want += ["container", "executable", "compressed", "eie", "aie", "tree"]
    assert PluralStemmer().stemWords(words) == want
    mixed = get_analyzer("bm25", stemmer="minimal")
    assert mixed("Containers and images, executable файлы") == [
        "container",
        "image",
        "executable",
        "файл",  # Cyrillic keeps its Russian stemmer
    ]
    assert mixed.identity() != get_analyzer("bm25").identity()
    assert get_analyzer("bm25_english", stemmer="minimal")("the queries") == ["query"]
