"""Is a Hub id there? One request, no retries, before anything that would spend a minute finding out.

The Hub clients retry a failed connection with backoff (five times per file, ~55 s measured on a machine
without network) before raising a long traceback, and a missing folder named without ``./`` looks to them
like a Hub id. :func:`lookup` answers from the Hub cache when it holds a copy, else with one request to
``{HF_ENDPOINT}/api/{models|datasets}/{id}`` (``HUB_TIMEOUT_S``, the user's token if any);
``R1VISION_HUB_CHECK=0`` turns the request off (an endpoint without those routes). Standard library only:
the command-line checks call it before torch or transformers import.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HUB_TIMEOUT_S = 5.0
OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


@dataclass(frozen=True)
class Lookup:
    """``status``: ``cached``, ``found``, ``missing`` (401/404), ``offline`` (offline mode, no cached
    copy), ``unreachable`` (no connection) or ``unknown`` (another HTTP answer: left to the library)."""

    status: str
    endpoint: str
    detail: str = ""
    token: bool = False


def offline() -> bool:
    """Whether the user switched the Hub clients to offline mode."""
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on") for k in OFFLINE_VARS)


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def _hf_home() -> Path:
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface").expanduser()


def cached(repo_id: str, kind: str) -> bool:
    """Whether the Hub cache (for a dataset also the ``datasets`` cache) holds a copy of ``repo_id``."""
    hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if hub is None and kind == "model":
        hub = os.environ.get("TRANSFORMERS_CACHE")
    places = [Path(hub or _hf_home() / "hub").expanduser() / f"{kind}s--{repo_id.replace('/', '--')}"]
    if kind == "dataset":
        data = Path(os.environ.get("HF_DATASETS_CACHE") or _hf_home() / "datasets").expanduser()
        places.append(data / repo_id.replace("/", "___"))
    return any(place.is_dir() for place in places)


def token() -> str | None:
    """The user's Hub token (``HF_TOKEN``, else the file ``hf auth login`` writes), or None."""
    value = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if value:
        return value.strip()
    path = Path(os.environ.get("HF_TOKEN_PATH") or _hf_home() / "token").expanduser()
    return (path.read_text().strip() or None) if path.is_file() else None


def lookup(repo_id: str, kind: str = "model") -> Lookup:
    """Where ``repo_id`` (a ``kind`` of ``model`` or ``dataset``) stands, in one request at most."""
    if kind not in ("model", "dataset"):
        raise ValueError(f"kind must be 'model' or 'dataset', got {kind!r}")
    url_root = endpoint()
    if cached(repo_id, kind):
        return Lookup("cached", url_root)
    if offline():
        return Lookup("offline", url_root)
    if os.environ.get("R1VISION_HUB_CHECK", "1").strip() == "0":  # e.g. a mirror without the /api routes
        return Lookup("unknown", url_root, "R1VISION_HUB_CHECK=0")
    request = urllib.request.Request(f"{url_root}/api/{kind}s/{urllib.parse.quote(repo_id, safe='/')}")
    user_token = token()
    if user_token:
        request.add_header("Authorization", f"Bearer {user_token}")
    try:
        with urllib.request.urlopen(request, timeout=HUB_TIMEOUT_S):
            return Lookup("found", url_root, token=bool(user_token))
    except urllib.error.HTTPError as exc:
        status = "missing" if exc.code in (401, 404) else "unknown"
        return Lookup(status, url_root, f"HTTP {exc.code}", token=bool(user_token))
    except (urllib.error.URLError, OSError) as exc:  # DNS, refused, timeout
        return Lookup("unreachable", url_root, str(getattr(exc, "reason", exc)), token=bool(user_token))


__all__ = ["HUB_TIMEOUT_S", "Lookup", "cached", "endpoint", "lookup", "offline", "token"]
