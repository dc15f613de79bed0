"""Parse any model text into a scene graph, or say why not. Never raises.

Accepted answer shapes: ``<answer>{json}</answer>`` (the format taught), a fenced ```json block, or bare
JSON. Problems that still leave a usable graph are recorded in ``issues`` (the strict format reward
rejects them, content rewards use what survived): missing or unclosed tags, fences, trailing text,
truncated JSON (complete objects/relations before the cut are recovered), duplicate ids, relations naming
unknown ids, non-numeric, non-finite or inverted boxes.

Every scan is linear in the (capped) text: tags are found with ``str.find`` and truncated JSON is
tokenised by one regular expression without backtracking, so 1 MB of repeated tags costs milliseconds.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter
from typing import NamedTuple

from r1vision import compiled
from r1vision.tasks import fastjson
from r1vision.tasks.common import completion_text

MAX_TEXT_CHARS = 200_000  # longer completions are cut before parsing, bounding the work per completion
MAX_OBJECTS = 300
MAX_RELATIONS = 1000
_MAX_DEPTH = 32

_FENCE_HEAD_RE = re.compile(r"[ \t]*(?:json|JSON)?[ \t]*\n?")
_ID_SUFFIX_RE = re.compile(r"^(.*?)[.#_-]?(\d+)$")
# One token per match: a (possibly unclosed) string, or a bracket. Strings cannot backtrack (escapes are
# consumed pairwise), so tokenising truncated JSON is linear.
_TOKEN_RE = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[{}\[\]]', re.S)
# One decoder for every call, as json.loads shares one (building it costs ~1.6 us).
_DECODER = json.JSONDecoder()
_ARRAY_KEY_RE = {k: re.compile(r'"' + k + r'"\s*:\s*\[') for k in ("objects", "relationships")}


class SGObject(NamedTuple):
    """A node: its unique id (``"name.N"``), the category name taken from the id, and its box."""

    id: str
    name: str
    box: tuple[float, float, float, float]


class SGRelation(NamedTuple):
    """A directed edge ``subject --predicate--> object`` between object ids."""

    subject: str
    predicate: str
    object: str


@dataclass
class SceneGraph:
    objects: list[SGObject] = field(default_factory=list)
    relations: list[SGRelation] = field(default_factory=list)
    # Set by the compiled scan (else None), for the batched scores: the boxes packed as float64 x1, y1,
    # x2, y2 per object, and the relations' (subject, object) object indices packed as int64 pairs.
    packed_boxes: bytes | None = field(default=None, compare=False, repr=False)
    packed_links: bytes | None = field(default=None, compare=False, repr=False)

    def object_map(self) -> dict[str, SGObject]:
        return {o.id: o for o in self.objects}


@dataclass
class ParseResult:
    """``graph`` is None exactly when ``error`` says why; ``issues`` lists tolerated problems."""

    graph: SceneGraph | None
    error: str | None = None
    issues: list[str] = field(default_factory=list)
    tagged: bool = False  # a complete <answer>...</answer> pair was found
    has_think: bool = False

    @property
    def ok(self) -> bool:
        return self.graph is not None


@lru_cache(maxsize=65536)
def name_of(obj_id: str) -> str:
    """Category name of an id: ``"man.1"`` -> ``"man"``, ``"red circle.2"`` -> ``"red circle"``."""
    text = obj_id.strip()
    head, dot, tail = text.rpartition(".")
    if dot and tail.strip().isdigit() and head.strip():
        return head.strip()
    m = _ID_SUFFIX_RE.match(text)
    if m and m.group(1).strip():
        return m.group(1).strip()
    return text


def _scan_complete_items(text: str, start: int, max_items: int) -> list[str]:
    """From the ``[`` at ``start``, the source of each complete ``{...}``/``[...]``/string element.

    Stops after ``max_items`` elements, or at nesting deeper than ``_MAX_DEPTH`` (no scene-graph element
    is nested that deep), so hostile text costs at most one pass over the capped input.
    """
    items: list[str] = []
    depth, item_start = 0, -1
    for m in _TOKEN_RE.finditer(text, start + 1):
        tok = m.group()
        ch = tok[0]
        if ch == '"':
            if depth == 0:
                if not tok.endswith('"') or len(tok) < 2 or tok.endswith('\\"') and _odd_escape(tok):
                    break  # an unclosed string: the text was cut inside it
                items.append(tok)
                if len(items) >= max_items:
                    break
        elif ch in "{[":
            if depth == 0:
                item_start = m.start()
            depth += 1
            if depth > _MAX_DEPTH:
                break
        else:
            if depth == 0:  # the closing bracket of the array itself
                break
            depth -= 1
            if depth == 0:
                items.append(text[item_start : m.end()])
                item_start = -1
                if len(items) >= max_items:
                    break
    return items


def _odd_escape(tok: str) -> bool:
    """Whether the final quote of ``tok`` is escaped (an odd run of backslashes before it)."""
    run = len(tok) - 1 - len(tok[:-1].rstrip("\\"))
    return run % 2 == 1


def _recover_array(text: str, key: str, max_items: int) -> list | None:
    m = _ARRAY_KEY_RE[key].search(text)
    if not m:
        return None
    out = []
    for src in _scan_complete_items(text, m.end() - 1, max_items):
        try:
            out.append(json.loads(src))
        except (ValueError, RecursionError):
            break
    return out


def _decode(content: str, issues: list[str]) -> tuple[dict | None, str | None]:
    start = content.find("{")
    if start < 0:
        return None, "no_json"
    # Fast path, same result: when the rest (trailing whitespace aside) is one JSON document, raw_decode
    # from the same "{" stops at the same closing brace with the same object, and only whitespace
    # follows it, so there is no trailing text. Anything else takes the full path below.
    try:
        obj = fastjson.loads(content[start:].rstrip())
    except (ValueError, RecursionError):
        pass
    else:
        return (obj, None) if isinstance(obj, dict) else (None, "not_a_json_object")
    try:
        obj, end = _DECODER.raw_decode(content, start)
    except (ValueError, RecursionError):
        # One element past each cap keeps the too_many_* issue visible.
        objects = _recover_array(content, "objects", MAX_OBJECTS + 1)
        if objects is None:
            return None, "invalid_json"
        issues.append("truncated_json")
        relations = _recover_array(content, "relationships", MAX_RELATIONS + 1)
        return {"objects": objects, "relationships": relations or []}, None
    if content[end:].strip():
        issues.append("trailing_text")
    if not isinstance(obj, dict):
        return None, "not_a_json_object"
    return obj, None


def _relation_fields(rel: object) -> tuple[str, str, str] | None:
    if isinstance(rel, dict):
        s, p, o = rel.get("subject"), rel.get("predicate"), rel.get("object")
    elif isinstance(rel, str) and rel.count("->") == 2:
        s, p, o = (t.strip() for t in rel.split("->"))
    elif isinstance(rel, (list, tuple)) and len(rel) == 3:
        s, p, o = rel
    else:
        return None
    if not (isinstance(s, str) and isinstance(p, str) and isinstance(o, str)):
        return None
    s, p, o = s.strip(), p.strip(), o.strip()
    if not (s and p and o):
        return None
    return s, p, o


_SPO = itemgetter("subject", "predicate", "object")
_NUMBER_TYPES = (int, float)
_NUMBER_SET = frozenset(_NUMBER_TYPES)


def _box_issue(box: object) -> tuple[str | None, tuple[float, float, float, float] | None]:
    """(issue, None) for an unusable box, else (None, the box as floats). Hot path: no generators."""
    if not isinstance(box, (list, tuple)) or len(box) != 4:
        return "invalid_box", None
    for v in box:
        if type(v) not in _NUMBER_TYPES and (not isinstance(v, _NUMBER_TYPES) or isinstance(v, bool)):
            return "non_numeric_box", None
    try:
        x1, y1, x2, y2 = float(box[0]), float(box[1]), float(box[2]), float(box[3])
    except OverflowError:  # an integer beyond float range
        return "non_finite_box", None
    if not (math.isfinite(x1) and math.isfinite(y1) and math.isfinite(x2) and math.isfinite(y2)):
        return "non_finite_box", None
    if x1 > x2 or y1 > y2:
        return "inverted_box", None
    return None, (x1, y1, x2, y2)


def _build_graph(data: dict, issues: list[str]) -> tuple[SceneGraph | None, str | None]:
    raw_objects = data.get("objects")
    if not isinstance(raw_objects, list):
        return None, "missing_objects"
    raw_relations = data.get("relationships", data.get("relations"))
    if raw_relations is None:
        issues.append("missing_relationships")
        raw_relations = []
    if not isinstance(raw_relations, list):
        issues.append("invalid_relationships")
        raw_relations = []
    if len(raw_objects) > MAX_OBJECTS:
        issues.append("too_many_objects")
    if len(raw_relations) > MAX_RELATIONS:
        issues.append("too_many_relations")
    scan = compiled.scan_answer
    if scan is not None and len(raw_objects) <= MAX_OBJECTS and len(raw_relations) <= MAX_RELATIONS:
        # Clean answers in C; None means something needs the loops below (which name the problem).
        done = scan(raw_objects, raw_relations, SGObject, SGRelation, name_of)
        if done is not None:
            return SceneGraph(*done), None

    objects: list[SGObject] = []
    seen: set[str] = set()
    numbers = _NUMBER_SET
    isfinite = math.isfinite
    new = tuple.__new__  # the NamedTuples without their Python-level __new__ (twice as fast)
    for raw in raw_objects[:MAX_OBJECTS]:
        obj_id = raw.get("id") if type(raw) is dict else None
        if type(obj_id) is not str:
            obj_id = raw.get("id") if isinstance(raw, dict) else None
            if not isinstance(obj_id, str):
                issues.append("invalid_object")
                continue
        obj_id = obj_id.strip()
        if not obj_id:
            issues.append("invalid_object")
            continue
        box = raw["bbox"] if "bbox" in raw else raw.get("box")
        # Fast path (plain JSON numbers); anything else goes through the full check for its reason.
        if (
            type(box) is list
            and len(box) == 4
            and type(x1 := box[0]) in numbers
            and type(y1 := box[1]) in numbers
            and type(x2 := box[2]) in numbers
            and type(y2 := box[3]) in numbers
        ):
            try:
                box = (float(x1), float(y1), float(x2), float(y2))
            except OverflowError:
                box = None
            if box is None or not (
                isfinite(box[0]) and isfinite(box[1]) and isfinite(box[2]) and isfinite(box[3])
            ):
                issues.append("non_finite_box")
                continue
            if box[0] > box[2] or box[1] > box[3]:
                issues.append("inverted_box")
                continue
        else:
            issue, box = _box_issue(box)
            if issue is not None:
                issues.append(issue)
                continue
        if obj_id in seen:
            issues.append("duplicate_id")
            continue
        seen.add(obj_id)
        objects.append(new(SGObject, (obj_id, name_of(obj_id), box)))

    relations: list[SGRelation] = []
    for raw in raw_relations[:MAX_RELATIONS]:
        if type(raw) is dict:  # fast path for the taught shape
            try:
                s, p, o = _SPO(raw)  # one C call for the three fields
            except KeyError:
                s = p = o = None
            if type(s) is str and type(p) is str and type(o) is str:
                s, p, o = s.strip(), p.strip(), o.strip()
                if s and p and o:
                    if s not in seen or o not in seen:
                        issues.append("unknown_id")
                        continue
                    relations.append(new(SGRelation, (s, p, o)))
                    continue
        fields = _relation_fields(raw)
        if fields is None:
            issues.append("invalid_relation")
            continue
        if not isinstance(raw, dict):
            issues.append("non_dict_relation")
        s, p, o = fields
        if s not in seen or o not in seen:
            issues.append("unknown_id")
            continue
        relations.append(SGRelation(s, p, o))
    return SceneGraph(objects, relations), None


def parse_scene_graph(text: object) -> ParseResult:
    """Parse a completion (str or TRL message list) into a :class:`ParseResult`. Never raises."""
    try:
        return _parse(completion_text(text))
    except Exception as exc:  # last line of defence: model text must never crash training or eval
        return ParseResult(None, error=f"internal_error:{type(exc).__name__}")


def find_block(text: str, open_tag: str, close_tag: str, start: int = 0) -> tuple[int, int] | None:
    """``(start, end)`` of the first complete ``open_tag ... close_tag`` block at or after ``start``.

    Same result as the regex ``open_tag(.*?)close_tag`` but linear: when the first opening tag has no
    closing tag after it, no later one has either.
    """
    i = text.find(open_tag, start)
    if i < 0:
        return None
    j = text.find(close_tag, i + len(open_tag))
    return None if j < 0 else (i, j + len(close_tag))


def strip_blocks(text: str, open_tag: str, close_tag: str) -> str:
    """``text`` without its complete ``open_tag ... close_tag`` blocks (one linear pass)."""
    parts, pos = [], 0
    while (block := find_block(text, open_tag, close_tag, pos)) is not None:
        parts.append(text[pos : block[0]])
        pos = block[1]
    parts.append(text[pos:])
    return "".join(parts)


def _unfence(content: str, issues: list[str]) -> str:
    """The body of the first ```` ``` ```` fence in ``content`` (recording how it was packaged), else ``content``."""
    i = content.find("```")
    if i < 0:
        return content
    issues.append("fenced")
    body_start = _FENCE_HEAD_RE.match(content, i + 3).end()
    j = content.find("```", body_start)
    if j < 0:
        issues.append("unclosed_fence")
        return content[body_start:]
    if content[:i].strip() or content[j + 3 :].strip():
        issues.append("text_around_fence")
    return content[body_start:j]


def _parse(text: str) -> ParseResult:
    issues: list[str] = []
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS]
        issues.append("too_long")
    has_think = find_block(text, "<think>", "</think>") is not None
    answer = find_block(text, "<answer>", "</answer>")
    tagged = answer is not None
    if answer is not None:
        content = text[answer[0] + len("<answer>") : answer[1] - len("</answer>")]
        if text[answer[1] :].strip():
            issues.append("text_after_answer")
    elif "<answer>" in text:
        content = text.split("<answer>", 1)[1]
        issues.append("unclosed_answer_tag")
    else:
        content = strip_blocks(text, "<think>", "</think>")
        issues.append("missing_answer_tags")
    content = _unfence(content, issues)
    data, error = _decode(content, issues)
    if data is None:
        return ParseResult(None, error=error, issues=issues, tagged=tagged, has_think=has_think)
    graph, error = _build_graph(data, issues)
    return ParseResult(graph, error=error, issues=issues, tagged=tagged, has_think=has_think)
