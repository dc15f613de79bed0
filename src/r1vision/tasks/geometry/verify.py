"""``answers_match``: is a model's final answer the dataset's answer?

Both texts go through :func:`~r1vision.tasks.geometry.extract.extract_final_answer`; full-width forms
(``（2，3）``, ``1：2``) become ASCII. A reference with several boxes (mm_math's multi-part questions) is
answered part by part: the model's last boxes of the same count are compared in order, each under the rules
below (rule ``parts``), or its single box as a comma list. Boxes a model writes together
(``\\boxed{4}, \\boxed{5}``) are one multi-valued answer, so a hedge does not pass on its last value. Then
the rules run cheapest first and the first one that agrees wins:

1. ``choice``: two option letters (``B``, ``(B)``, ``Option B``) must be equal; with ``choices``, a letter
   on one side is replaced by its option value and the other rules compare values;
2. ``exact``: equal strings after notation clean-up (degree marks, units including Chinese ones such as
   ``厘米``, radicals, spacing); word answers (``\\text{Isosceles}``) equal up to case;
3. ``numeric``: equal values within ``rel_tol``, or equal after rounding to the precision the other side
   was written with; ×100/÷100 when either side is a percentage;
4. ``multi``: the same multiset of values for lists (``,``, ``or``, ``and``, ``或``) and ``\\pm`` expansions;
5. ``interval``: the same bracket types and endpoints (``2 < x < 12`` is the interval ``(2,12)``);
6. ``identity``: expressions in the same one or two variables that agree at two irrational probe points;
7. ``math_verify``: HuggingFace math-verify's ``verify(parse(gold), parse(pred))``, asked only when the
   rules cannot tell the answers apart (different variables, two plain numbers or intervals that differ,
   expressions that differ at a probe point are False without it: faster, and math-verify would
   otherwise drop what it cannot parse and match ``3m`` or ``\\frac12 ab`` with ``3`` or ``\\frac12``).

A single-letter unit counts only when upright (``3\\text{ m}``); ``3m`` is three times m. A choice label
with a value (``(A) 12``) is compared by its value with an unlabelled answer, by its letter with a labelled
one. Rules 1-6 are bounded by construction (see :mod:`.normalize`) and run in-process. Rule 7 runs sympy,
which can run for hours on hostile input, so it runs in a killable worker subprocess with a hard
deadline (see :mod:`.isolation`); that works in any thread and in DataLoader workers. Nothing here
raises on model text: any failure means "no match".
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from typing import Any

from r1vision.tasks.geometry.extract import answer_parts, choice_letter, extract_final_answer, split_choice
from r1vision.tasks.geometry.isolation import WorkerUnavailable, get_pool
from r1vision.tasks.geometry.normalize import (
    MAX_LEN,
    Normalized,
    decimal_places,
    evaluate,
    expand_pm,
    free_letters,
    normalize,
    same_words,
    split_top_level,
    to_ascii_forms,
)

logger = logging.getLogger(__name__)

# math-verify's deadline per call. Real answers take milliseconds there (the rules decide most pairs
# in-process, see _surely_different); 1.5 s keeps a pathological answer under 2 s with a warm worker.
DEFAULT_TIMEOUT_S = 1.5
DEFAULT_REL_TOL = 1e-6
# Math-verify's input cap: sympy's cost grows quickly with length and nobody boxes a 2,000-char answer.
_MAX_MATH_VERIFY_LEN = 1000
_WARNED = False


def _close(p: float, g: float, p_text: str, g_text: str, rel_tol: float) -> bool:
    """Equal within ``rel_tol``, or within half a unit of the last written decimal place.

    The rounding allowance applies to a reference written as a decimal (``3.46``) against a prediction at
    least as precise (``3.4641`` or ``2\\sqrt{3}``), and to a prediction with at least two decimals
    against an exact reference. Integers get no allowance, so ``12`` never matches ``12.4``.
    """
    diff = abs(p - g)
    if diff <= max(rel_tol * max(abs(p), abs(g)), 1e-12):
        return True
    dg, dp = decimal_places(g_text), decimal_places(p_text)
    places = None
    if dg and (dp is None or dp >= dg):
        places = dg
    elif dp is not None and dp >= 2 and dg is None:
        places = dp
    return places is not None and diff <= 0.5 * 10.0**-places * (1 + 1e-9)


def _numeric(gn: Normalized, pn: Normalized, rel_tol: float) -> bool:
    g, p = evaluate(gn.text), evaluate(pn.text)
    if g is None or p is None:
        return False
    if _close(p, g, pn.text, gn.text, rel_tol):
        return True
    # "25\%" vs "0.25": the side without a percent sign may give the fraction, never the reverse,
    # so "200" does not match "2\%"
    tol = max(rel_tol, 1e-9)
    if gn.percent and not pn.percent:
        return math.isclose(p * 100.0, g, rel_tol=tol, abs_tol=1e-12)
    if pn.percent and not gn.percent:
        return math.isclose(g * 100.0, p, rel_tol=tol, abs_tol=1e-12)
    return False


_OR_AND = re.compile(r"\s+(?:or|and)\s+|\\text\{\s*(?:or|and|或|和)\s*\}|\s*(?:或者|或|和)\s*")


def _values(answer: str) -> list[tuple[float, str]] | None:
    items: list[tuple[float, str]] = []
    for part in split_top_level(_OR_AND.sub(",", answer)):
        for item in expand_pm(part):
            norm = normalize(item)
            value = evaluate(norm.text) if norm else None
            if value is None:
                return None
            items.append((value, norm.text))
    return items


def _multi(gold: str, pred: str, rel_tol: float) -> bool:
    gv, pv = _values(gold), _values(pred)
    if not gv or not pv or len(gv) != len(pv) or len(gv) < 2:
        return False
    unused = list(pv)
    for g, g_text in gv:
        hit = next((i for i, (p, p_text) in enumerate(unused) if _close(p, g, p_text, g_text, rel_tol)), None)
        if hit is None:
            return False
        unused.pop(hit)
    return True


_INTERVAL = re.compile(r"([(\[])([^,()\[\]]+),([^,()\[\]]+)([)\]])")
_UNION = re.compile(r"\\cup|∪|\bU\b")


_LESS = r"(<=?|\\leq?|\\leqslant|\\lt|≤)"
_GREATER = r"(>=?|\\geq?|\\geqslant|\\gt|≥)"
_END = r"(-?[^<>=≤≥,]+?)"
_VAR = r"([A-Za-z]|\\[A-Za-z]+)"
_MEMBER = re.compile(r"(?:[A-Za-z]|\\[A-Za-z]+)(?:\\in|∈)(?=[(\[])")
_INEQUALITIES = (
    (re.compile(rf"{_END}{_LESS}{_VAR}{_LESS}{_END}"), "between"),
    (re.compile(rf"{_END}{_GREATER}{_VAR}{_GREATER}{_END}"), "between_desc"),
    (re.compile(rf"{_VAR}{_GREATER}{_END}"), "above"),
    (re.compile(rf"{_VAR}{_LESS}{_END}"), "below"),
    (re.compile(rf"{_END}{_LESS}{_VAR}"), "above_rev"),
    (re.compile(rf"{_END}{_GREATER}{_VAR}"), "below_rev"),
)


def _inequality_as_interval(text: str) -> str | None:
    """``2 < x < 12`` -> ``(2,12)``, ``x \\ge 3`` -> ``[3,\\infty)``; ``None`` for anything else."""
    text = text.replace("\\left", "").replace("\\right", "").replace(" ", "")
    if len(text) > MAX_LEN:
        return None
    member = _MEMBER.match(text)  # "x \\in (2,12)" is the interval itself
    if member:
        return text[member.end() :]
    for pattern, kind in _INEQUALITIES:
        m = pattern.fullmatch(text)
        if not m:
            continue
        g = m.groups()

        def bracket(op: str, left: bool) -> str:
            closed = "=" in op or "\\le" in op or "\\ge" in op or op in ("≤", "≥")
            return ("[" if closed else "(") if left else ("]" if closed else ")")

        if kind == "between":
            return f"{bracket(g[1], True)}{g[0]},{g[4]}{bracket(g[3], False)}"
        if kind == "between_desc":  # 12 > x > 2
            return f"{bracket(g[3], True)}{g[4]},{g[0]}{bracket(g[1], False)}"
        if kind == "above":
            return f"{bracket(g[1], True)}{g[2]},\\infty)"
        if kind == "below":
            return f"(-\\infty,{g[2]}{bracket(g[1], False)}"
        if kind == "above_rev":  # 3 < x
            return f"{bracket(g[1], True)}{g[0]},\\infty)"
        return f"(-\\infty,{g[0]}{bracket(g[1], False)}"  # 3 > x
    return None


def _intervals(answer: str) -> list[tuple[str, float, float, str]] | None:
    answer = _inequality_as_interval(answer) or answer
    text = answer.replace("\\left", "").replace("\\right", "").replace(" ", "")
    out = []
    for piece in _UNION.split(text):
        match = _INTERVAL.fullmatch(piece.strip())
        if not match:
            return None
        ends = []
        for end in (match.group(2), match.group(3)):
            bare = end.replace("\\infty", "inf").replace("∞", "inf").lstrip("+")
            if bare in ("inf", "-inf"):
                ends.append(float(bare))
            else:
                norm = normalize(end)
                value = evaluate(norm.text) if norm else None
                if value is None:
                    return None
                ends.append(value)
        out.append((match.group(1), ends[0], ends[1], match.group(4)))
    return out


def _interval(gold: str, pred: str, rel_tol: float) -> bool:
    gi, pi = _intervals(gold), _intervals(pred)
    if not gi or not pi or len(gi) != len(pi):
        return False
    for (gl, g0, g1, gr), (pl, p0, p1, pr) in zip(gi, pi, strict=True):
        if gl != pl or gr != pr:
            return False
        for g, p in ((g0, p0), (g1, p1)):
            if math.isinf(g) or math.isinf(p):
                if g != p:
                    return False
            elif not math.isclose(g, p, rel_tol=max(rel_tol, 1e-9), abs_tol=1e-12):
                return False
    return True


def _math_verify(gold: str, pred: str, timeout: float, isolate: bool) -> bool:
    global _WARNED
    if len(gold) > _MAX_MATH_VERIFY_LEN or len(pred) > _MAX_MATH_VERIFY_LEN:
        return False
    gold_box, pred_box = f"\\boxed{{{gold}}}", f"\\boxed{{{pred}}}"
    if not isolate:  # benchmarks and trusted input only: no deadline at all
        from math_verify import parse, verify

        g, p = parse(gold_box, parsing_timeout=None), parse(pred_box, parsing_timeout=None)
        return bool(g) and bool(p) and bool(verify(g, p, timeout_seconds=None))
    try:
        return get_pool().verify(gold_box, pred_box, timeout)
    except (WorkerUnavailable, OSError) as err:
        if not _WARNED:
            logger.warning("math-verify check disabled: %s", err)
            _WARNED = True
        return False


_THOUSANDS = re.compile(r"\s*-?\d{1,3}(?:,\d{3})+(?:\.\d+)?\s*")


def _ungroup(answer: str) -> str:
    """``1,000`` -> ``1000``: a comma before exactly three digits is a thousands separator, not a list."""
    return answer.replace(",", "") if _THOUSANDS.fullmatch(answer) else answer


def _value_rules(gold: str, pred: str, rel_tol: float) -> str | None:
    gold, pred = _ungroup(gold), _ungroup(pred)
    gn, pn = normalize(gold), normalize(pred)
    if gn is None or pn is None:
        return None
    if gn.text and gn.text.replace(" ", "") == pn.text.replace(" ", "") and gn.percent == pn.percent:
        return "exact"
    if same_words(gn.text, pn.text):
        return "exact"
    if _numeric(gn, pn, rel_tol):
        return "numeric"
    if _multi(gold, pred, rel_tol):
        return "multi"
    if _interval(gold, pred, rel_tol):
        return "interval"
    if _probe_compare(gn, pn, rel_tol):
        return "identity"
    return None


# Points at which two expressions in the same variables are compared: irrational, away from 0 and 1, and one
# negative, so that sqrt(x^2) is not taken for x (an expression undefined there is left to math-verify).
_PROBES = (
    {"v": 0.7390851, "w": 1.4142136},
    {"v": 2.7182818, "w": 0.5772157},
    {"v": -1.6180340, "w": -0.4142136},
)


def _letters(answer: str) -> frozenset[str] | None:
    """Variables of an answer, item by item (``x=2, y=3`` has none: each item's value is its right side)."""
    letters: set[str] = set()
    for item in split_top_level(answer):
        norm = normalize(item)
        if norm is None:
            return None
        letters |= free_letters(norm.text)
    return frozenset(letters)


def _surely_different(gold: str, pred: str, rel_tol: float) -> bool:
    """True when the in-house rules can tell that math-verify would not find the answers equal.

    Used after the rules failed to match, to skip the subprocess round trip for wrong answers (most
    answers early in training) and to keep math-verify's leniency from matching ``3m`` with ``3`` or
    ``\\frac12 ab`` with ``\\frac12`` (it drops what it cannot parse):

    - different variables (letters outside commands and units) on the two sides;
    - both sides plain numbers, value lists or intervals, which the rules above compare completely;
    - the same variables, and the two expressions differ at a probe point.
    """
    gold, pred = _ungroup(gold), _ungroup(pred)
    gn, pn = normalize(gold), normalize(pred)
    if gn is None or pn is None:
        return False
    g_letters, p_letters = _letters(gold), _letters(pred)
    if g_letters is None or p_letters is None:
        return False
    if g_letters != p_letters:
        return True
    gi, pi = _intervals(gold), _intervals(pred)
    if gi and pi:
        return True  # the interval rule compared them completely
    if gi or pi:  # an interval against one plain number; "(2,3)" against "2, 3" may be a point
        values = _values(pred if gi else gold)
        return values is not None and len(values) == 1
    if not g_letters:
        return _values(gold) is not None and _values(pred) is not None
    return _probe_compare(gn, pn, rel_tol) is False


def _probe_compare(gn: Normalized, pn: Normalized, rel_tol: float) -> bool | None:
    """Two expressions in the same one or two variables: equal at every probe point (True), different at one
    (False), or not evaluable here (None). Distinct rational/radical expressions agreeing at two irrational
    points is a coincidence of probability zero (Schwartz-Zippel)."""
    names = sorted(free_letters(gn.text))
    if not names or len(names) > 2 or free_letters(pn.text) != set(names):
        return None
    for probe in _PROBES:
        bound = dict(zip(names, probe.values(), strict=False))
        g, p = evaluate(gn.text, bound), evaluate(pn.text, bound)
        if g is None or p is None:
            return None
        if not math.isclose(g, p, rel_tol=max(rel_tol, 1e-6), abs_tol=1e-9):
            return False
    return True


def _resolve_choices(gold: str, pred: str, choices: Sequence[str] | None) -> tuple[str, str, bool]:
    """Replace an option letter by its option value (when ``choices`` lists it); report whether one was."""
    if not choices:
        return gold, pred, False
    options = [str(c) for c in choices]

    def value_of(text: str) -> str:
        letter = choice_letter(text)
        index = ord(letter) - ord("A") if letter else -1
        return options[index] if 0 <= index < len(options) else text

    new_gold, new_pred = value_of(gold), value_of(pred)
    return new_gold, new_pred, (new_gold, new_pred) != (gold, pred)


def explain_match(
    prediction: str,
    solution: str,
    choices: Sequence[str] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    rel_tol: float = DEFAULT_REL_TOL,
    use_math_verify: bool = True,
    isolate: bool = True,
) -> str | None:
    """Name of the first rule under which ``prediction`` matches ``solution``, or ``None``.

    Args:
        prediction: model text (reasoning and all) or a bare answer.
        solution: the dataset's ``solution`` (``\\boxed{20}``) or ``answer`` (``20``).
        choices: option values in letter order (index 0 = A), when the row is multiple choice.
        timeout: seconds math-verify may take for this call before the worker is killed.
        rel_tol: relative tolerance of the numeric rules.
        use_math_verify: run rule 6 at all.
        isolate: run math-verify in the worker subprocess (``False``: in-process, no deadline; only for
            benchmarking trusted input).
    """
    try:
        pred = extract_final_answer(prediction)
        gold = extract_final_answer(solution, reference=True)
        if not pred or not gold:
            return None
        args = (choices, timeout, rel_tol, use_math_verify, isolate)
        gold_parts = answer_parts(solution, reference=True)
        if len(gold_parts) >= 2:  # a multi-part question: every part is compared, in order
            pred_parts = answer_parts(prediction, count=len(gold_parts))
            if len(pred_parts) == len(gold_parts):
                each = [_explain_answers(g, p, *args) for g, p in zip(gold_parts, pred_parts, strict=True)]
                return "parts" if all(each) else None
            gold = ", ".join(gold_parts)  # the model boxed one list ("3, 5"): compared as a list
        else:
            pred_parts = answer_parts(prediction)
            if len(pred_parts) >= 2:  # several boxed values answer together, not only the last
                pred = ", ".join(pred_parts)
        return _explain_answers(gold, pred, *args)
    except Exception:  # noqa: BLE001 - model text must never crash a reward
        logger.debug("answers_match failed", exc_info=True)
        return None


def _explain_answers(
    gold: str,
    pred: str,
    choices: Sequence[str] | None,
    timeout: float,
    rel_tol: float,
    use_math_verify: bool,
    isolate: bool,
) -> str | None:
    """:func:`explain_match` on two extracted answers."""
    # no real final answer is this long; longer ones are refused before any rule scans them
    if not pred or not gold or len(gold) > MAX_LEN * 4 or len(pred) > MAX_LEN * 4:
        return None
    gold, pred = to_ascii_forms(gold), to_ascii_forms(pred)
    (gold_letter, gold_value), (pred_letter, pred_value) = split_choice(gold), split_choice(pred)
    if gold_letter is not None and pred_letter is not None:
        return "choice" if gold_letter == pred_letter else None  # nothing may overrule two letters
    # "(A) 12" against "12": the labelled side's value is compared
    labelled = gold_value is not None or pred_value is not None
    gold, pred = gold_value or gold, pred_value or pred
    gold, pred, mapped = _resolve_choices(gold, pred, choices)
    rule = _value_rules(gold, pred, rel_tol)
    if (
        rule is None
        and use_math_verify
        and not _surely_different(gold, pred, rel_tol)
        and _math_verify(gold, pred, timeout, isolate)
    ):
        rule = "math_verify"
    return "choice" if rule is not None and (mapped or labelled) else rule


def answers_match(
    prediction: str, solution: str, choices: Sequence[str] | None = None, **options: Any
) -> bool:
    """True when the final answer of ``prediction`` equals that of ``solution`` under any rule.

    Wrong, empty or unparsable answers give False, never an exception; the call returns within about
    ``timeout`` seconds (plus a one-off worker start of about a second per process). The arguments and the
    keyword-only ``options`` (``timeout``, ``rel_tol``, ``use_math_verify``, ``isolate``) are those of
    :func:`explain_match`.
    """
    return explain_match(prediction, solution, choices, **options) is not None


def answers_match_batch(
    predictions: Sequence[str],
    solutions: Sequence[str],
    choices: Sequence[Sequence[str] | None] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    rel_tol: float = DEFAULT_REL_TOL,
) -> list[bool]:
    """:func:`answers_match` over pairs, with math-verify calls spread over the worker pool.

    The work happens in the worker subprocesses, so threads here only wait: a batch of ``n`` items that all
    need math-verify takes about ``n / pool size`` times one call, and at most that many timeouts.
    """
    if len(predictions) != len(solutions):
        raise ValueError(f"{len(predictions)} predictions but {len(solutions)} solutions")
    options = list(choices) if choices is not None else [None] * len(predictions)

    def one(i: int) -> bool:
        return answers_match(predictions[i], solutions[i], options[i], timeout=timeout, rel_tol=rel_tol)

    workers = min(get_pool().size, len(predictions))
    if workers <= 1:
        return [one(i) for i in range(len(predictions))]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="answers_match") as executor:
        return list(executor.map(one, range(len(predictions))))
