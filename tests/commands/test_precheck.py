"""Bad command lines fail in one line with exit 2 before TRL is imported: typos with a suggestion, unknown
recipes, tasks and recipe keys, missing local paths (no Hub retries), out-of-range numbers."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from r1vision.cli import main
from r1vision.commands import _precheck
from tests.helpers.paths import env_with_src


def test_shipped_flag_list_is_the_dataclasses_fields(tmp_path, monkeypatch):
    shipped = _precheck.FLAGS_FILE.read_text()
    monkeypatch.setattr(_precheck, "FLAGS_FILE", tmp_path / "flags.json")
    _precheck.write_flags_file()
    assert (tmp_path / "flags.json").read_text() == shipped, (
        "train_flags.json is stale: run python -m r1vision.commands._precheck"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--learnig_rate", "1e-5"], "unknown flag '--learnig_rate'; did you mean '--learning_rate'?"),
        (["--num-generation", "4"], "unknown flag '--num_generation'; did you mean '--num_generations'?"),
        (["--config", "sgg_grpo_42gb"], "config 'sgg_grpo_42gb' is neither a file nor a shipped config"),
        (["--task", "geometri"], "unknown task 'geometri'; did you mean 'geometry'?"),
        (["--model", "./models/qwen"], "--model ./models/qwen: no such model folder"),
        (
            ["--dataset", "data/maye/geometry3k"],
            "--dataset data/maye/geometry3k: no such dataset file or folder",
        ),
        (["--temperature", "-1"], "--temperature -1: must be >= 0"),
        (["--max_pixels", "-5"], "--max_pixels -5: must be > 0"),
        (["--num_generations", "four"], "--num_generations four: expected a number"),
    ],
)
def test_bad_command_lines_are_one_line(argv, message, capsys, monkeypatch, tmp_path):
    import r1vision.commands._train as train_module

    monkeypatch.chdir(tmp_path)
    # nothing past the pre-check may run: parsing would import TRL
    monkeypatch.setattr(train_module, "parse", lambda *a: pytest.fail("parsed after a refused command line"))
    base = {"--task": "color", "--model": "org/model", "--dataset": "org/data", "--output_dir": "o"}
    for flag in argv[::2]:
        base.pop(flag, None)
    full = ["grpo", *[x for kv in base.items() for x in kv], *argv]
    assert main(full) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_recipe_with_an_unknown_key_is_refused(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("task: color\nlearnig_rate: 1.0e-5\n")
    assert main(["grpo", "--config", str(recipe), "--model", "org/m", "--dataset", "org/d"]) == 2
    assert (
        "unknown option 'learnig_rate' in the recipe; did you mean '--learning_rate'?"
        in capsys.readouterr().err
    )


def test_hub_ids_and_existing_paths_pass(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    _precheck.check_train_argv("grpo", ["--model", "Qwen/Qwen2-VL-2B-Instruct", "--dataset", "data",
                                        "--task", "sgg", "--temperature", "0.7", "--use_peft"])  # fmt: skip
    assert not _precheck.looks_local("JosephZ/vg150_train_sgg_prompt")
    assert _precheck.looks_local("data/color")  # ./data exists: a local path, not a Hub id


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["grpo", "--task", "color", "--model", "org/there", "--dataset", "nonexistent_dir", "--output_dir", "o"],
         "--dataset nonexistent_dir: no such local dataset file or folder, nor a dataset on the Hub"),
        (["sft", "--task", "color", "--model", "org/typo", "--dataset", "org/data", "--output_dir", "o"],
         "--model org/typo: no such local model folder, nor a model on the Hub"),
        (["infer", "--task", "color", "--model", "org/private", "--dataset", "org/data", "--output_dir", "o"],
         "(a private one needs HF_TOKEN or `hf auth login`)"),
        (["score", "--task", "color", "--model", "org/there", "--dataset", "org/gone", "--completions", "c.jsonl"],
         "--dataset org/gone: no such local dataset file or folder, nor a dataset on the Hub"),
    ],
)  # fmt: skip
def test_a_name_neither_here_nor_on_the_hub_is_refused_after_one_request(
    argv, message, fake_hub, capsys, monkeypatch, tmp_path
):
    import r1vision.commands._train as train_module

    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.jsonl").write_text("")
    monkeypatch.setattr(train_module, "parse", lambda *a: pytest.fail("parsed after a refused command line"))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert len(fake_hub.seen) <= 2  # one request per id looked up, no retries


def test_ids_the_hub_has_or_the_cache_holds_pass(fake_hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _precheck.check_train_argv("grpo", ["--model", "org/there", "--dataset", "org/data", "--task", "color"])
    (tmp_path / "hf_home" / "hub" / "models--org--cached").mkdir(parents=True)
    _precheck.check_train_argv("grpo", ["--model", "org/cached", "--dataset", "org/data", "--task", "color"])
    # a dry run resolves built-in shapes itself and asks nothing of the Hub here
    _precheck.check_train_argv("grpo", ["--model", "org/typo", "--dataset", "org/none", "--dry-run"])
    assert [path for path, _ in fake_hub.seen] == ["/api/models/org/there", "/api/datasets/org/data",
                                                  "/api/datasets/org/data"]  # fmt: skip


def test_an_unreachable_hub_is_one_line_in_a_fresh_process(tmp_path):
    """What a user without network waited ~57 s for (the clients' retries, then a 64-line traceback)."""
    from r1vision.trainer.distributed import _free_port

    env = {k: v for k, v in env_with_src().items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
                                                                  "TRANSFORMERS_OFFLINE")}  # fmt: skip
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{_free_port()}", HF_HOME=str(tmp_path / "hf_home"))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "r1vision.cli", "grpo", "--task", "color", "--model", "org/m",
                           "--dataset", "nonexistent_dir", "--output_dir", "o"], capture_output=True, text=True,
                          env=env, cwd=tmp_path)  # fmt: skip
    elapsed = time.perf_counter() - start
    err = done.stderr.strip()
    assert done.returncode == 2 and len(err.splitlines()) == 1, err
    assert "--model org/m: no such local model folder, and the Hub" in err and "cannot be reached" in err
    assert elapsed < 5.0, elapsed


