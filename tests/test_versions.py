"""The start-up check that TRL + vLLM are a tested combination, with a message that says which."""

from __future__ import annotations

import logging

import pytest

from r1vision.versions import (
    TESTED_TRL_VLLM,
    UntestedVersionsError,
    check_generation_stack,
    generation_stack_problems,
)


def test_tested_pairs_pass():
    assert generation_stack_problems(True, "1.16.0", "0.22.0") == []
    assert generation_stack_problems(True, "1.16.0", "0.31.0") == []
    assert generation_stack_problems(True, "1.16.0", "0.31.2+cpu") == []
    assert generation_stack_problems(False, "1.16.0", None) == []


def test_untested_pairs_are_named():
    (msg,) = generation_stack_problems(True, "1.16.0", "0.32.0")
    assert "vLLM 0.32.0 with TRL 1.16.0 is not a tested combination" in msg and ">=0.22.0,<0.32" in msg
    # a release candidate of the next minor is outside (the hand parser read 0.32.0rc1 as 0.32.1, and
    # 0.31.0rc1 as 0.31.1); a build tag is ignored
    assert generation_stack_problems(True, "1.16.0", "0.32.0rc1") != []
    assert generation_stack_problems(True, "1.16.0", "0.31.9+cu130") == []
    assert generation_stack_problems(True, "1.16.0", "not-a-version") != []
    (msg,) = generation_stack_problems(True, "1.16.0", "0.21.1")
    assert "0.21.1" in msg
    probs = generation_stack_problems(False, "1.17.0")
    assert probs == [f"TRL 1.17.0 is not a tested release (tested: {', '.join(sorted(TESTED_TRL_VLLM))})"]


def test_missing_vllm_is_an_error_only_when_used(monkeypatch):
    import r1vision.versions as versions

    monkeypatch.setattr(versions, "installed", lambda name: {"trl": "1.16.0"}.get(name))
    assert "vLLM is not installed" in generation_stack_problems(True)[0]
    assert generation_stack_problems(False) == []
    with pytest.raises(UntestedVersionsError, match="not installed"):
        check_generation_stack(use_vllm=True, strict=False)


def test_installed_stack_check(monkeypatch):
    monkeypatch.delenv("R1VISION_STRICT_VERSIONS", raising=False)
    assert check_generation_stack(use_vllm=False) == []  # the CI environment is the tested one


def test_strict_mode_raises_and_default_warns(monkeypatch, caplog):
    import r1vision.versions as versions

    monkeypatch.setattr(versions, "installed", lambda name: {"trl": "1.16.0", "vllm": "0.32.0"}.get(name))
    with caplog.at_level(logging.WARNING):
        problems = check_generation_stack(use_vllm=True, strict=False)
    assert problems and "not a tested combination" in caplog.text
    monkeypatch.setenv("R1VISION_STRICT_VERSIONS", "1")
    with pytest.raises(UntestedVersionsError, match="vLLM 0.32.0 with TRL 1.16.0"):
        check_generation_stack(use_vllm=True)


def test_every_patched_upstream_line_is_where_the_table_says() -> None:
    from r1vision.versions import PATCHES, patch_anchor_problems

    assert patch_anchor_problems() == []
    assert {p.upstream.split("/", 1)[0] for p in PATCHES} >= {"trl", "transformers"}
    for patch in PATCHES:
        assert patch.test.startswith("tests/") and patch.where.startswith("r1vision/"), patch


def test_a_moved_upstream_line_is_reported(tmp_path) -> None:
    from r1vision.versions import PATCHES, patch_anchor_problems

    first = PATCHES[0]
    rel, _, line = first.upstream.rpartition(":")
    path = tmp_path / rel
    path.parent.mkdir(parents=True)
    path.write_text("\n" * int(line) + first.anchor + "\n")  # one line further down
    problems = patch_anchor_problems(str(tmp_path))
    assert any(first.upstream in p for p in problems)
    assert any("is missing" in p for p in problems)  # the other files are not in this fake tree
