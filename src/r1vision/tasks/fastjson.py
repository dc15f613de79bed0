"""``json.loads`` with the same results, faster: orjson where it provably agrees, the stdlib otherwise.

orjson decodes the JSON our rewards and evaluators read (answers, ground-truth columns, prediction
records) 2-3x faster than :mod:`json`. It differs from :mod:`json` on inputs that are rare in practice:
it rejects ``NaN``/``Infinity``, lone surrogates and numbers beyond float range (we then fall back to
:mod:`json`, which accepts them), and it turns integers beyond 64 bits into floats (so text with a run of
19 or more digits goes to :mod:`json` directly). Every other document decodes to equal values of the
same types; ``tests/tasks/test_fastjson.py`` checks both the agreement and the fallbacks.
"""

from __future__ import annotations

import json
from typing import Any

from r1vision import compiled

try:  # a declared dependency; the fallback keeps a partial install working
    from orjson import JSONDecodeError as _OrjsonError
    from orjson import loads as _orjson_loads
except ImportError:  # pragma: no cover - exercised only without orjson
    _orjson_loads = None
    _OrjsonError = ValueError

# A run of this many ASCII digits may be an integer orjson would turn into a float (int64 has 19 digits).
# Found by mapping every digit byte to "0" and everything else to " ", then one substring search: the
# regex ``\d{19}`` costs 3-8x the decoding itself on box-heavy JSON (it retries at every digit).
_DIGITS_TO_ZERO = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
_LONG_RUN = b"0" * 19


def _has_long_digit_run(text: str | bytes) -> bool:
    if compiled.has_long_digit_run is not None and type(text) is str:
        return compiled.has_long_digit_run(text, len(_LONG_RUN))  # one pass, no encoded copy
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return _LONG_RUN in raw.translate(_DIGITS_TO_ZERO)


def loads(text: str | bytes) -> Any:
    """:func:`json.loads` of ``text`` (same values, same types, same exceptions)."""
    if _orjson_loads is not None and not _has_long_digit_run(text):
        try:
            return _orjson_loads(text)
        except _OrjsonError:
            pass  # NaN, Infinity, lone surrogates, huge exponents, or invalid: json decides
    return json.loads(text)


def is_document(text: str) -> bool:
    """Whether ``text`` is one complete JSON document, by orjson alone: a quick test for scanners that only
    need to know where a value ends. NaN, Infinity and lone surrogates read as False (:mod:`json` takes
    them), so a False may still be decodable; callers fall back to :func:`loads` for those.
    """
    try:
        (_orjson_loads or json.loads)(text)
    except ValueError:
        return False
    return True
