"""The one reward registry (``r1vision/rewards.py``) for the VLM and image rewards: one register_reward, the
range guard on every reward a trainer calls, dotted paths, options for factories, and "did you mean"."""

from __future__ import annotations

import math

import pytest

from r1vision import rewards
from r1vision.cli import main


def test_the_guard_clips_keeps_no_signal_and_survives_a_raising_reward():
    def wild(*args, **kw):
        return [2.0, -1.0, math.nan, None, "x"]

    guarded = rewards.guard_reward(wild, 0.0, 1.0)
    assert guarded(["p"] * 5, [0] * 5) == [1.0, 0.0, 0.0, None, 0.0]
    assert guarded(prompts=["p"] * 5, completions=[0] * 5) == [1.0, 0.0, 0.0, None, 0.0]  # TRL's names

    def broken(prompts, images, **kw):
        raise RuntimeError("bug")

    assert rewards.guard_reward(broken, -1.0, -0.5)(["p"] * 2, images=[0, 0]) == [-1.0, -1.0]
    assert rewards.guard_reward(wild, 0.0, 1.0).__wrapped__ is wild


def test_image_rewards_are_registered_with_ranges_and_options():
    import r1vision.diffusion.rewards  # noqa: F401 - registers the image rewards

    assert {"ocr", "ocr_strict", "brightness", "pickscore", "clip_score"} <= set(rewards.registered("image"))
    assert "brightness" not in rewards.registered("text")  # the kinds do not mix
    (ocr,) = rewards.resolve(["ocr"], "image", options={"ocr": {"engine": lambda image: "OPEN"}})
    assert ocr.low == 0.0 and ocr.high == 1.0
    assert ocr.func(['a sign that says "OPEN"'], [object()]) == [1.0]
    with pytest.raises(rewards.UnknownRewardError, match="takes no options"):
        rewards.resolve(["brightness"], "image", options={"brightness": {"x": 1}})
    with pytest.raises(rewards.UnknownRewardError, match=r"unknown reward 'ocrr' \(did you mean 'ocr'\?\)"):
        rewards.resolve(["ocrr"], "image")


def test_one_register_reward_serves_both_trainers(tmp_path):
    rewards.register_reward(
        "half", lambda prompts, images, **kw: [0.5] * len(images), kind="image", low=0, high=1
    )
    try:
        (spec,) = rewards.guarded(rewards.resolve(["half"], "image"))
        assert spec.func(["p", "q"], [1, 2]) == [0.5, 0.5]
        with pytest.raises(rewards.UnknownRewardError):
            rewards.resolve(["half"], "text")
    finally:
        rewards._REGISTRY.pop("half")


def test_an_unknown_image_reward_on_the_command_line_is_one_line_with_a_suggestion(tmp_path, capsys):
    from r1vision.diffusion.data import synth_t2i
    from r1vision.testing.tiny_diffusion import tiny_sd3_path

    synth_t2i(tmp_path / "p", 8, kind="brightness")
    argv = ["t2i-grpo", "--config", "t2i_smoke", "--model", str(tiny_sd3_path(pixel_space=True)), "--dataset",
            str(tmp_path / "p"), "--output_dir", str(tmp_path / "o"), "--reward_funcs", "brightnes"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown reward 'brightnes' (did you mean 'brightness'?)" in err[0]
