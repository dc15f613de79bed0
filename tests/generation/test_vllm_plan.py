"""Engine settings decided before anything starts: max_model_len from the run's lengths, the recipe
reaching the per-rank servers, and the refusals (no vLLM needed)."""

from __future__ import annotations

import pytest

from r1vision.generation.vllm_launch import vllm_serve_main
from r1vision.generation.vllm_per_rank import check_server_info
from r1vision.generation.vllm_plan import max_image_tokens, required_model_len, resolve_max_model_len
from r1vision.vision.budget import PixelBudget
from tests.helpers.realcfg import hub_folder


def test_max_model_len_from_the_run_lengths():
    qwen25 = PixelBudget.for_family("qwen2_5_vl", max_pixels=401408)  # 512 * 28 * 28
    assert max_image_tokens(qwen25) == 512
    assert required_model_len(qwen25, 1, 1024, 1024) == 1024 + 512 + 1024
    assert required_model_len(qwen25, 2, 1024, 100) == 100 + 2 * 512 + 1024
    qwen3 = PixelBudget.for_family("qwen3_vl", max_pixels=200704)
    assert max_image_tokens(qwen3) == 200704 // (32 * 32)
    assert resolve_max_model_len(None, qwen3, 1, 4096, None) == 1024 + 196 + 4096  # default text allowance
    assert resolve_max_model_len(9000, qwen3, 1, 4096, None) == 9000  # the user's value wins
    # never past the model's context (vLLM refuses it); an overlong prompt is refused at rollout time
    assert resolve_max_model_len(None, qwen3, 1, 4096, None, context=4096) == 4096


def _config(**kw):
    from r1vision.trainer.config import VisionGRPOConfig

    return VisionGRPOConfig(output_dir="/tmp/unused", use_cpu=True, report_to=[], **kw)


def test_config_refuses_impossible_engine_settings():
    with pytest.raises(ValueError, match="sleep_mode needs CUDA"):
        _config(generation_backend="vllm_colocate", vllm_enable_sleep_mode=True)
    with pytest.raises(ValueError, match="colocate mode only"):
        _config(generation_backend="vllm_server", vllm_enable_sleep_mode=True)
    with pytest.raises(ValueError, match="tensor_parallel_size=2"):
        _config(generation_backend="vllm_server", vllm_server_per_rank=True, vllm_tensor_parallel_size=2)
    with pytest.raises(ValueError, match="no room for a prompt"):
        _config(generation_backend="vllm_colocate", vllm_max_model_length=256, max_completion_length=256)
    assert _config(generation_backend="vllm_colocate").max_prompt_text_tokens == 1024  # fine as it is
    with pytest.raises(ValueError, match="vllm_lora_adapters needs generation_backend='vllm_colocate'"):
        _config(generation_backend="vllm_server", vllm_lora_adapters=True, lora_r=8)
    with pytest.raises(ValueError, match="vllm_lora_adapters needs LoRA"):
        _config(generation_backend="vllm_colocate", vllm_lora_adapters=True)
    assert _config(generation_backend="vllm_colocate", vllm_lora_adapters=True, use_peft=True).lora_r == 16
    assert _config(
        generation_backend="hf", vllm_lora_adapters=True, lora_r=8
    ).vllm_lora_adapters  # no sync: ignored
    per_rank = dict(generation_backend="vllm_server", vllm_server_per_rank=True, vllm_lora_adapters=True)
    assert _config(**per_rank, lora_r=8).vllm_lora_adapters


def test_server_info_check_refuses_short_or_mismatched_servers():
    budget = PixelBudget.for_family("qwen2_vl", max_pixels=3136)
    info = {"budget": {"min_pixels": budget.min_pixels, "max_pixels": 3136}, "max_images_per_prompt": 1}
    check_server_info({**info, "max_model_len": 4096}, 8000, budget, 1, 4096)
    with pytest.raises(ValueError, match="holds sequences of 2048 tokens"):
        check_server_info({**info, "max_model_len": 2048}, 8000, budget, 1, 4096)
    with pytest.raises(ValueError, match="resizes images"):
        check_server_info(info, 8000, PixelBudget.for_family("qwen2_vl", max_pixels=6272), 1, None)
    with pytest.raises(ValueError, match="image\\(s\\) per prompt"):
        check_server_info(info, 8000, budget, 2, None)
    # a video trainer needs a server started with --max-videos-per-prompt
    with pytest.raises(
        ValueError, match="takes 0 video\\(s\\) per prompt, the trainer up to 1.*--max-videos-per-prompt 1"
    ):
        check_server_info(info, 8000, budget, 1, None, max_videos=1)
    check_server_info({**info, "max_videos_per_prompt": 1}, 8000, budget, 1, None, max_videos=1)


