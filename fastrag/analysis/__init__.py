"""Text analysis: BM25 analyzers (English, Chinese with jieba, dictionary-free CJK), corpus
tokenization into token-id arrays, and token counting (tiktoken).

Which Chinese analyzer? ``bm25_chinese`` (jieba's dictionary, segmented by fastrag's exact
numba port of jieba) gives the best recall and a compact index (fast scoring);
``bm25_cjk`` (uni+bigrams) needs no dictionary, tokenizes faster still and handles text
jieba's dictionary does not know, at ~3.6x the postings (slower scoring).

Modules, each importing only those above it: ``base`` (Analyzer, CallableAnalyzer),
``stopwords``, ``spans`` (code points and token spans), ``segment`` (numba jieba port),
``wordseg`` (Japanese/Thai/Lao/Khmer/Myanmar words), ``english`` / ``chinese`` / ``cjk`` /
``mixed`` (the analyzers), ``registry`` (names -> analyzers), ``corpus`` (tokenize_corpus),
``tokens`` (tiktoken counting; independent).
"""

from fastrag.analysis.base import Analyzer, CallableAnalyzer
from fastrag.analysis.chinese import ChineseAnalyzer
from fastrag.analysis.cjk import CJKAnalyzer
from fastrag.analysis.corpus import TokenizedCorpus, encode_queries, tokenize_corpus
from fastrag.analysis.english import EnglishAnalyzer
from fastrag.analysis.mixed import MixedAnalyzer
from fastrag.analysis.registry import get_analyzer, list_analyzers, register_analyzer
from fastrag.analysis.stopwords import load_stopwords

__all__ = [
    "Analyzer",
    "CJKAnalyzer",
    "CallableAnalyzer",
    "ChineseAnalyzer",
    "EnglishAnalyzer",
    "MixedAnalyzer",
    "TokenizedCorpus",
    "encode_queries",
    "get_analyzer",
    "list_analyzers",
    "load_stopwords",
    "register_analyzer",
    "tokenize_corpus",
]
