"""Parse any model text into a scene graph, or say why not. Never raises.

Accepted answer shapes: ``<answer>{json}</answer>`` (the format taught), a fenced ```json block, or bare
JSON. Problems that still leave a usable graph are recorded in ``issues`` (the strict format reward
rejects them, content rewards use what survived): missing or unclosed tags, fences, trailing text,
truncated JSON (complete objects/relations before the cut are recovered), duplicate ids, relations naming
unknown ids, non-numeric, non-finite or inverted boxes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from r1vision.tasks.common import completion_text
from r1vision.tasks.sgg.boxes import is_valid_box

MAX_TEXT_CHARS = 200_000  # longer completions are cut before parsing, bounding the work per completion
MAX_OBJECTS = 300
MAX_RELATIONS = 1000

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.S)
_THINK_RE = re.compile(r"<think>.*?</think>", re.S)
_FENCE_RE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)(?:```|\Z)", re.S)
_ID_SUFFIX_RE = re.compile(r"^(.*?)[.#_-]?(\d+)$")


@dataclass(frozen=True)
class SGObject:
    """A node: its unique id (``"name.N"``), the category name taken from the id, and its box."""

    id: str
    name: str
    box: tuple[float, float, float, float]


@dataclass(frozen=True)
class SGRelation:
    """A directed edge ``subject --predicate--> object`` between object ids."""

    subject: str
    predicate: str
    object: str


@dataclass
class SceneGraph:
    objects: list[SGObject] = field(default_factory=list)
    relations: list[SGRelation] = field(default_factory=list)

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


def _scan_complete_items(text: str, start: int) -> list[str]:
    """From the ``[`` at ``start``, the source of each complete ``{...}``/``[...]``/string element."""
    items: list[str] = []
    depth, in_str, esc, item_start = 0, False, False, -1
    for i in range(start + 1, len(text)):
        ch = text[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
                if depth == 0 and item_start >= 0:
                    items.append(text[item_start : i + 1])
                    item_start = -1
            continue
        if ch == '"':
            in_str = True
            if depth == 0:
                item_start = i
        elif ch in "{[":
            if depth == 0:
                item_start = i
            depth += 1
        elif ch in "}]":
            if depth == 0:  # the closing bracket of the array itself
                break
            depth -= 1
            if depth == 0:
                items.append(text[item_start : i + 1])
                item_start = -1
    return items


def _recover_array(text: str, key: str) -> list | None:
    m = re.search(r'"' + key + r'"\s*:\s*\[', text)
    if not m:
        return None
    out = []
    for src in _scan_complete_items(text, m.end() - 1):
        try:
            out.append(json.loads(src))
        except (ValueError, RecursionError):
            break
    return out


def _decode(content: str, issues: list[str]) -> tuple[dict | None, str | None]:
    start = content.find("{")
    if start < 0:
        return None, "no_json"
    try:
        obj, end = json.JSONDecoder().raw_decode(content, start)
    except (ValueError, RecursionError):
        objects = _recover_array(content, "objects")
        if objects is None:
            return None, "invalid_json"
        issues.append("truncated_json")
        relations = _recover_array(content, "relationships")
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
    if not all(isinstance(v, str) and v.strip() for v in (s, p, o)):
        return None
    return s.strip(), p.strip(), o.strip()


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

    graph = SceneGraph()
    seen: set[str] = set()
    for raw in raw_objects[:MAX_OBJECTS]:
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or not raw["id"].strip():
            issues.append("invalid_object")
            continue
        box = raw.get("bbox", raw.get("box"))
        if not isinstance(box, (list, tuple)) or len(box) != 4:
            issues.append("invalid_box")
            continue
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in box):
            issues.append("non_numeric_box")
            continue
        if not is_valid_box(box):
            issues.append(
                "inverted_box" if all(v == v and abs(v) != float("inf") for v in box) else "non_finite_box"
            )
            continue
        obj_id = raw["id"].strip()
        if obj_id in seen:
            issues.append("duplicate_id")
            continue
        seen.add(obj_id)
        graph.objects.append(SGObject(obj_id, name_of(obj_id), tuple(float(v) for v in box)))

    for raw in raw_relations[:MAX_RELATIONS]:
        fields = _relation_fields(raw)
        if fields is None:
            issues.append("invalid_relation")
            continue
        if isinstance(raw, (str, list, tuple)):
            issues.append("non_dict_relation")
        s, p, o = fields
        if s not in seen or o not in seen:
            issues.append("unknown_id")
            continue
        graph.relations.append(SGRelation(s, p, o))
    return graph, None


def parse_scene_graph(text: object) -> ParseResult:
    """Parse a completion (str or TRL message list) into a :class:`ParseResult`. Never raises."""
    try:
        return _parse(completion_text(text))
    except Exception as exc:  # last line of defence: model text must never crash training or eval
        return ParseResult(None, error=f"internal_error:{type(exc).__name__}")


def _parse(text: str) -> ParseResult:
    issues: list[str] = []
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS]
        issues.append("too_long")
    has_think = bool(_THINK_RE.search(text))
    m = _ANSWER_RE.search(text)
    tagged = m is not None
    if m:
        content = m.group(1)
        if text[m.end() :].strip():
            issues.append("text_after_answer")
    elif "<answer>" in text:
        content = text.split("<answer>", 1)[1]
        issues.append("unclosed_answer_tag")
    else:
        content = _THINK_RE.sub("", text)
        issues.append("missing_answer_tags")
    fence = _FENCE_RE.search(content)
    if fence:
        content = fence.group(1)
        issues.append("fenced")
    data, error = _decode(content, issues)
    if data is None:
        return ParseResult(None, error=error, issues=issues, tagged=tagged, has_think=has_think)
    graph, error = _build_graph(data, issues)
    return ParseResult(graph, error=error, issues=issues, tagged=tagged, has_think=has_think)


def graph_to_json(graph: SceneGraph, boxes: list[list[float]] | None = None) -> str:
    """Serialise a graph as the answer JSON (optionally with replacement boxes, e.g. in another frame)."""
    objects = [
        {"id": o.id, "bbox": list(boxes[i]) if boxes is not None else list(o.box)}
        for i, o in enumerate(graph.objects)
    ]
    rels = [{"subject": r.subject, "predicate": r.predicate, "object": r.object} for r in graph.relations]
    return json.dumps({"objects": objects, "relationships": rels})