@pytest.fixture
def keep_signals():
    """vllm_serve_main installs SIGTERM/SIGINT handlers (and ignores both while stopping): restore them."""
    import signal

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_vllm_serve_reads_the_recipe(tmp_path, monkeypatch, keep_signals):
    """The pixel budget, image limit and lengths of a recipe YAML reach every server's command line."""
    from r1vision.generation import vllm_launch

    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "model: some/model\nmax_pixels: 200704\nmin_pixels: 3136\nmax_images_per_prompt: 2\n"
        "max_completion_length: 2048\nmax_prompt_text_tokens: 600\n"
    )
    seen = {}

    class Stop(Exception):
        pass

    def fake_start(self):
        seen.update(model=self.model, args=list(self.server_args))
        raise Stop

    monkeypatch.setattr(vllm_launch.ServerGroup, "start", fake_start)
    monkeypatch.setattr(vllm_launch.ServerGroup, "stop", lambda self, grace=20.0: None)
    with pytest.raises(Stop):
        vllm_serve_main(["--config", str(recipe), "--max-pixels", "100352", "--log-dir", str(tmp_path)])
    args = seen["args"]
    assert seen["model"] == "some/model"
    assert args[args.index("--max-pixels") + 1] == "100352"  # the command line wins over the recipe
    assert args[args.index("--min-pixels") + 1] == "3136"
    assert args[args.index("--max-images-per-prompt") + 1] == "2"
    assert args[args.index("--max-completion-length") + 1] == "2048"
    assert args[args.index("--max-prompt-text-tokens") + 1] == "600"
    assert "--max-lora-rank" not in args  # merged-weight syncs: no LoRA support needed
    # a recipe whose trainer sends LoRA adapters starts servers with LoRA support for its rank
    recipe.write_text("model: some/model\nlora_r: 32\nvllm_lora_adapters: true\n")
    with pytest.raises(Stop):
        vllm_serve_main(["--config", str(recipe), "--log-dir", str(tmp_path)])
    assert seen["args"][seen["args"].index("--max-lora-rank") + 1] == "32"
    assert "--max-videos-per-prompt" not in seen["args"]  # an image task: servers keep videos off
    # the shipped video recipe: servers take one clip per prompt, max_model_len sized by its video budget
    with pytest.raises(Stop):
        vllm_serve_main(["--config", "motion_grpo", "--model", "some/model", "--log-dir", str(tmp_path)])
    args = seen["args"]
    assert args[args.index("--max-videos-per-prompt") + 1] == "1"
    assert args[args.index("--video-max-frames") + 1] == "16"
    assert args[args.index("--video-max-frame-pixels") + 1] == "100352"


def test_vllm_serve_refuses_tensor_parallel_before_starting(tmp_path, monkeypatch, capsys, keep_signals):
    from r1vision.generation import vllm_launch

    started = []
    monkeypatch.setattr(vllm_launch.ServerGroup, "start", lambda self: started.append(1))
    rc = vllm_serve_main(["--model", "m", "--tensor-parallel-size", "2", "--log-dir", str(tmp_path)])
    assert rc == 2 and not started
    assert "--tensor-parallel-size 1" in capsys.readouterr().err
    assert vllm_serve_main(["--log-dir", str(tmp_path)]) == 2  # no model anywhere


def test_vllm_serve_runs_vllms_own_server_for_trl_server_mode(tmp_path, monkeypatch, keep_signals):
    """``--server vllm`` replaces ``trl vllm-serve``: vLLM's server with the recipe's budget, image limit and
    max_model_len, and the NCCL weight transfer TRL's server mode syncs through."""
    import json

    from r1vision.generation import vllm_launch

    recipe = tmp_path / "r.yaml"
    recipe.write_text("max_pixels: 401408\nmax_completion_length: 1024\n")
    seen = {}

    def fake_start(self):
        seen["cmd"] = self.command(0, self.base_port)
        raise KeyboardInterrupt

    monkeypatch.setattr(vllm_launch.ServerGroup, "start", fake_start)
    monkeypatch.setattr(vllm_launch.ServerGroup, "stop", lambda self, grace=20.0: None)
    model = hub_folder("qwen2_5_vl", tmp_path / "qwen2_5_vl")  # the Hub's config and processor files
    argv = ["--server", "vllm", "--config", str(recipe), "--model", str(model),
            "--data-parallel-size", "4", "--tensor-parallel-size", "2", "--log-dir", str(tmp_path)]  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        vllm_serve_main(argv)
    cmd = seen["cmd"]
    assert cmd[1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", str(model)]
    assert cmd[cmd.index("--max-model-len") + 1] == str(1024 + 512 + 1024)
    # max_pixels from the recipe, min_pixels from the model's own preprocessor_config.json (3136)
    assert json.loads(cmd[cmd.index("--mm-processor-kwargs") + 1]) == {
        "size": {"shortest_edge": 3136, "longest_edge": 401408}
    }
    assert json.loads(cmd[cmd.index("--limit-mm-per-prompt") + 1]) == {"image": 1, "video": 0}
    assert cmd[cmd.index("--data-parallel-size") + 1] == "4"
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2"  # TRL's NCCL sync handles TP
    assert json.loads(cmd[cmd.index("--weight-transfer-config") + 1]) == {"backend": "nccl"}


@pytest.mark.parametrize("mode,per_rank", [("colocate", False), ("server", True)])
def test_r1vision_backends_refuse_an_overlong_rollout_prompt_before_generating(mode, per_rank):
    """The shared ``generate`` of the r1vision backends checks lengths first; plain server mode is TRL's."""
    from r1vision.generation.vllm_select import backend_class

    backend = object.__new__(backend_class(mode, per_rank))  # no engine: the check comes before any use
    backend.max_model_length, backend.max_completion_length = 16, 8
    with pytest.raises(ValueError, match="rollout prompt 1: 9 prompt tokens"):
        backend.generate([[1] * 8, [1] * 9], None, 1)


def test_plain_server_mode_is_trls_generation(monkeypatch):
    from trl.generation.vllm_generation import VLLMGeneration

    from r1vision.generation.vllm_select import backend_class

    calls = []
    monkeypatch.setattr(VLLMGeneration, "generate", lambda self, *args: calls.append(args) or "trl")
    backend = object.__new__(backend_class("server", False))
    backend.max_model_length, backend.max_completion_length = 16, 8
    assert backend.generate([[1] * 9], None, 2) == "trl"  # TRL's own generation, unchanged
    assert calls == [([[1] * 9], None, 2, None)]
