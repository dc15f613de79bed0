"""Normalising answer strings and evaluating them numerically without sympy.

Everything here is bounded by construction, which is why it runs in-process without a timeout:
inputs longer than :data:`MAX_LEN` are refused, the parser is a recursive-descent parser with a depth
cap, arithmetic is done in floats (``9^{9^{9^9}}`` overflows to ``None`` instead of building a huge
integer), and the regular expressions have no nested quantifiers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MAX_LEN = 300
_MAX_DEPTH = 40

_DEGREE = re.compile(
    r"\^\s*\{?\s*\\circ\s*\}?|\^\s*\{?\s*\\text\{\s*circ\s*\}\s*\}?|\\text\{\s*circ\s*\}|\\circ|\\degree|°"
    r"|\^\s*\{?\s*o\s*\}?$|\s*degrees?\b|\s*deg\b|\s*度"
)
# Full-width forms (U+FF01..U+FF5E) as mm_math's Chinese solutions write them: "（2，3）", "1：2", "５".
# An explicit table rather than NFKC, which would also turn x² into x2.
_FULLWIDTH = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)} | {
    0x3000: " ",  # ideographic space
    0x3001: ",",  # 、
    0x3002: ".",  # 。
}
# Chinese length/area/volume units as a trailing word: 5厘米, 12平方厘米, 3米.
_CN_UNITS = re.compile(
    r"\s*(?:平方|立方)?(?:厘米|毫米|分米|千米|公里|公分|米)(?:\s*\^\s*\{?\s*[23]\s*\}?|[²³])?\s*$"
)
_PERCENT = re.compile(r"\\%|%|\s*percent\b")
_SPACING = re.compile(r"\\[,;:! ]|\\quad|\\qquad|~|\\displaystyle|\\left|\\right")
_RADICAL = re.compile(r"\\text\{\s*radical\s*\}|\bradical\b|√")
_TEXT_WRAP = re.compile(r"\\(?:text|mathrm|textbf|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
# Units are removed only where they cannot be a variable. By the typesetting convention (SI brochure,
# ISO 80000-2) a unit is upright and a variable italic: `3\text{ m}` is three metres, `3m` or `3 m` is
# three times m. So a single-letter unit counts only when upright (\text, \mathrm, \mbox); a unit word of
# two or more letters (`cm`, `units`, `feet`) counts either way, since no geometry answer is a product of
# variables spelling a unit name.
_UNIT_WORDS = (
    r"units?|cm|mm|km|ft|feet|foot|in|inches|inch|yd|yards?|meters?|metres?|centimeters?|centimetres?|"
    r"millimeters?|millimetres?|kilometers?|kilometres?|dm|decimeters?|decimetres?|miles?|mi"
)
_POWER = r"(?:\s*\^\s*\{?\s*[23]\s*\}?|[²³])?"
_UPRIGHT_UNIT = re.compile(
    r"\s*\\(?:text|mathrm|textrm|mbox|rm)\s*\{\s*(?:(?:square|sq\.?|cubic)\s*)?(?:"
    + _UNIT_WORDS
    + r"|m)"
    + _POWER
    + r"\s*\}"
    + _POWER
    + r"\s*$",
    re.IGNORECASE,
)
_UNITS = re.compile(
    r"\s*(?:square|sq\.?|cubic)?\s*(?<![A-Za-z\\])(?:" + _UNIT_WORDS + r")" + _POWER + r"\s*$",
    re.IGNORECASE,
)
_FRAC_SHORT = re.compile(r"\\[dt]?frac\s*(\d)\s*(\d)")
_FRAC_NAME = re.compile(r"\\[dt]frac")
_MIXED = re.compile(r"^(-?)(\d+)\s*\\frac\{(\d+)\}\{(\d+)\}$")


@dataclass(frozen=True)
class Normalized:
    """An answer string after notation clean-up, with the notations that were stripped."""

    text: str
    percent: bool = False
    degrees: bool = False


def to_ascii_forms(text: str) -> str:
    """Full-width punctuation, letters and digits as their ASCII forms (``（2，3）`` -> ``(2,3)``)."""
    return text.translate(_FULLWIDTH)


_WORDS = re.compile(r"[A-Za-z][a-z]{2,}(?:[ -][A-Za-z]?[a-z]+)*")


def same_words(a: str, b: str) -> bool:
    """Two normalised answers that are words (``isosceles``, ``Right triangle``), equal up to case. A word has
    three or more letters, lower case after the first, so ``AB`` (a segment) and ``ab`` (a product) stay
    apart."""
    return bool(_WORDS.fullmatch(a) and _WORDS.fullmatch(b)) and a.casefold() == b.casefold()


def normalize(answer: str) -> Normalized | None:
    """Canonical spelling of one answer: degree marks, percent signs, units, spacing and radicals removed.

    ``\\text{radical}3``, ``√3`` and ``sqrt(3)`` all become ``\\sqrt{3}``; ``\\dfrac``/``\\tfrac``
    become ``\\frac``; ``\\frac12`` becomes ``\\frac{1}{2}``. Returns ``None`` for over-long input.
    """
    if not isinstance(answer, str) or len(answer) > MAX_LEN:
        return None
    s = answer.translate(_FULLWIDTH).strip().strip("$").strip()
    s = _SPACING.sub("", s)
    degrees = bool(_DEGREE.search(s))
    s = _DEGREE.sub("", s)
    percent = bool(_PERCENT.search(s))
    s = _PERCENT.sub("", s)
    s = _RADICAL.sub(r"\\sqrt", s)
    s = re.sub(r"\bsqrt\s*\(", r"\\sqrt(", s)
    s = _UPRIGHT_UNIT.sub("", s)  # before the upright wrappers are dropped
    s = _TEXT_WRAP.sub(lambda m: m.group(1), s)
    s = _UNITS.sub("", s)
    s = _CN_UNITS.sub("", s)
    s = _FRAC_NAME.sub(r"\\frac", s)
    s = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", s)
    s = s.replace("\\cdot", "*").replace("\\times", "*").replace("\\div", "/").replace("×", "*")
    s = s.replace("π", "\\pi").replace("−", "-").replace("\\approx", "=").replace("≈", "=")
    s = re.sub(r"\s+", " ", s).strip().rstrip(".").strip()
    if s.count("=") == 1 and len(split_top_level(s)) == 1:  # "x = 5", "AB = 5": the value is the RHS
        s = s.split("=", 1)[1].strip()
    s = _MIXED.sub(r"\1(\2+\\frac{\3}{\4})", s)  # 2\frac{1}{2} is 5/2, as math-verify reads it
    return Normalized(s, percent=percent, degrees=degrees)


class _ParseError(ValueError):
    pass


_TOKEN = re.compile(r"\s*(\d+\.\d*|\.\d+|\d+|\\frac|\\sqrt|\\pi|\\infty|pi|[-+*/^(){}\[\]]|[A-Za-z])")


class _Parser:
    """Recursive-descent evaluator for + - * / ^, implicit products, \\frac, \\sqrt[n]{}, \\pi."""

    def __init__(self, text: str, variables: dict[str, float] | None = None) -> None:
        self.variables = variables or {}
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if not match:
                if text[pos:].strip() == "":
                    break
                raise _ParseError(f"unexpected {text[pos : pos + 10]!r}")
            self.tokens.append(match.group(1))
            pos = match.end()
        self.i = 0
        self.depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise _ParseError(f"expected {expected!r}, got {tok!r}")
        self.i += 1
        return tok

    def parse(self) -> float:
        value = self.expr()
        if self.peek() is not None:
            raise _ParseError(f"trailing {self.peek()!r}")
        return value

    def expr(self) -> float:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise _ParseError("nesting too deep")
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        self.depth -= 1
        return value

    def term(self) -> float:
        value = self.unary()
        while True:
            tok = self.peek()
            if tok in ("*", "/"):
                self.take()
                rhs = self.unary()
                if tok == "/":
                    if rhs == 0:
                        raise _ParseError("division by zero")
                    value /= rhs
                else:
                    value *= rhs
            elif tok is not None and (tok[0].isdigit() or tok[0] in ".({\\" or tok.isalpha()):
                value *= self.unary()  # implicit product: 2\sqrt{3}, 3\pi, 2(4)
            else:
                return value

    def unary(self) -> float:
        if self.peek() == "-":
            self.take()
            return -self.unary()
        if self.peek() == "+":
            self.take()
            return self.unary()
        return self.power()

    def power(self) -> float:
        base = self.primary()
        if self.peek() == "^":
            self.take()
            exponent = self.unary() if self.peek() in ("-", "+") else self.power()
            try:
                result = math.pow(base, exponent)
            except (OverflowError, ValueError) as err:
                raise _ParseError("power out of range") from err
            if isinstance(result, complex) or not math.isfinite(result):
                raise _ParseError("power out of range")
            return result
        return base

    def group(self) -> float:
        opener = self.take()
        closer = {"{": "}", "(": ")", "[": "]"}.get(opener)
        if closer is None:
            # an unbraced argument: \frac12 was normalised away; \sqrt3 takes one token
            self.i -= 1
            return self.primary()
        value = self.expr()
        self.take(closer)
        return value

    def primary(self) -> float:
        tok = self.peek()
        if tok is None:
            raise _ParseError("unexpected end")
        if tok[0].isdigit() or tok[0] == ".":
            self.take()
            return float(tok)
        if tok in ("\\pi", "pi"):
            self.take()
            return math.pi
        if tok in self.variables:
            self.take()
            return self.variables[tok]
        if tok in ("(", "{"):
            return self.group()
        if tok == "\\frac":
            self.take()
            num, den = self.group(), self.group()
            if den == 0:
                raise _ParseError("division by zero")
            return num / den
        if tok == "\\sqrt":
            self.take()
            index = 2.0
            if self.peek() == "[":
                index = self.group()
            radicand = self.group()
            if radicand < 0 or index == 0:
                raise _ParseError("bad root")
            return radicand ** (1.0 / index)
        raise _ParseError(f"unexpected {tok!r}")


def evaluate(text: str, variables: dict[str, float] | None = None) -> float | None:
    """Float value of a normalised answer such as ``2\\sqrt{3}``, ``\\frac{7}{2}``, ``3\\pi``; else ``None``.

    ``variables`` binds single letters (``2x+1`` at ``{"x": 0.5}``); an unbound letter gives ``None``.
    """
    if not text or len(text) > MAX_LEN:
        return None
    try:
        value = _Parser(text, variables).parse()
    except (_ParseError, RecursionError, ZeroDivisionError, OverflowError, ValueError):
        return None
    return value if math.isfinite(value) else None


_DECIMAL = re.compile(r"-?\d*\.(\d+)")
_INTEGER = re.compile(r"-?\d+")


def decimal_places(text: str) -> int | None:
    """Places after the point if ``text`` is a plain decimal literal (``3.46`` -> 2, ``12`` -> 0), else ``None``."""
    match = _DECIMAL.fullmatch(text)
    if match:
        return len(match.group(1))
    return 0 if _INTEGER.fullmatch(text) else None


def split_top_level(text: str, separators: tuple[str, ...] = (",", ";")) -> list[str]:
    """Split on separators outside brackets/braces (``(1,2]`` and ``\\frac{1}{2}`` stay whole)."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if depth == 0 and ch in separators:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def expand_pm(text: str) -> list[str]:
    """``a \\pm b`` -> ``[a+b, a-b]``; ``\\pm b`` -> ``[b, -b]``; other text -> ``[text]``."""
    for mark in ("\\pm", "±", "+-", "\\mp"):
        if mark in text:
            head, _, tail = text.partition(mark)
            head, tail = head.strip(), tail.strip()
            if not tail or mark in tail:
                return [text]
            if not head:
                return [tail, f"-({tail})"]
            return [f"{head}+({tail})", f"{head}-({tail})"]
    return [text]


_COMMAND = re.compile(r"\\[A-Za-z]+")
_FUNCTION_WORDS = re.compile(r"\b(?:pi|sqrt|sin|cos|tan|cot|sec|csc|log|ln|exp|arcsin|arccos|arctan)\b")


def free_letters(text: str) -> frozenset[str]:
    """Letters of a normalised answer that name variables (LaTeX commands and function names excluded)."""
    bare = _FUNCTION_WORDS.sub(" ", _COMMAND.sub(" ", text))
    return frozenset(ch for ch in bare if ch.isascii() and ch.isalpha())
