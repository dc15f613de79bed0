"""Bad input across the commands, as a new user types it: every case ends in one line naming the flag, file,
row or field, with exit code 2, before any model loads (a traceback anywhere in this table fails it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from r1vision.cli import main


@pytest.fixture(scope="module")
def place(tmp_path_factory, tiny_model):
    """A user's folder: a color dataset, a tiny VLM, a tiny SD3, prompt files (one with a non-UTF-8 byte),
    a file where a folder belongs, a run folder with metrics."""
    from r1vision.diffusion.data import synth_t2i
    from r1vision.tasks.color.synth import synth_color
    from r1vision.tasks.sgg.synth import synth_sgg
    from r1vision.testing.tiny_diffusion import tiny_sd3_path

    root = tmp_path_factory.mktemp("user")
    synth_color(root / "data", 8, seed=0, split="train")
    synth_sgg(root / "sg", 2, seed=0, split="val")
    synth_t2i(root / "prompts", 8, kind="brightness")
    (root / "bad").mkdir()
    (root / "bad" / "train.txt").write_bytes(b'a photo \xff "OPEN"\n')
    (root / "afile").write_text("")
    (root / "run").mkdir()
    (root / "run" / "metrics.csv").write_text("step,loss\n1,0.5\n")
    return {"root": root, "vlm": tiny_model("qwen2_vl"), "sd3": str(tiny_sd3_path(pixel_space=True))}


def _run(argv: list[str], cwd: Path, monkeypatch, capsys) -> tuple[int, str]:
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's refusals leave through SystemExit, as from the console script
        code = exc.code
    return code, capsys.readouterr().err.strip()


VLM = ["--task", "color", "--model", "{vlm}", "--dataset", "data", "--use_cpu", "true"]
T2I = ["--config", "t2i_smoke", "--model", "{sd3}", "--dataset", "prompts"]

CASES = [
    (["grpo", *VLM, "--output_dir", "afile"], "--output_dir afile: a file is in the way"),
    (["grpo", *VLM, "--output_dir", "o", "--min_pixels", "9000", "--max_pixels", "3136"],
     "--min_pixels 9000 is above --max_pixels 3136"),
    (["grpo", *VLM, "--output_dir", "o", "--attn_implementation", "flash_attention_2"],
     "flash-attn package is not installed"),
    (["grpo", *VLM, "--output_dir", "o", "--num_processes", "0"], "--num_processes 0: must be an integer >= 1"),
    (["grpo", "--config=", *VLM, "--output_dir", "o"], "--config needs a recipe"),
    (["grpo", *VLM, "--output_dir", "o", "--resume_from_checkpoint", "/nonexistent/checkpoint-3"],
     "--resume_from_checkpoint /nonexistent/checkpoint-3: no such checkpoint folder"),
    (["grpo", *VLM, "--output_dir", "o", "--dataset_split", "nosuchsplit"], "no files for split 'nosuchsplit'"),
    (["infer", "--task", "color", "--model", "{vlm}", "--dataset", "data", "--output_dir", "p", "--batch-size", "0"],
     "argument --batch_size/--batch-size: must be >= 1, got 0"),
    (["infer", "--task", "color", "--model", "data", "--dataset", "data", "--output_dir", "p"],
     "--model data: not a model folder"),
    (["synth", "--task", "color", "--output_dir", "s", "--n", "-3"], "argument --n: must be >= 1, got -3"),
    (["t2i-grpo", *T2I, "--output_dir", "o", "--model", "{vlm}"], "not a diffusers pipeline folder"),
    (["t2i-grpo", *T2I, "--output_dir", "o", "--resolution", "0"], "resolution must be a positive multiple of 16"),
    (["t2i-grpo", *T2I, "--output_dir", "o", "--reward_funcs", "pickscore"],
     "reward 'pickscore': pickscore() missing 1 required positional argument: 'path'"),
    (["t2i-grpo", *T2I, "--output_dir", "o", "--reward_funcs", "nosuch"], "unknown reward 'nosuch'"),
    (["t2i-grpo", *T2I, "--output_dir", "o", "--dataset", "bad"], "bad/train.txt:1: not UTF-8 text"),
    (["t2i-grpo", *T2I, "--output_dir", "o", "--accelerate_config", "zero3"], "not supported by t2i-grpo"),
    (["t2i-grpo", *T2I, "--output_dir", "o", "--per_device_train_batch_size", "3"],
     "does not split into groups of num_generations=8"),
    (["t2i-grpo", *T2I, "--output_dir", "o", "--resume_from_checkpoint", "last"], "no complete checkpoint"),
    (["t2i-sample", "--model", "{sd3}", "--prompts", "bad/train.txt", "--output_dir", "o"],
     "bad/train.txt:1: not UTF-8 text"),
    (["t2i-eval", "--model", "{sd3}", "--prompts", "prompts", "--output_dir", "o", "--steps", "0"],
     "argument --steps: must be >= 1, got 0"),
    (["report", "data", "--output_dir", "r"], "data: no metrics.csv"),
    (["report", "run", "--metrics", "nosuch", "--output_dir", "r"], "--metrics: metric(s) ['nosuch'] not in"),
    (["report", "run", "--output_dir", "afile"], "--output_dir afile: a file is in the way"),
    (["estimate-memory", "--gpus", "0", "--model", "qwen2.5-vl-7b"], "argument --gpus: must be >= 1, got 0"),
    (["merge", "/nonexistent/adapter", "--output_dir", "o"], "not a LoRA adapter folder (no such folder)"),
    (["viz", "--task", "sgg", "--dataset", "sg", "--index", "999", "--output_dir", "v"], "row 999 is outside"),
    (["demo", "--seeds", "-1", "--quick"], "argument --seeds: must be >= 1, got -1"),
    (["demo", "--threads", "0", "--quick"], "argument --threads: must be >= 1, got 0"),
    (["vllm-serve", "--config", "sgg_grpoo", "--model", "{vlm}"], "config 'sgg_grpoo' is neither a file"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "message"), CASES, ids=[" ".join(c[0][:1] + c[0][-2:]) for c in CASES])
def test_bad_input_is_one_line_with_exit_2(place, argv, message, monkeypatch, capsys):
    argv = [a.format(**{k: v for k, v in place.items() if isinstance(v, str)}) for a in argv]
    code, err = _run(argv, place["root"], monkeypatch, capsys)
    # progress bars of data already read (datasets' "examples/s") are not part of the refusal
    lines = [line for line in err.splitlines() if line.strip() and "examples/s" not in line]
    assert code == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and message in lines[0], err
    assert not (place["root"] / "o").exists()  # refused before anything was written
