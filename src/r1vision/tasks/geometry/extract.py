"""Final-answer extraction from model completions and dataset solutions.

Order, the same for both sides: the last ``\\boxed{...}`` (nested braces handled), else the last
``<answer>...</answer>`` block, else the last number. All functions are linear in the text length,
never raise on model text and return ``None`` when nothing is found.
"""

from __future__ import annotations

import re
from collections import deque

# A number as models write it: sign, digits, optional decimals, optional simple fraction "3/4".
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?|(?<![\w.])-?\.\d+")
_ANSWER_OPEN = "<answer>"
_ANSWER_CLOSE = "</answer>"
_BOX_COMMANDS = ("\\boxed", "\\fbox")
_ANSWER_LETTER = re.compile(r"(?i:answer\s*(?:is|:)\s*(?:option\s*)?)\(?([A-H])\)?(?![\w])")
_LETTER = re.compile(
    r"^(?:\\text\{|\\textbf\{|\\mathrm\{)?\s*(?:option|choice)?\s*\(?([A-Ha-h])\)?\s*\}?\s*(?:[.:)]\s*.*)?$",
    re.IGNORECASE | re.DOTALL,
)


def _last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The last match of ``pattern`` in ``text`` (one pass, constant memory)."""
    tail = deque(pattern.finditer(text), maxlen=1)
    return tail[0] if tail else None


_BRACE = re.compile(r"(?<!\\)[{}]")
_BOX = re.compile(r"\\(?:boxed|fbox)")
_BARE_TOKEN = re.compile(r"[^\s$]{1,200}")
# Only the last MAX_SCAN_CHARS of a text are searched: a final answer sits at the end, a 2,048-token
# completion is ~10 k characters, and the cap bounds the cost of a 1 MB hostile completion.
MAX_SCAN_CHARS = 100_000


def _matching_braces(text: str) -> dict[int, int]:
    """Index of each balanced ``{`` -> index of its ``}`` (escaped ``\\{`` ignored); one linear pass."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for match in _BRACE.finditer(text):
        if match.group() == "{":
            stack.append(match.start())
        elif stack:
            pairs[stack.pop()] = match.start()
    return pairs


def _boxes(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, content)`` of every complete box in ``text``, in order (``\\boxed{...}``,
    ``\\fbox{...}``, ``\\boxed 5``); unbalanced or empty boxes are left out, nested ones give the
    innermost. One linear pass."""
    starts = list(_BOX.finditer(text))
    if not starts:
        return []
    pairs = _matching_braces(text)
    found: list[tuple[int, int, str]] = []
    for box in starts:
        if found and box.start() < found[-1][1]:
            found.pop()  # a box inside a box: the inner one is the answer
        i = j = box.end()
        while j < len(text) and text[j] in " \t":
            j += 1
        if j < len(text) and text[j] == "{":
            close = pairs.get(j)
            if close is not None and text[j + 1 : close].strip():
                found.append((box.start(), close + 1, text[j + 1 : close].strip()))
        elif j > i:  # "\boxed 5": a space then one token
            match = _BARE_TOKEN.match(text, j)
            if match:
                found.append((box.start(), match.end(), match.group(0).strip()))
    return found


def extract_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed 5``) in ``text``;
    ``None`` when there are only unbalanced or empty boxes (a truncated completion). Linear in the text."""
    if not isinstance(text, str):
        return None
    boxes = _boxes(text[-MAX_SCAN_CHARS:])
    return boxes[-1][2] if boxes else None


# Boxes closer than this and separated only by list punctuation belong to one answer: "\boxed{2}, \boxed{-2}".
_GROUP_GAP = 80
# What may stand between the boxes of one multi-valued answer: punctuation, spacing, "or", "and". Anything
# else (words: "wait, let me re-check:") makes the later box a self-correction, which replaces the earlier.
_SEPARATOR = re.compile(
    r"(?:[\s,;:$&.]|\\quad|\\qquad|\\[,;:! ]|\\text\{\s*(?:or|and)\s*\}|\bor\b|\band\b)*",
    re.IGNORECASE,
)


def _answer_section(text: str) -> str:
    """The part of a completion that holds its answer: after a closed ``<think>`` block when that part is
    not empty, else the whole text."""
    tail = text.rsplit("</think>", 1)[1] if "</think>" in text else ""
    return tail if tail.strip() else text


def answer_parts(text: str, reference: bool = False, count: int | None = None) -> list[str]:
    """The boxed parts a text answers with, in order.

    A reference (a dataset's ``solution``) answers with all its boxes: mm_math boxes each part of a
    multi-part question. Model text answers with its last ``count`` boxes when ``count`` is given (the
    reference's part count), else with the last box and the boxes written just before it (closer than
    80 characters, only punctuation, "or" or "and" between: ``\\boxed{2}, \\boxed{-2}``), so a hedge of
    several boxed values is one multi-valued answer, not its last value, while a box after words ("wait, let
    me re-check: \\boxed{7}") is a self-correction that replaces the earlier ones, as MAYE and math-verify
    read it. Repeats of one value count once. Empty when the text has no complete box.
    """
    if not isinstance(text, str):
        return []
    text = text[-MAX_SCAN_CHARS:]
    section = text if reference else _answer_section(text)
    boxes = _boxes(section)
    if reference or not boxes:
        return [content for _, _, content in boxes]
    if count is not None:
        return [content for _, _, content in boxes[-count:]]
    group = [boxes[-1]]
    for box in reversed(boxes[:-1]):
        gap = section[box[1] : group[0][0]]
        if len(gap) > _GROUP_GAP or "\n\n" in gap or not _SEPARATOR.fullmatch(gap):
            break  # a later box after words is a self-correction: the earlier ones are not the answer
        group.insert(0, box)
    parts = [content for _, _, content in group]
    return parts if len(set(parts)) > 1 else parts[-1:]


def extract_answer_tag(text: str) -> str | None:
    """Content of the last ``<answer>...</answer>`` block (an unclosed last block runs to the end)."""
    if not isinstance(text, str):
        return None
    pos = text.rfind(_ANSWER_OPEN)
    if pos < 0:
        return None
    start = pos + len(_ANSWER_OPEN)
    close = text.find(_ANSWER_CLOSE, start)
    content = text[start:] if close < 0 else text[start:close]
    content = content.strip()
    return content or None


def extract_last_number(text: str) -> str | None:
    """The last number in ``text`` (``-3``, ``2.5``, ``.5``, ``3/4``), with thousands commas kept out."""
    if not isinstance(text, str):
        return None
    last = _last_match(_NUMBER, text)
    return re.sub(r"\s+", "", last.group(0)) if last else None


def clean_answer(answer: str) -> str:
    """Strip math delimiters, surrounding whitespace and a trailing full stop."""
    s = answer.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
            s = s[len(left) : len(s) - len(right)].strip()
    return s.rstrip(".").strip()


def extract_final_answer(text: str, reference: bool = False) -> str | None:
    """The answer a text commits to: last box, else ``<answer>`` block, else last number.

    For model text with a closed ``<think>`` block, the part after ``</think>`` is searched first so
    that numbers from the reasoning do not win when the answer section has one. With ``reference=True``
    (a dataset's ``answer``/``solution``), a short one-line text without box or tag is taken whole, so
    ``2\\sqrt{3}`` stays ``2\\sqrt{3}`` instead of becoming its last number.
    """
    if not isinstance(text, str):
        return None
    text = text[-MAX_SCAN_CHARS:]
    if not text.strip():
        return None
    if reference and "\\boxed" not in text and "\\fbox" not in text and _ANSWER_OPEN not in text:
        short = clean_answer(text)
        if short and len(short) <= 100 and "\n" not in short:
            return short
    tail = text.rsplit("</think>", 1)[1] if "</think>" in text else None
    for part in (tail, text) if tail and tail.strip() else (text,):
        for extractor in (extract_boxed, extract_answer_tag):
            found = extractor(part)
            if found:
                inner = extract_boxed(found) if extractor is extract_answer_tag else None
                return clean_answer(inner or found)
    letter = _last_match(_ANSWER_LETTER, tail or text)
    if letter is not None:  # "the answer is (B)": more specific than the last number
        return letter.group(1)
    found = extract_last_number(tail) if tail else None
    found = found or extract_last_number(text)
    if found is not None:
        return found
    stripped = clean_answer(text)
    # A bare short answer as datasets write them ("A", "x+1") is its own answer.
    return stripped if stripped and len(stripped) <= 40 and "\n" not in stripped else None


def choice_letter(answer: str) -> str | None:
    """The option letter an answer names (``B``, ``(B)``, ``B.``, ``B: 5``, ``\\text{B}``, ``Option B``)."""
    if not isinstance(answer, str) or len(answer) > 200:
        return None
    match = _LETTER.match(answer.strip())
    return match.group(1).upper() if match else None


# "(A) 12", "A. 12", "B: 5", "Option C) 7": an option letter followed by the option's value. The letter is
# upper case or in parentheses, so a lower-case "a. 5" in prose is not read as an option.
_LABELLED = re.compile(
    r"^(?:\\text\{\s*)?(?:(?:option|choice)\s*)?(?:\(([A-Ha-h])\)|([A-H])\s*[.:)])\s*\}?\s*(\S.*)$",
    re.IGNORECASE | re.DOTALL,
)


def split_choice(answer: str) -> tuple[str | None, str | None]:
    """``(letter, value)`` of an answer: ``"(A) 12"`` -> ``("A", "12")``, ``"B"`` -> ``("B", None)``,
    ``"12"`` -> ``(None, None)``."""
    letter = choice_letter(answer)
    if letter is None:
        return None, None
    match = _LABELLED.match(answer.strip())
    value = match.group(3).strip() if match else None
    return letter, value or None


_CHOICE_BLOCK = re.compile(r"(?:choices|options)\s*:?\s*(.*)$", re.IGNORECASE | re.DOTALL)
_CHOICE_ITEM = re.compile(r"(?:^|\s|\()([A-H])\s*[:.)]\s*")


def parse_choices(question: str) -> list[str] | None:
    """Option values listed in a question (``Choices: A:3 B:4 C:5 D:6`` or one option per line).

    Returns the values in letter order (index 0 = A), or ``None`` when the question lists no options
    or the letters are not consecutive from A.
    """
    if not isinstance(question, str):
        return None
    block = _CHOICE_BLOCK.search(question)
    if not block:
        return None
    body = block.group(1)
    marks = list(_CHOICE_ITEM.finditer(body))
    letters = [m.group(1) for m in marks]
    if len(marks) < 2 or letters != [chr(ord("A") + i) for i in range(len(marks))]:
        return None
    values = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(body)
        values.append(body[mark.end() : end].strip().rstrip(",;").strip())
    return values if all(values) else None
