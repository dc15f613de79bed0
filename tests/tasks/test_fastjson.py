"""``tasks.fastjson.loads`` must equal ``json.loads`` exactly: values, types and errors."""

from __future__ import annotations

import json
import math
import random

import pytest

from r1vision.tasks.fastjson import loads


def _same(a, b) -> bool:
    """Equal values of identical types, recursively (NaN equals NaN; -0.0 differs from 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


EDGE_CASES = [
    '{"a": 1, "a": 2}',
    '"\\ud800"',
    '"\ud800"',
    "1e400",
    "-1e400",
    "123456789012345678901234567890",
    "-9223372036854775809",
    "18446744073709551616",
    "9223372036854775807",
    "NaN",
    "[Infinity, -Infinity]",
    "[1.0, 1, -0.0, -0, 0.1, 5e-324, 1.7976931348623157e308, 2.5e-7]",
    '"\\u0000\\n\\t\\"\\\\"',
    " [1] \n",
    '{"objects": [{"id": "man.1", "bbox": [1, 2.5, 3e2, 4]}], "relationships": []}',
    '{"k": "caf\\u00e9 \\ud83d\\ude00"}',
    "true",
    "null",
]


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_equal_json(text: str) -> None:
    assert _same(loads(text), json.loads(text))


@pytest.mark.parametrize("text", ["", "[1,", '{"a" 1}', "[1]\x0b", "{'a': 1}", "[1] [2]", "\x00"])
def test_invalid_documents_raise_like_json(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    with pytest.raises(ValueError):
        loads(text)


def test_random_documents_equal_json() -> None:
    rng = random.Random(0)

    def value(depth: int):
        kind = rng.randrange(8 if depth < 4 else 5)
        if kind == 0:
            return rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-30, 30)
        if kind == 1:
            return rng.randint(-(10**18), 10**18)
        if kind == 2:
            return "".join(
                chr(rng.choice([rng.randint(32, 126), rng.randint(160, 0x2FFF)])) for _ in range(8)
            )
        if kind == 3:
            return rng.choice([True, False, None])
        if kind == 4:
            return round(rng.uniform(0, 1000), rng.randint(0, 6))
        if kind == 5:
            return [value(depth + 1) for _ in range(rng.randint(0, 5))]
        return {f"k{rng.randint(0, 9)}": value(depth + 1) for _ in range(rng.randint(0, 5))}

    for _ in range(500):
        text = json.dumps(value(0), ensure_ascii=rng.random() < 0.5)
        assert _same(loads(text), json.loads(text)), text


def test_long_digit_runs_are_found_as_the_regex_finds_them() -> None:
    """The byte-translation check says what ``re.search("[0-9]{19}")`` says (ASCII digits are what JSON
    numbers use), on str with any characters, lone surrogates included, and on bytes."""
    import re

    from r1vision.tasks.fastjson import _has_long_digit_run

    rng = random.Random(1)
    alphabet = "0123456789" * 6 + ' .-e,[]{}"é\u0661\ud800'
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        expected = re.search("[0-9]{19}", text) is not None
        assert _has_long_digit_run(text) == expected, text
        raw = text.encode("utf-8", "surrogatepass")
        assert _has_long_digit_run(raw) == expected, text
    assert _has_long_digit_run("[" + "1" * 19 + "]") and not _has_long_digit_run("[" + "1" * 18 + "]")
