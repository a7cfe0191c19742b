"""The shared argument checks: one place, one wording.

Every check returns the value (normalised: ``int``, ``float``, ``bool``, ``list``) or raises
:class:`~fastrag.errors.ConfigError` worded as::

    <name> must be <requirement>, got <value>[; <fix>]

e.g. ``topk must be None (keep all) or an int >= 1, got 0``. ``<value>`` is the value's
``repr`` (cut at 80 characters), after its type name when the type is wrong (``got str
'128'``); a container that should be a list is named by its type only. ``note`` adds
a parenthesis after the requirement (what the value means: ``(seconds)``), ``fix`` a clause
that names the way out (``use 0 to disable retries``). ``none`` lets ``None`` through:
``True`` words it ``None or ...``, a string ``None (<what None means>) or ...``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np

from fastrag.errors import ConfigError

__all__ = [
    "check_bool",
    "check_choice",
    "check_int",
    "check_list",
    "check_number",
    "check_str",
    "check_str_list",
    "check_topk",
]

_SHOW = 80


def _show(value: Any, type_ok: bool = True) -> str:
    """``repr(value)`` cut to 80 characters, after its type name when the type is wrong."""
    text = repr(value)
    text = text if len(text) <= _SHOW else text[: _SHOW - 3] + "..."
    return text if type_ok or value is None else f"{type(value).__name__} {text}"


def _fail(
    name: str,
    requirement: str,
    got: str,
    *,
    none: bool | str = False,
    note: str = "",
    fix: str = "",
) -> ConfigError:
    if none is True:
        requirement = f"None or {requirement}"
    elif none:
        requirement = f"None ({none}) or {requirement}"
    if note:
        requirement = f"{requirement} ({note})"
    tail = f"; {fix}" if fix else ""
    return ConfigError(f"{name} must be {requirement}, got {got}{tail}")


def _range(kind: str, low: Any, high: Any, above: Any = None) -> str:
    if low is not None and high is not None:
        return f"{kind} in [{low}, {high}]"
    if above is not None:
        return f"{kind} > {above}"
    if low is not None:
        return f"{kind} >= {low}"
    if high is not None:
        return f"{kind} <= {high}"
    return kind


def check_int(
    name: str,
    value: Any,
    *,
    min: int | None = None,
    max: int | None = None,
    none: bool | str = False,
    note: str = "",
    fix: str = "",
) -> Any:
    """``value`` as an ``int`` (numpy integers too, never bool) in ``[min, max]``."""
    if value is None and none:
        return None
    type_ok = isinstance(value, Integral) and not isinstance(value, bool)
    if not type_ok or (min is not None and value < min) or (max is not None and value > max):
        raise _fail(
            name, _range("an int", min, max), _show(value, type_ok), none=none, note=note, fix=fix
        )
    return int(value)


def check_number(
    name: str,
    value: Any,
    *,
    min: float | None = None,
    max: float | None = None,
    above: float | None = None,
    finite: bool = True,
    none: bool | str = False,
    note: str = "",
    fix: str = "",
) -> Any:
    """``value`` as a ``float`` (any real number, never bool or NaN; finite unless
    ``finite=False``) with ``min <= value <= max`` and ``value > above``."""
    if value is None and none:
        return None
    type_ok = isinstance(value, Real) and not isinstance(value, bool)
    ok = type_ok and not math.isnan(value)
    if ok:
        v = float(value)
        ok = (
            (not finite or math.isfinite(v))
            and (min is None or v >= min)
            and (max is None or v <= max)
            and (above is None or v > above)
        )
    if not ok:
        kind = "a finite number" if finite and (min is None or max is None) else "a number"
        raise _fail(
            name,
            _range(kind, min, max, above),
            _show(value, type_ok),
            none=none,
            note=note,
            fix=fix,
        )
    return float(value)


def check_bool(name: str, value: Any, *, fix: str = "") -> bool:
    """``value`` as a ``bool`` (``True``/``False`` or a numpy bool; not 0/1)."""
    if isinstance(value, bool) or (
        type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")
    ):
        return bool(value)
    raise _fail(name, "True or False", _show(value, False), fix=fix)


def _alternatives(choices: Sequence[Any]) -> str:
    shown = ["None" if c is None else repr(c) for c in choices]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


def check_choice(
    name: str, value: Any, choices: Iterable[Any], *, note: str = "", fix: str = ""
) -> Any:
    """``value`` if it is one of ``choices`` (compared with ``==``; unhashable values fail)."""
    choices = list(choices)
    try:  # True == 1, but True is not the choice 1
        ok = any(
            value is c or (bool(value == c) and isinstance(value, bool) == isinstance(c, bool))
            for c in choices
        )
    except (TypeError, ValueError):  # e.g. an array compared with a str
        ok = False
    if not ok:
        raise _fail(name, _alternatives(choices), _show(value), note=note, fix=fix)
    return value


def check_str(
    name: str,
    value: Any,
    *,
    empty: bool = False,
    strip: bool = False,
    none: bool | str = False,
    note: str = "",
    fix: str = "",
) -> Any:
    """``value`` if it is a ``str``, non-empty unless ``empty=True`` (with ``strip=True`` a
    str of only whitespace counts as empty)."""
    if value is None and none:
        return None
    type_ok = isinstance(value, str)
    if not type_ok or (not empty and not (value.strip() if strip else value)):
        raise _fail(
            name,
            "a str" if empty else "a non-empty str",
            _show(value, type_ok),
            none=none,
            note=note,
            fix=fix,
        )
    return value


def check_list(name: str, value: Any, what: str, *, fix: str = "") -> Sequence[Any]:
    """``value`` if it is a sequence other than ``str``/``bytes`` (a list of ``what``)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise _fail(name, f"a list of {what}", type(value).__name__, fix=fix)
    return value


def check_str_list(name: str, value: Any, *, empty: bool = True, fix: str = "") -> list[str]:
    """``value`` as a ``list`` of ``str`` (any iterable but a single str; non-empty unless
    ``empty=True``); a bad item is named by its index: ``<name>[i] must be a str, got ...``."""
    if isinstance(value, str):
        raise _fail(
            name,
            "a list of str",
            f"a single str {_show(value)}",
            fix=fix or f"wrap it in a list: [{name}]",
        )
    try:
        out = list(value)
    except TypeError:
        raise _fail(name, "a list of str", type(value).__name__, fix=fix) from None
    if not empty and not out:
        raise _fail(name, "a non-empty list of str", "[]", fix=fix)
    for i, item in enumerate(out):
        if not isinstance(item, str):
            raise _fail(f"{name}[{i}]", "a str", _show(item, False), fix=fix)
    return out


def check_topk(topk: Any) -> int:
    """``topk``, the number of hits per query: an ``int >= 1``."""
    return check_int("topk", topk, min=1, note="the number of hits per query")


def readonly(a: np.ndarray) -> np.ndarray:
    """A read-only plain-ndarray view of ``a`` (no copy; an ``np.memmap`` too). Kernels get
    their inputs read-only whatever the caller passed (stored arrays are read-only, fresh ones
    are not): numba compiles a kernel once per kind of argument, so one kind means one
    compile."""
    v = np.asarray(a).view()
    v.flags.writeable = False
    return v
