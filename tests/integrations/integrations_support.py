"""Helpers shared by the tests of tests/integrations (a module of its own, so test folders can be
collected together)."""

from __future__ import annotations

FILES = {
    "en/denmark.md": "Copenhagen is the capital of Denmark and its largest city.",
    "en/aarhus.md": "Aarhus is the second largest city of Denmark.",
    "en/france.md": "Paris is the capital of France.",
    "spring/boot.md": "Spring Boot applications start with the main method of a "
    "SpringApplication class.",
    "ml/bm25.md": "BM25 ranks documents by term frequency and inverse document frequency.",
}


GENERATED = ["capital city of Denmark", "Danish capital", "largest city Denmark"]


def model_reply(messages: list[dict]) -> str:
    """The test LLM: three search queries when asked for them, else a fixed answer."""
    prompt = messages[-1]["content"]
    if "search queries" in prompt:
        return "\n".join(GENERATED)
    return "Copenhagen (from the context)" if "Copenhagen" in prompt else "I don't know"
