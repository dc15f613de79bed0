"""Checks every SVG passes before it reaches a renderer: size limits and the no-external-resources policy.

Policy (reject, never repair): a document is refused with a reason when it

- is larger than ``max_bytes`` or has more than ``max_elements`` elements or deeper nesting than
  ``max_depth`` (both checked by a linear tag scan *before* any XML parsing, so 100k-deep nesting never
  reaches a parser or a recursive renderer);
- declares a DOCTYPE internal subset or any ``<!ENTITY`` (XXE, billion laughs); a plain DOCTYPE in the prolog
  is dropped because only the ``<svg>`` element is kept;
- references anything that is not a ``data:`` URI or a same-document ``#fragment``: ``href`` / ``xlink:href``
  / ``src`` attributes, ``url(...)`` in attributes, style attributes and ``<style>`` sheets, CSS ``@import``,
  ``xml:base``. The one exception is the ``href`` of an ``<a>`` element: a hyperlink is inert in a rendering
  (CairoSVG never follows it, and the worker's fetcher refuses every non-``data:`` URL anyway);
- would draw more than ``max_expanded`` nodes once every ``<use>`` and every ``url(#id)`` reference
  (markers, patterns, clip paths, masks, filters) is expanded, or has a reference cycle. Content under
  ``<defs>``/``<symbol>`` counts only where it is referenced, so an ordinary matplotlib scatter (one marker
  path in ``<defs>``, hundreds of ``<use>``) costs what it draws;
- declares a canvas (``width``/``height``/``viewBox``) larger than ``max_canvas`` user units per side, or a
  blur ``stdDeviation`` above ``max_blur``.

Parsing uses ``defusedxml`` (DTDs, entities and external references forbidden at the parser too).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from defusedxml import ElementTree as SafeET

from .extract import find_svg

# Failure reasons produced here (the renderer adds timeout, memory, render_error, worker_crash, ...).
NO_SVG = "no_svg"
TRUNCATED = "truncated"
TOO_LARGE = "too_large"
PARSE_ERROR = "parse_error"
DTD = "dtd"
EXTERNAL = "external_resource"


@dataclass(frozen=True)
class SanitizeLimits:
    """Limits checked before rendering; defaults are generous for real figures, tight for attacks."""

    max_bytes: int = 512 * 1024
    max_elements: int = 20_000
    max_depth: int = 64
    max_expanded: int = 50_000  # nodes drawn after expanding references
    max_canvas: float = 16_384.0
    max_blur: float = 200.0


@dataclass(frozen=True)
class Sanitized:
    """The outcome of :func:`sanitize`: the SVG text to render, or the reason it was refused."""

    svg: str | None
    reason: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.svg is not None


# Quoted attribute values are matched as units so `<g a="/>">` is not mistaken for a self-closing tag; the
# alternatives start with distinct characters and none crosses a `<`, so one attempt never reads past the
# next `<` and the scan in _scan_structure stays linear. Comments and CDATA are skipped by str.find.
_TAG = re.compile(r"<(/?)([A-Za-z_][\w:.-]*)(?:[^<>\"'/]|/(?!>)|\"[^\"<]*\"|'[^'<]*')*(/?)>")
_DTD_MARKERS = re.compile(r"<!ENTITY|<!DOCTYPE", re.IGNORECASE)
_ENTITY = re.compile(r"<!ENTITY", re.IGNORECASE)
_DOCTYPE = re.compile(r"<!DOCTYPE", re.IGNORECASE)
_URL_OPEN = re.compile(r"url\(", re.IGNORECASE)
_URL_REF = re.compile(r"url\(\s*['\"]?#([^'\")\s]+)", re.IGNORECASE)  # one \s* run: no backtracking
_IMPORT = re.compile(r"@import", re.IGNORECASE)
_CSS_ESCAPE = re.compile(r"\\[0-9a-fA-F]{1,6}\s?|\\.", re.DOTALL)
_LENGTH = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(px|pt|pc|mm|cm|in|em|ex|%)?\s*$")
_UNIT_PX = {None: 1.0, "px": 1.0, "pt": 4 / 3, "pc": 16.0, "mm": 96 / 25.4, "cm": 96 / 2.54, "in": 96.0}
_UNIT_PX.update({"em": 16.0, "ex": 8.0, "%": 0.0})


def _local(name: str) -> str:
    return name.rsplit("}", 1)[-1].rsplit(":", 1)[-1]


def _safe_reference(value: str) -> bool:
    """Only same-document fragments and data: URIs may be referenced."""
    v = value.strip().strip("'\"").strip()
    return v == "" or v.startswith("#") or v[:5].lower() == "data:"


def _check_css(text: str) -> str | None:
    """Reason string when CSS text imports or references a non-data URL."""
    # CSS escapes (`\40import`, `u\rl(`) could hide a keyword from a naive scan: refuse them outright.
    if _CSS_ESCAPE.search(text):
        return "CSS escape sequences are not allowed"
    if _IMPORT.search(text):
        return "CSS @import is not allowed"
    close = -1  # next `)`: moves only forward, so many `url(` without `)` cost one scan
    for match in _URL_OPEN.finditer(text):
        if close < match.end():
            close = text.find(")", match.end())
            if close < 0:
                return "unterminated url("
        value = text[match.end() : close]
        if not _safe_reference(value):
            return f"url({value[:60]!r}) is not a data: URI or #fragment"
    if _URL_OPEN.search(re.sub(r"\s+", "", text)) and not _URL_OPEN.search(text):
        return "url( split by white space"
    return None


def _tags(svg: str):
    """Tag matches in document order, comments and CDATA sections skipped (each scanned once)."""
    if "<!--" not in svg and "<![CDATA[" not in svg:
        yield from _TAG.finditer(svg)  # the common case, at the regex engine's speed
        return
    pos = svg.find("<")
    while pos >= 0:
        for opener, closer in (("<!--", "-->"), ("<![CDATA[", "]]>")):
            if svg.startswith(opener, pos):
                end = svg.find(closer, pos + len(opener))
                pos = -1 if end < 0 else svg.find("<", end + len(closer))
                break
        else:
            match = _TAG.match(svg, pos)
            if match is None:
                pos = svg.find("<", pos + 1)
            else:
                pos = svg.find("<", match.end())
                yield match


def _scan_structure(svg: str, limits: SanitizeLimits) -> tuple[str, str] | None:
    """Linear scan of tags: element count and nesting depth, without building a tree."""
    depth = count = 0
    for match in _tags(svg):
        if match.group(1):
            depth -= 1
            continue
        count += 1
        if count > limits.max_elements:
            return TOO_LARGE, f"more than {limits.max_elements} elements"
        if not match.group(3):
            depth += 1
            if depth > limits.max_depth:
                return TOO_LARGE, f"nesting deeper than {limits.max_depth}"
    return None


def _length_px(value: str | None) -> float | None:
    if value is None:
        return None
    if len(value) > 64:  # no real length is this long, and _LENGTH would backtrack over a long digit run
        return math.inf
    match = _LENGTH.match(value)
    if not match:
        return None
    return float(match.group(1)) * _UNIT_PX[match.group(2)]


def _check_canvas(root, limits: SanitizeLimits) -> str | None:
    for attr in ("width", "height"):
        px = _length_px(root.get(attr))
        if px is not None and (not math.isfinite(px) or abs(px) > limits.max_canvas):
            return f"{attr}={root.get(attr)!r} exceeds {limits.max_canvas:g}"
    viewbox = root.get("viewBox")
    if viewbox:
        try:
            numbers = [float(v) for v in re.split(r"[\s,]+", viewbox.strip())]
        except ValueError:
            return None  # renderers ignore a malformed viewBox
        if any(not math.isfinite(v) for v in numbers) or any(
            abs(v) > limits.max_canvas for v in numbers[2:4]
        ):
            return f"viewBox={viewbox!r} exceeds {limits.max_canvas:g}"
    return None


def _check_element(el, limits: SanitizeLimits) -> tuple[str, str] | None:
    tag = _local(el.tag) if isinstance(el.tag, str) else ""
    for name, value in el.attrib.items():
        local = _local(name)
        if name == "{http://www.w3.org/XML/1998/namespace}base" or local == "base":
            return EXTERNAL, "xml:base is not allowed"
        if local in ("href", "src") and tag != "a" and not _safe_reference(value):
            return EXTERNAL, f"<{tag} {local}={value[:60]!r}> is not a data: URI or #fragment"
        if local == "style" or "url(" in value.lower() or "@import" in value.lower():
            problem = _check_css(value)
            if problem:
                return EXTERNAL, f"<{tag} {local}>: {problem}"
        if local == "stdDeviation":
            try:
                sigmas = [float(v) for v in re.split(r"[\s,]+", value.strip()) if v]
            except ValueError:
                sigmas = []
            if any(not math.isfinite(s) or s > limits.max_blur for s in sigmas):
                return TOO_LARGE, f"stdDeviation={value[:40]!r} exceeds {limits.max_blur:g}"
    if tag == "style":
        problem = _check_css("".join(el.itertext()))
        if problem:
            return EXTERNAL, f"<style>: {problem}"
    return None


def _max_depth(root) -> int:
    """Nesting depth of the parsed tree (iterative: a backstop for the pre-parse scan)."""
    deepest = 0
    stack = [(root, 1)]
    while stack:
        el, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in el)
    return deepest


# Elements whose children are not drawn where they stand: only a reference (use, url(#id)) draws them.
_NOT_DRAWN = {
    "defs",
    "symbol",
    "marker",
    "pattern",
    "clipPath",
    "mask",
    "filter",
    "linearGradient",
    "radialGradient",
    "style",
    "title",
    "desc",
    "metadata",
    "script",
}
_XLINK_HREF = "{http://www.w3.org/1999/xlink}href"


def _expanded_size(root, limits: SanitizeLimits) -> tuple[str, str] | None:
    """Nodes drawn once every reference is expanded (iterative post-order DFS, memoised; detects cycles).

    A node costs 1 plus its drawn children plus what it references: the target of a ``<use>`` href and of
    every ``url(#id)`` in its attributes (marker-end, fill, clip-path, mask, filter, ...). Children of
    ``<defs>``, ``<marker>``, ``<symbol>``, ... are not counted where they stand, only through references.
    """
    ids = {el.get("id"): el for el in root.iter() if el.get("id")}
    limit = limits.max_expanded

    def deps(el):
        tag = _local(el.tag) if isinstance(el.tag, str) else ""
        # A <defs>/<marker>/... child is skipped where it stands; reached through a reference, its own
        # children count in full.
        out = [c for c in el if not (isinstance(c.tag, str) and _local(c.tag) in _NOT_DRAWN)]
        targets = []
        if tag == "use":
            href = (el.get("href") or el.get(_XLINK_HREF) or "").strip()
            if href.startswith("#"):
                targets.append(href[1:])
        for value in el.attrib.values():
            if "url(" in value:
                targets.extend(m.group(1) for m in _URL_REF.finditer(value))
        out.extend(ids[t] for t in targets if t in ids)
        return out

    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack = [(root, False)]
    while stack:
        el, done = stack.pop()
        key = id(el)
        if done:
            # capped at limit + 1: sizes of a DAG grow exponentially with depth; big ints cost time too
            total = min(limit + 1, 1 + sum(size[id(d)] for d in deps(el)))
            on_path.discard(key)
            if total > limit:
                return TOO_LARGE, f"drawing expands to more than {limit} nodes (<use>/url(#) references)"
            size[key] = total
            continue
        if key in size:
            continue
        on_path.add(key)
        stack.append((el, True))
        for d in deps(el):
            if id(d) in on_path:
                return PARSE_ERROR, "reference cycle (<use>/url(#))"
            if id(d) not in size:
                stack.append((d, False))
    return None


def declares_entities(text: str) -> bool:
    """True when ``text`` has a DOCTYPE internal subset or an ``<!ENTITY`` declaration anywhere (linear)."""
    if _ENTITY.search(text):
        return True
    gt = bracket = -1  # next `>` and next `[`: both only move forward
    for match in _DOCTYPE.finditer(text):
        if gt < match.end():
            gt = text.find(">", match.end())
            gt = len(text) if gt < 0 else gt
        if bracket < match.end():
            bracket = text.find("[", match.end())
            bracket = len(text) + 1 if bracket < 0 else bracket
        if bracket < gt:
            return True
    return False


def sanitize(text: str, limits: SanitizeLimits | None = None) -> Sanitized:
    """Extract and check the SVG in ``text``; never raises. See the module docstring for the policy."""
    limits = limits or SanitizeLimits()
    try:
        if len(text) > 4 * limits.max_bytes:  # cheap bound before any scanning
            return Sanitized(None, TOO_LARGE, f"{len(text)} characters")
        if declares_entities(text):
            return Sanitized(None, DTD, "DOCTYPE internal subsets and <!ENTITY> are forbidden")
        svg, reason = find_svg(text)
        if svg is None:
            return Sanitized(None, reason or NO_SVG)
        if len(svg.encode("utf-8", "surrogatepass")) > limits.max_bytes:
            return Sanitized(None, TOO_LARGE, f"more than {limits.max_bytes} bytes")
        if _DTD_MARKERS.search(svg):
            return Sanitized(None, DTD, "DOCTYPE inside the <svg> element")
        problem = _scan_structure(svg, limits)
        if problem:
            return Sanitized(None, *problem)
        try:
            root = SafeET.fromstring(svg, forbid_dtd=True, forbid_entities=True, forbid_external=True)
        except Exception as exc:  # ParseError, defusedxml's DTDForbidden/EntitiesForbidden, ...
            name = type(exc).__name__
            reason = DTD if "Forbidden" in name else PARSE_ERROR
            return Sanitized(None, reason, f"{name}: {str(exc)[:120]}")
        if not isinstance(root.tag, str) or _local(root.tag) != "svg":
            return Sanitized(None, PARSE_ERROR, "root element is not <svg>")
        if _max_depth(root) > limits.max_depth:
            return Sanitized(None, TOO_LARGE, f"nesting deeper than {limits.max_depth}")
        canvas = _check_canvas(root, limits)
        if canvas:
            return Sanitized(None, TOO_LARGE, canvas)
        for el in root.iter():
            problem = _check_element(el, limits)
            if problem:
                return Sanitized(None, *problem)
        problem = _expanded_size(root, limits)
        if problem:
            return Sanitized(None, *problem)
        return Sanitized(svg)
    except Exception as exc:  # model text must never raise
        return Sanitized(None, PARSE_ERROR, f"{type(exc).__name__}: {str(exc)[:120]}")


_DOCTYPE_BLOCK = re.compile(r"<!DOCTYPE[^\[>]*(?:\[[^\]]*\])?\s*>", re.IGNORECASE)
_ENTITY_REF = re.compile(r"&(?!(?:amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);)[\w.:-]+;")


def strip_external(svg: str) -> str:
    """A ground-truth SVG without what it would fetch: the DOCTYPE and its entities, ``href``/``src`` that are
    not ``#fragment`` or ``data:``, ``xml:base``, and CSS (attributes, ``<style>``) that imports or points
    outside. Ground truths are data, not model text: the rest of the figure should still render (in the
    sandbox, which refuses whatever this leaves unsafe). Returns ``svg`` unchanged when it does not parse."""
    text = _ENTITY_REF.sub("", _DOCTYPE_BLOCK.sub("", svg))
    try:
        root = SafeET.fromstring(text, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except Exception:  # left to the sandbox's own refusal
        return svg
    drop = []  # elements that only show what they fetch, removed whole: an <image> left without its href
    for parent in root.iter():  # would still make the renderer resolve the document's own base URL
        for el in parent:
            if isinstance(el.tag, str) and _local(el.tag) in ("image", "use", "feImage"):
                refs = [v for k, v in el.attrib.items() if _local(k) in ("href", "src")]
                if any(not _safe_reference(v) for v in refs):
                    drop.append((parent, el))
    for parent, el in drop:
        parent.remove(el)
    for el in root.iter():
        tag = _local(el.tag) if isinstance(el.tag, str) else ""
        for name, value in list(el.attrib.items()):
            local = _local(name)
            external = local in ("href", "src") and tag != "a" and not _safe_reference(value)
            base = name == "{http://www.w3.org/XML/1998/namespace}base" or local == "base"
            styled = local == "style" or "url(" in value.lower() or "@import" in value.lower()
            if external or base or (styled and _check_css(value)):
                del el.attrib[name]
        if tag == "style" and _check_css("".join(el.itertext())):
            el.text = ""
            for child in list(el):
                el.remove(child)
    import xml.etree.ElementTree as ET  # serialising only: parsing above went through defusedxml

    ET.register_namespace("", "http://www.w3.org/2000/svg")
    ET.register_namespace("xlink", "http://www.w3.org/1999/xlink")
    try:
        return ET.tostring(root, encoding="unicode")
    except Exception:  # an odd tree the serialiser rejects: the sandbox judges the original
        return svg