def test_error_path_is_fast_in_a_fresh_process(tmp_path):
    """What a user waits for: a fresh `r1vision grpo` with a typo or a missing local path (target <= 5 s;
    benchmarks/bench_startup.py times it too)."""
    for argv in (["--learnig_rate", "1"], ["--dataset", "./no/such/folder"]):
        script = (
            "import sys; from r1vision.cli import main; "
            f"rc = main(['grpo', '--task', 'color', '--model', 'org/m', *{argv!r}]); "
            "print('imported trl' if 'trl' in sys.modules else 'no trl'); sys.exit(rc)"
        )
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env_with_src(),
                              cwd=tmp_path)  # fmt: skip
        elapsed = time.perf_counter() - start
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stdout.strip() == "no trl" and elapsed < 5.0, (argv, elapsed, done.stdout)


def test_a_tracker_that_is_not_installed_is_refused_naming_the_install(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "wandb" else real(n, *a))
    argv = [
        "grpo",
        "--task",
        "color",
        "--model",
        "org/m",
        "--dataset",
        "org/d",
        "--report_to",
        "tensorboard",
        "wandb",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--report_to wandb: wandb is not installed; pip install 'r1vision[wandb]'" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["infer", "--task", "color", "--model", "./nope", "--dataset", "org/d", "--output_dir", "o"],
         "--model ./nope: no such model folder"),
        (["infer", "--model", "org/m", "--dataset", "org/d", "--output_dir", "o"],
         "the task is required: org/m has no r1vision_run.json naming it; pass --task"),
        (["eval", "--task", "color", "--dataset", "org/d", "--pred", "preds/"], "--pred preds/: no such prediction"),
        (["score", "--task", "color", "--model", "org/m", "--dataset", "org/d", "--completions", "c.jsonl"],
         "--completions c.jsonl: no such completions file"),
        (["infer", "--task", "color", "--model", "org/m", "--dataset", "org/d", "--output_dir", "o",
          "--temperature", "-1"], "temperature"),
    ],
)  # fmt: skip
def test_infer_eval_score_refuse_in_one_line(argv, message, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["eval", "--task", "color", "--dataset", "d", "--pred", "p", "--spl", "test"],
         "unrecognized arguments: --spl test; did you mean '--split'?"),
        (["estimate-memory", "--model", "qwen2.5-vl-7b", "--gpus", "x"], "argument --gpus: invalid int value: 'x'"),
        (["infer", "--model", "m", "--dataset", "d"], "the following arguments are required: --output_dir"),
    ],
)  # fmt: skip
def test_tool_command_argument_errors_are_one_line_without_abbreviations(argv, message, capsys):
    """argparse's own refusals (an unknown or abbreviated flag, a bad value, a missing flag) in the same
    style as every other refusal: one line, exit 2, no usage block; ``--spl`` is not taken for ``--split``."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and message in err and len(err.splitlines()) == 1, err


def test_image_path_leaving_the_dataset_folder_is_refused_by_row(color_dir, tmp_path):
    import json

    from r1vision.tasks.loading import DatasetLoadError, load_rows, locate, read_json_lines

    rows = [json.loads(line) for line in (color_dir / "train.jsonl").read_text().splitlines()]
    rows[2]["image"] = "sub/../" + rows[2]["image"]  # down and back up: still inside
    rows[3]["image"] = "../../etc/passwd"
    data = tmp_path / "escape"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for read in (lambda: load_rows(str(data)), lambda: list(read_json_lines(locate(str(data))))):
        with pytest.raises(DatasetLoadError, match="row 3: image path '../../etc/passwd' leads outside"):
            read()


def test_help_shows_r1visions_options_grouped_first_without_importing_trl():
    script = (
        "import sys; from r1vision.cli import main; main(['grpo', '--help']); "
        "print('imported trl' if 'trl' in sys.modules else 'no trl')"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env_with_src())
    out = done.stdout
    assert done.returncode == 0 and out.strip().endswith("no trl"), done.stderr
    order = [out.index(h) for h in ("launching:", "task and data:", "vision:", "rewards and advantages:",
                                    "LoRA and model loading (TRL's ModelConfig flags):", "TRL's GRPOConfig")]  # fmt: skip
    assert order == sorted(order)
    own, trl = out.split("TRL's GRPOConfig", 1)
    assert "--max_pixels" in own and "--use_peft" in own and "--learning_rate" not in own
    assert "learning_rate" in trl and len(out.splitlines()) < 200  # was 1,382 lines of argparse
