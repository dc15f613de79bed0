"""Videos without torchvision: frame sampling (qwen-vl-utils' rule), decoding (PyAV / frame folders),
Qwen-VL's patch layout, and the token count the budget predicts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoProcessor

from r1vision.tasks.motion.synth import motion_frames, synth_motion, write_video
from r1vision.vision.family import FAMILIES
from r1vision.vision.video import (
    Clip,
    VideoBudget,
    VideoLoadError,
    load_clip,
    sample_indices,
    video_tokens,
)
from r1vision.vision.video_processor import QwenVideoProcessor, video_budget_from_args


@pytest.fixture(scope="module", params=["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def processor(request, tiny_model):
    return request.param, AutoProcessor.from_pretrained(tiny_model(request.param))


def test_two_equal_frames_give_the_image_patches(processor):
    # Qwen-VL's image processor repeats an image over the temporal patch: a still video is that image.
    _, proc = processor
    f = proc.video_processor.factor
    frame = np.random.default_rng(0).integers(0, 256, (2 * f, 3 * f, 3), dtype=np.uint8)
    image = proc.image_processor(images=[Image.fromarray(frame)], return_tensors="pt")
    video = proc.video_processor([Clip(np.stack([frame, frame]), 2.0, 2, [0, 1], (3 * f, 2 * f))])
    assert video["video_grid_thw"].tolist() == image["image_grid_thw"].tolist() == [[1, 4, 6]]
    torch.testing.assert_close(video["pixel_values_videos"], image["pixel_values"], atol=1e-5, rtol=0)


def test_patch_rows_invert_to_the_normalised_frames():
    vp = QwenVideoProcessor(
        patch_size=4, temporal_patch_size=2, merge_size=2, image_mean=(0, 0, 0), image_std=(1, 1, 1)
    )
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 256, (3, 16, 24, 3), dtype=np.uint8)  # 3 frames: padded with the last one
    rows, (t, h, w) = vp.patchify(frames)
    assert (t, h, w) == (2, 4, 6) and rows.shape == (2 * 4 * 6, 3 * 2 * 4 * 4)
    x = (
        rows.reshape(t, h // 2, w // 2, 2, 2, 3, 2, 4, 4)
        .permute(0, 6, 5, 1, 3, 7, 2, 4, 8)
        .reshape(4, 3, 16, 24)
    )
    expected = torch.from_numpy(np.concatenate([frames, frames[-1:]])).permute(0, 3, 1, 2).float() / 255
    torch.testing.assert_close(x, expected)


@pytest.mark.parametrize(
    ("total", "fps", "expected"),
    [
        (300, 30.0, 16),  # 10 s at 2 fps = 20 frames, capped at max_frames 16
        (90, 30.0, 6),  # 3 s at 2 fps
        (9, 4.0, 4),  # 4.5 wanted, min_frames 4, even
        (3, 30.0, 2),  # fewer frames than min_frames: an even count of what is there
        (1, 30.0, 1),  # one frame: the processor repeats it over the temporal patch
    ],
)
def test_frame_sampling_follows_qwen_vl_utils(total, fps, expected):
    keep = sample_indices(total, fps, VideoBudget())
    assert len(keep) == expected
    assert keep[0] == 0 and keep[-1] == total - 1 and keep == sorted(keep)


def test_mp4_and_frame_folder_decode_to_the_same_content(tmp_path):
    import random

    frames = motion_frames("right", "red", "square", random.Random(0), 56, 8)
    budget = VideoBudget(max_frame_pixels=56 * 56, min_frame_pixels=28 * 28)
    mp4 = load_clip(write_video(frames, tmp_path / "v.mp4", 4, "mp4"), budget)
    folder = load_clip(write_video(frames, tmp_path / "v", 4, "frames"), budget, fps=4.0)
    assert mp4.shape == folder.shape == (4, 56, 56, 3)
    assert mp4.fps == pytest.approx(4.0) and mp4.total_num_frames == 8 and mp4.frames_indices == [0, 2, 5, 7]
    assert folder.frames_indices == mp4.frames_indices
    assert np.abs(mp4.astype(int) - folder.astype(int)).mean() < 3  # lossy codec, same picture
    # The shape really moves right between the first and last kept frame.
    red = lambda clip, i: np.argwhere((clip[i, :, :, 0] > 150) & (clip[i, :, :, 1] < 100))[:, 1].mean()  # noqa: E731
    assert red(mp4, -1) > red(mp4, 0) + 20


def test_a_video_file_decodes_once_per_budget_until_it_changes(tmp_path, monkeypatch):
    """The decoded-clip cache: a second read of the same file and budget decodes nothing, gives equal frames
    and metadata in a copy of its own; another budget, a rewritten file, or a clip pushed out by the size
    cap decodes again."""
    import random

    from r1vision.vision import video

    cache = video._ClipCache(max_bytes=2 * 4 * 56 * 56 * 3)  # two 4-frame clips
    monkeypatch.setattr(video, "_CLIPS", cache)
    decoded = []
    real = video._decode_container
    monkeypatch.setattr(
        video, "_decode_container", lambda src, *a, **k: decoded.append(src) or real(src, *a, **k)
    )
    rng = random.Random(0)
    paths = [write_video(motion_frames(d, "red", "square", rng, 56, 8), tmp_path / f"{d}.mp4", 4, "mp4")
             for d in ("left", "right", "up")]  # fmt: skip
    budget = VideoBudget(max_frame_pixels=56 * 56, min_frame_pixels=28 * 28)
    first = load_clip(paths[0], budget)
    first[:] = 0  # a caller writing into its clip does not reach the cache
    again = load_clip(str(paths[0]), budget)
    assert len(decoded) == 1 and again.any()
    assert (again.fps, again.total_num_frames, again.frames_indices, again.original_size) == (
        4.0, 8, [0, 2, 5, 7], (56, 56))  # fmt: skip
    load_clip(paths[0], VideoBudget(max_frame_pixels=28 * 28, min_frame_pixels=28 * 28))  # another budget
    assert len(decoded) == 2
    load_clip(paths[1], budget)  # the cap holds two clips: the oldest (paths[0], first budget) leaves
    load_clip(paths[0], budget)
    assert len(decoded) == 4
    write_video(motion_frames("down", "blue", "circle", rng, 56, 8), paths[0], 4, "mp4")
    rewritten = load_clip(paths[0], budget)
    assert len(decoded) == 5 and not np.array_equal(rewritten, again)


def test_bad_videos_fail_naming_the_file(tmp_path):
    budget = VideoBudget()
    with pytest.raises(VideoLoadError, match="not found: .*missing.mp4"):
        load_clip("missing.mp4", budget, tmp_path)
    (tmp_path / "junk.mp4").write_bytes(b"not a video at all")
    with pytest.raises(VideoLoadError, match="junk.mp4"):
        load_clip("junk.mp4", budget, tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(VideoLoadError, match="no frame images"):
        load_clip(tmp_path / "empty", budget)


@pytest.mark.parametrize("total_pixels", [None, 6 * 28 * 28 * 4])
def test_budget_token_count_is_what_the_processor_emits(processor, tmp_path, total_pixels):
    family, proc = processor
    f = FAMILIES[family].factor
    args = type(
        "A",
        (),
        {
            "video_max_frame_pixels": 9 * f * f,
            "video_total_pixels": total_pixels and total_pixels * f * f // (28 * 28),
        },
    )
    budget = video_budget_from_args(family, args, proc)
    frames = [Image.new("RGB", (90, 60), (i * 20, 0, 0)) for i in range(12)]
    clip = load_clip(frames, budget, fps=6.0)
    conv = [{"role": "user", "content": [{"type": "video", "video": clip}, {"type": "text", "text": "go"}]}]
    out = proc.apply_chat_template([conv], add_generation_prompt=True, tokenize=True, return_dict=True)
    pad = proc.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert list(out["input_ids"][0]).count(pad) == budget.num_tokens(90, 60, len(clip))
    assert out["video_grid_thw"].tolist()[0][0] == len(clip) // 2


@pytest.mark.parametrize("total_pixels", [None, 8 * 28 * 28])
def test_header_token_count_equals_the_decoded_clips(tmp_path, total_pixels):
    # The SFT length pre-check counts video tokens from headers; decoding must give the same count.
    budget = VideoBudget(max_frame_pixels=9 * 28 * 28, max_frames=6, total_pixels=total_pixels)
    frames = [Image.new("RGB", (90, 60), (i * 20, 0, 0)) for i in range(13)]
    mp4 = write_video(frames, tmp_path / "a.mp4", 5, "mp4")
    folder = write_video(frames, tmp_path / "a", 5, "frames")
    for value, fps in ((mp4, None), (folder, None), (folder, 2.5), (frames, None), (np.stack(frames), 3.0)):
        clip = load_clip(value, budget, fps=fps)
        expected = budget.num_tokens(*clip.original_size, len(clip))  # what the processor emits (test above)
        assert video_tokens(value, budget, fps=fps) == (expected, (90, 60)), (value, fps)
    assert video_tokens(clip, budget) == (expected, (90, 60))
    with pytest.raises(VideoLoadError, match="not found"):
        video_tokens(tmp_path / "missing.mp4", budget)


def test_budget_defaults_scale_with_the_family_factor():
    assert VideoBudget.for_family("qwen2_vl").max_frame_pixels == 128 * 28 * 28
    assert VideoBudget.for_family("qwen3_vl").max_frame_pixels == 128 * 32 * 32
    small = VideoBudget.for_family("qwen2_vl", max_frame_pixels=2 * 28 * 28)
    assert small.min_frame_pixels == 2 * 28 * 28  # a cap below the default floor lowers the floor
    with pytest.raises(ValueError, match="video_min_frames"):
        VideoBudget(min_frames=8, max_frames=4)


def test_clip_keeps_its_metadata_through_pickling():
    import pickle

    clip = Clip(np.zeros((2, 28, 28, 3), np.uint8), 4.0, 8, [0, 7], (56, 56))
    back = pickle.loads(pickle.dumps(clip))
    assert (back.fps, back.total_num_frames, back.frames_indices, back.original_size) == (
        4.0,
        8,
        [0, 7],
        (56, 56),
    )


def test_plain_frames_with_vllms_metadata_process_as_the_clip():
    """vLLM hands the processor plain arrays with their metadata (``video_item``): the patches, grid and
    metadata (Qwen3-VL's timestamps come from it) are the clip's; a count mismatch is refused."""
    from r1vision.generation.vllm_engine import video_item

    rng = np.random.default_rng(0)
    clip = Clip(rng.integers(0, 255, (4, 56, 28, 3), dtype=np.uint8), 6.0, 30, [0, 9, 19, 29], (100, 200))
    vp = QwenVideoProcessor()
    frames, metadata = video_item(clip)
    assert type(frames) is np.ndarray and metadata["do_sample_frames"] is False
    ours = vp(videos=[clip], return_metadata=True)
    plain = vp(videos=[[frames]], video_metadata=[[metadata]], return_metadata=True)
    assert torch.equal(ours["pixel_values_videos"], plain["pixel_values_videos"])
    assert plain["video_grid_thw"].tolist() == [[2, 4, 2]]
    got, want = plain["video_metadata"][0], ours["video_metadata"][0]
    assert (got.fps, got.frames_indices, got.total_num_frames, got.width, got.height) == (
        want.fps, want.frames_indices, want.total_num_frames, 100, 200
    )  # fmt: skip
    with pytest.raises(ValueError, match="2 videos but 1 video_metadata"):
        vp(videos=[frames, frames], video_metadata=[metadata])


def test_synth_rows_follow_video_r1_schema(tmp_path):
    import json

    path = synth_motion(tmp_path, 6, seed=3)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    keys = {
        "problem_id",
        "problem",
        "data_type",
        "problem_type",
        "options",
        "process",
        "solution",
        "path",
        "data_source",
    }
    assert all(keys <= set(r) for r in rows)
    assert all(r["data_type"] == "video" and r["problem_type"] == "multiple choice" for r in rows)
    for r in rows:
        letter = r["solution"][len("<answer>")]
        assert any(o.startswith(f"{letter}. {r['direction']}") for o in r["options"])
        assert (tmp_path / r["path"]).is_file()
    assert path.read_text() == synth_motion(tmp_path / "again", 6, seed=3).read_text()
    fixed = synth_motion(tmp_path / "fixed", 6, seed=3, shuffle_options=False, container="frames")
    for r in map(json.loads, fixed.read_text().splitlines()):  # the letter names the direction
        assert r["options"] == ["A. left", "B. right", "C. up", "D. down"]
        assert (
            r["solution"] == f"<answer>{'ABCD'['left right up down'.split().index(r['direction'])]}</answer>"
        )


@pytest.mark.parametrize("direction", ["left", "right", "up", "down"])
def test_travel_moves_the_shape_part_of_the_way(direction):
    import random

    def centre(img):
        ys, xs = np.nonzero(np.asarray(img).min(-1) < 200)  # the shape, darker than the background
        return np.array([xs.mean(), ys.mean()])

    for travel, expected in ((1.0, 42), (0.25, 10)):  # 56 px canvas, 14 px shape: 42 px free span
        frames = motion_frames(direction, "red", "square", random.Random(1), 56, 8, travel)
        step = centre(frames[-1]) - centre(frames[0])
        sign = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}[direction]
        assert np.allclose(step, np.array(sign) * expected, atol=0.5), (travel, step)
    with pytest.raises(ValueError, match="travel"):
        motion_frames(direction, "red", "square", random.Random(1), 56, 8, 0.0)
