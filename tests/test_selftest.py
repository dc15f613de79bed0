"""`r1vision selftest` and `r1vision demo --quick` run end to end and report honestly."""

from r1vision import selftest


def test_selftest_passes_here(capsys):
    assert selftest.run_checks("single") == 0
    out = capsys.readouterr().out
    assert out.count("PASS") == 4 and "4/4 checks passed" in out
    assert "weights moved" in out  # the GRPO check learned something, not only ran


def test_selftest_grpo_fails_when_sampling_is_greedy(monkeypatch, tmp_path):
    """A sampling temperature so low that every sample of a group is the argmax text: every group scores the
    same, nothing can learn, and the check says so instead of passing with loss 0."""
    import pytest

    from r1vision.trainer import config as config_module

    real = config_module.VisionGRPOConfig
    monkeypatch.setattr(config_module, "VisionGRPOConfig", lambda **kw: real(**kw, temperature=1e-4))
    with pytest.raises(RuntimeError, match="every sample of every group scored the same"):
        selftest._grpo(tmp_path, "qwen2_vl", "single")


def test_selftest_fails_on_version_mismatch(monkeypatch, capsys):
    from r1vision import versions

    monkeypatch.setitem(versions.TESTED, "trl", "0.0.1")
    assert selftest._check("versions", selftest._versions) is False
    assert "outside the tested matrix: trl" in capsys.readouterr().out


def test_selftest_servers_leave_the_gpu_to_training(monkeypatch):
    """On a GPU the check's per-rank servers must not take vLLM's default 0.9 of the GPU they share."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args = selftest._server_memory_args()
    assert args[0] == "--gpu-memory-utilization" and float(args[1]) <= 0.3
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert selftest._server_memory_args() == []
