"""Launch scripts: every one parses (``bash -n``); the SLURM launchers expand the rendezvous per node
(checked against stub ``srun``/``scontrol``/``accelerate``); the local SFT launcher really trains on CPU."""

from __future__ import annotations

import csv
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.launch import launch_env, warm_python
from tests.helpers.paths import ROOT, SRC

SCRIPTS = sorted((ROOT / "scripts").rglob("*.sh"))

STUB_SRUN = r"""#!/usr/bin/env bash
# one run of the command per node, with SLURM_NODEID set as srun would; logs its own options
nodes=1; rel=0; opts=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nodes=*) nodes="${1#*=}" ;;
    --relative=*) rel="${1#*=}" ;;
    --ntasks*|--nodelist=*|--gpus*|--cpus*) ;;
    *) break ;;
  esac
  opts+=("$1")
  shift
done
echo "srun ${opts[*]}" >> "$STUB_LOG"
for ((i = 0; i < nodes; i++)); do SLURM_NODEID=$((i + rel)) "$@"; done
"""
STUB_LOG = """#!/usr/bin/env bash
echo "$(basename "$0") ${*@Q}" >> "$STUB_LOG"
"""
# The launchers run `"$PYTHON" -m r1vision.cli ...` / `-m accelerate.commands.launch`: logged as the command.
STUB_PYTHON = r"""#!/usr/bin/env bash
if [[ "$1" == "-c" ]]; then exit 0; fi  # the scripts' "has r1vision" check
if [[ "$1" == "-m" ]]; then
  case "$2" in
    r1vision.cli) name=r1vision ;;
    accelerate.commands.launch) name="accelerate launch" ;;
    *) name="python -m $2" ;;
  esac
  shift 2
  echo "$name ${*@Q}" >> "$STUB_LOG"
  exit 0
fi
echo "python ${*@Q}" >> "$STUB_LOG"
"""


def test_expected_scripts_exist():
    names = {str(p.relative_to(ROOT / "scripts")) for p in SCRIPTS}
    assert {
        "grpo/local_ddp.sh",
        "grpo/local_zero3.sh",
        "grpo/sbatch_colocate.sh",
        "grpo/sbatch_zero3_server.sh",
        "sft/local.sh",
        "sft/sbatch.sh",
        "inference/local.sh",
        "inference/sbatch.sh",
    } <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_script_parses(script: Path):
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture()
def fake_slurm(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(STUB_SRUN)
    (bin_dir / "scontrol").write_text('#!/usr/bin/env bash\nprintf "node-a\\nnode-b\\nnode-c\\n"\n')
    for name in ("accelerate", "trl", "curl", "r1vision"):
        (bin_dir / name).write_text(STUB_LOG)
    (bin_dir / "python").write_text(STUB_PYTHON)
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    log = tmp_path / "calls.log"
    env = dict(os.environ)
    env.update(
        PATH=f"{bin_dir}:{env['PATH']}",
        PYTHON=str(bin_dir / "python"),
        STUB_LOG=str(log),
        SLURM_JOB_NODELIST="node-[a-c]",
        SLURM_NNODES="3",
        SLURM_SUBMIT_DIR=str(ROOT),
    )
    return env, log


def _calls(log: Path, program: str) -> list[list[str]]:
    return [shlex.split(line)[1:] for line in log.read_text().splitlines() if line.startswith(program + " ")]


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _srun_steps_request_resources(log: Path, gpus: str = "8", cpus: str = "64") -> None:
    steps = _calls(log, "srun")
    assert steps
    for opts in steps:  # a step inherits neither GPUs nor CPUs on many Slurm versions
        assert f"--gpus-per-node={gpus}" in opts and f"--cpus-per-task={cpus}" in opts, opts


def test_sbatch_colocate_one_launch_per_node(fake_slurm):
    env, log = fake_slurm
    script = ROOT / "scripts" / "grpo" / "sbatch_colocate.sh"
    proc = subprocess.run(
        ["bash", str(script), "--model", "M", "--task", "sgg"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    launches = _calls(log, "accelerate")
    assert [_flag(a, "--machine_rank") for a in launches] == ["0", "1", "2"]
    for argv in launches:
        assert _flag(argv, "--main_process_ip") == "node-a"
        assert _flag(argv, "--num_machines") == "3" and _flag(argv, "--num_processes") == "24"
        assert _flag(argv, "--generation_backend") == "vllm_colocate"
        assert "--vllm_enable_sleep_mode" not in argv  # the recipe's choice, decided in code
        assert argv[-4:] == ["--model", "M", "--task", "sgg"]
    _srun_steps_request_resources(log)


def test_local_ddp_leaves_sleep_mode_to_the_recipe(fake_slurm):
    env, log = fake_slurm
    env["NUM_GPUS"] = "2"
    # The local launchers run accelerate through the venv's Python: stub that Python (its import check
    # with -c passes; everything else is logged).
    stub = log.parent / "bin" / "python"
    stub.write_text('#!/usr/bin/env bash\n[[ "$1" == "-c" ]] && exit 0\n' + STUB_LOG.split("\n", 1)[1])
    stub.chmod(0o755)
    env["PYTHON"] = str(stub)
    script = ROOT / "scripts" / "grpo" / "local_ddp.sh"
    proc = subprocess.run(["bash", str(script), "--model", "M"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (call,) = _calls(log, "python")
    assert call[:2] == ["-m", "accelerate.commands.launch"]
    argv = call[2:]
    assert _flag(argv, "--generation_backend") == "vllm_colocate" and "--vllm_enable_sleep_mode" not in argv


def test_sbatch_zero3_server_first_node_serves_others_train(fake_slurm, tmp_path):
    env, log = fake_slurm
    recipe = tmp_path / "r.yaml"
    recipe.write_text("max_pixels: 3136\n")
    script = ROOT / "scripts" / "grpo" / "sbatch_zero3_server.sh"
    proc = subprocess.run(
        ["bash", str(script), "--model", "M", "--config", str(recipe)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert _calls(log, "trl") == []  # `trl vllm-serve` is deprecated for removal in TRL 2.0
    (server,) = _calls(log, "r1vision")
    assert server[:3] == ["vllm-serve", "--server", "vllm"]
    assert _flag(server, "--model") == "M" and _flag(server, "--config") == str(recipe)
    assert _flag(server, "--data-parallel-size") == "8" and _flag(server, "--host") == "0.0.0.0"
    launches = _calls(log, "accelerate")
    assert [_flag(a, "--machine_rank") for a in launches] == ["0", "1"]  # nodes b and c
    for argv in launches:
        assert _flag(argv, "--main_process_ip") == "node-b"
        assert _flag(argv, "--num_machines") == "2" and _flag(argv, "--num_processes") == "16"
        assert _flag(argv, "--vllm_server_host") == "node-a"
        assert _flag(argv, "--generation_backend") == "vllm_server"
        assert "zero3.json" in _flag(argv, "--deepspeed_config_file")
    _srun_steps_request_resources(log)


def test_sbatch_zero3_per_rank_servers_on_every_node(fake_slurm):
    env, log = fake_slurm
    env.update(PER_RANK="1", VLLM_GPUS="4")
    script = ROOT / "scripts" / "grpo" / "sbatch_zero3_server.sh"
    proc = subprocess.run(
        ["bash", str(script), "--model", "M", "--max_pixels", "3136", "--config", "r 1.yaml"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    calls = _calls(log, "r1vision")
    assert len(calls) == 3  # one vllm-serve per node, each wrapping that node's accelerate launch
    for node, argv in enumerate(calls):
        cut = argv.index("--")
        serve, train = argv[:cut], argv[cut + 1 :]
        assert serve[:3] == ["vllm-serve", "--model", "M"] and _flag(serve, "--num-servers") == "4"
        assert _flag(serve, "--max-pixels") == "3136"
        assert _flag(serve, "--config") == "r 1.yaml"  # the recipe reaches the servers, spaces and all
        assert train[:2] == ["env", "CUDA_VISIBLE_DEVICES=4,5,6,7"]
        assert train[2:5] == [env["PYTHON"], "-m", "accelerate.commands.launch"]  # the venv's, not PATH's
        assert _flag(train, "--machine_rank") == str(node) and _flag(train, "--num_processes") == "12"
        assert _flag(train, "--main_process_ip") == "node-a"
        assert _flag(train, "--vllm_server_per_rank") == "true"
        assert _flag(train, "--vllm_server_host") == "127.0.0.1"
        assert train[-6:] == ["--model", "M", "--max_pixels", "3136", "--config", "r 1.yaml"]
    _srun_steps_request_resources(log)
    log.write_text("")
    env["VLLM_TP"] = "2"  # per-rank servers cannot take weight pushes with tensor parallel: refused
    proc = subprocess.run(["bash", str(script), "--model", "M"], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "VLLM_TP=1" in proc.stderr and log.read_text() == ""


def test_local_zero3_per_rank_servers(fake_slurm):
    env, log = fake_slurm
    env.update(PER_RANK="1", NUM_GPUS="8", VLLM_GPUS="4")
    script = ROOT / "scripts" / "grpo" / "local_zero3.sh"
    proc = subprocess.run(
        ["bash", str(script), "--config", "R.yaml", "--max_completion_length", "512"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    (argv,) = _calls(log, "r1vision")
    cut = argv.index("--")
    serve, train = argv[:cut], argv[cut + 1 :]
    assert _flag(serve, "--num-servers") == "4" and _flag(serve, "--base-port") == "8000"
    assert _flag(serve, "--config") == "R.yaml" and _flag(serve, "--max-completion-length") == "512"
    assert train[:2] == ["env", "CUDA_VISIBLE_DEVICES=4,5,6,7"] and _flag(train, "--num_processes") == "4"
    assert _flag(train, "--vllm_server_per_rank") == "true" and _flag(train, "--vllm_server_port") == "8000"
    assert _calls(log, "trl") == []
    env["VLLM_GPUS"] = "2"  # 2 servers for 6 training processes: refused
    proc = subprocess.run(["bash", str(script), "--model", "M"], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "PER_RANK=1 needs" in proc.stderr
    env.update(VLLM_GPUS="4", VLLM_TP="2")
    proc = subprocess.run(["bash", str(script), "--model", "M"], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "VLLM_TP=1" in proc.stderr
    proc = subprocess.run(["bash", str(script), "--task", "sgg"], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "--model" in proc.stderr  # neither a model nor a recipe


def test_local_zero3_single_vllm_server(fake_slurm):
    env, log = fake_slurm
    env.update(NUM_GPUS="8", VLLM_GPUS="4", VLLM_TP="2")
    script = ROOT / "scripts" / "grpo" / "local_zero3.sh"
    proc = subprocess.run(["bash", str(script), "--model", "M"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (argv,) = _calls(log, "r1vision")
    cut = argv.index("--")
    serve, train = argv[:cut], argv[cut + 1 :]
    assert serve[:3] == ["vllm-serve", "--server", "vllm"] and _flag(serve, "--model") == "M"
    assert _flag(serve, "--data-parallel-size") == "2" and _flag(serve, "--tensor-parallel-size") == "2"
    assert train[:2] == ["env", "CUDA_VISIBLE_DEVICES=4,5,6,7"]
    assert _flag(train, "--generation_backend") == "vllm_server" and "--vllm_server_per_rank" not in train
    assert _calls(log, "trl") == []


def test_gpu_stack_check_runs_every_check(tmp_path):
    """scripts/gpu_stack_check.sh against stub nvidia-smi / python: a dry run per shipped recipe, a selftest per
    layout x backend, the benchmark, and a failing check makes the exit code non-zero."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(
        '#!/usr/bin/env bash\nif [[ "$1" == -L ]]; then echo "GPU 0: X"; echo "GPU 1: X"; else echo 24576; fi\n'
    )
    log = tmp_path / "calls.log"
    (bin_dir / "py").write_text(
        '#!/usr/bin/env bash\necho "py ${*@Q}" >> "$STUB_LOG"\n[[ " $* " != *" $FAIL_ON "* ]]\n'
    )
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", STUB_LOG=str(log), PYTHON="py",
               OUT=str(tmp_path / "out"), FAIL_ON="no-such-argument")  # fmt: skip
    script = ROOT / "scripts" / "gpu_stack_check.sh"
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = [shlex.split(line)[1:] for line in log.read_text().splitlines()]
    selftests = {(_flag(c, "--layout"), _flag(c, "--backend")) for c in calls if "selftest" in c}
    assert selftests == {(lay, b) for lay in ("single", "ddp", "zero3")
                         for b in ("hf", "vllm_colocate", "vllm_server")}  # fmt: skip
    dry = [c for c in calls if "--dry-run" in c]
    assert len(dry) == len(
        [p for p in (ROOT / "configs" / "recipes").glob("*.yaml") if not p.name.startswith("t2i_")]
    )
    assert all(_flag(c, "--card-gb") == "24" and _flag(c, "--gpus") == "2" for c in dry)
    assert any("benchmarks/bench_backends.py" in c for c in calls)
    env["FAIL_ON"] = "zero3"
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1 and "FAIL  selftest-zero3-hf" in proc.stdout


@pytest.mark.slow
def test_sft_local_script_trains_on_cpu(tmp_path, tiny_model, color_dir):
    env = launch_env(
        NUM_GPUS="1", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", PYTHON=warm_python()
    )
    out = tmp_path / "sft"
    cmd = ["bash", str(ROOT / "scripts" / "sft" / "local.sh"), "--model", tiny_model("qwen2_vl")]
    cmd += ["--dataset", str(color_dir), "--task", "color", "--output_dir", str(out), "--max_steps", "1"]
    cmd += ["--per_device_train_batch_size", "2", "--use_cpu", "true", "--max_pixels", "3136"]
    cmd += ["--report_to", "none", "--save_strategy", "no"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert (out / "model.safetensors").exists() and (out / "distributed.json").exists()


@pytest.mark.parametrize(("script", "command"), [("sft/sbatch.sh", "sft"), ("inference/sbatch.sh", "infer")])
def test_sbatch_sft_and_infer_steps_request_resources(fake_slurm, script, command):
    """One launch per node, and the srun step asks for the node's GPUs and CPUs (like the GRPO launchers)."""
    env, log = fake_slurm
    env["SLURM_CPUS_PER_TASK"] = "32"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / script), "--model", "M", "--task", "sgg"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    launches = _calls(log, "accelerate")
    assert [_flag(a, "--machine_rank") for a in launches] == ["0", "1", "2"]
    for argv in launches:
        assert argv[argv.index("r1vision.cli") + 1] == command
    _srun_steps_request_resources(log, cpus="32")


# ------------------------------------------------------------------------------------------- 7. launchers
@pytest.mark.slow
def test_launchers_without_gpu_keep_relative_paths(tiny_model, color_dir, tmp_path):
    """Without nvidia-smi and NUM_GPUS the launchers exited 127 silently and cd'ed to the repo root."""
    path = ":".join(p for p in os.environ["PATH"].split(":") if not (Path(p) / "nvidia-smi").exists())
    env = launch_env(PATH=path, PYTHON=warm_python(), PYTHONPATH=str(SRC))
    env.pop("NUM_GPUS", None)
    os.symlink(tiny_model("qwen2_vl"), tmp_path / "m")
    os.symlink(color_dir, tmp_path / "data")
    sft = ["bash", str(ROOT / "scripts/sft/local.sh"), "--model", "m", "--dataset", "data", "--task", "color"]
    sft += [
        "--output_dir",
        "out",
        "--max_steps",
        "1",
        "--per_device_train_batch_size",
        "2",
        "--max_pixels",
        "3136",
    ]
    proc = subprocess.run(sft, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no GPU found" in proc.stderr and (tmp_path / "out" / "model.safetensors").exists()
    infer = ["bash", str(ROOT / "scripts/inference/local.sh"), "--task", "color", "--model", "out"]
    infer += ["--dataset", "data", "--output_dir", "preds", "--limit", "2", "--max-new-tokens", "4"]
    proc = subprocess.run(infer, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "preds" / "metrics.json").exists()
    zero3 = subprocess.run(["bash", str(ROOT / "scripts/grpo/local_zero3.sh"), "--model", "m"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert zero3.returncode == 2 and "no GPU found" in zero3.stderr and "local_ddp.sh" in zero3.stderr
    for script in ("sft/local.sh", "inference/local.sh", "grpo/local_ddp.sh", "grpo/local_zero3.sh"):
        text = (ROOT / "scripts" / script).read_text()
        assert 'cd "$ROOT"' not in text and "\npython " not in text and " python -m" not in text, script


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_launchers_use_the_venvs_python_not_path(script: Path):
    """A bare `r1vision` / `accelerate` needs an activated venv ("command not found" on a compute node)."""
    import re

    for number, line in enumerate(script.read_text().splitlines(), 1):
        code = line.split("#", 1)[0]
        if re.search(r"(^|[\s;&|(`])(r1vision|accelerate)\s+(launch|vllm-serve|grpo|sft|infer|eval)\b", code):
            if "echo" not in code and "usage" not in code.lower():
                pytest.fail(f"{script.name}:{number}: runs a command from PATH: {line.strip()}")


@pytest.mark.parametrize("script", ["grpo/sbatch_colocate.sh", "sft/sbatch.sh"])
def test_sbatch_runs_resume_automatically_and_requeue_after_a_preemption(fake_slurm, tmp_path, script):
    """The training command resumes (--resume_from_checkpoint auto) and a run that left preempted.json
    (a signal stopped it at a step boundary) makes the job requeue itself; a finished run does not."""
    env, log = fake_slurm
    scontrol = log.parent / "bin" / "scontrol"
    scontrol.write_text(
        '#!/usr/bin/env bash\n[[ "$1" == requeue ]] && { echo "scontrol $*" >> "$STUB_LOG"; exit 0; }\n'
        'printf "node-a\\nnode-b\\nnode-c\\n"\n'
    )
    env["SLURM_JOB_ID"] = "4242"
    out = tmp_path / "run"
    out.mkdir()
    argv = ["bash", str(ROOT / "scripts" / script), "--model", "M", "--task", "sgg", "--output_dir", str(out)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for launch in _calls(log, "accelerate"):
        assert _flag(launch, "--resume_from_checkpoint") == "auto"
        assert launch[-2:] == ["--output_dir", str(out)]  # the user's flags come last: they win
    assert _calls(log, "scontrol") == []
    (out / "preempted.json").write_text('{"step": 3}')
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert _calls(log, "scontrol") == [["requeue", "4242"]]
    head = (ROOT / "scripts" / script).read_text().splitlines()[:12]
    assert "#SBATCH --signal=USR1@300" in head and "#SBATCH --requeue" in head


STUB_SRUN_PARALLEL = r"""#!/usr/bin/env bash
# srun as on a cluster: the command once per node, all at once, with SLURM_NODEID set; the worst status
nodes=1; rel=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nodes=*) nodes="${1#*=}" ;;
    --relative=*) rel="${1#*=}" ;;
    --ntasks*|--nodelist=*|--gpus*|--cpus*) ;;
    *) break ;;
  esac
  shift
done
pids=()
for ((i = 0; i < nodes; i++)); do SLURM_NODEID=$((i + rel)) SLURM_PROCID=$i "$@" & pids+=($!); done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
"""


@pytest.mark.slow
def test_sbatch_launch_lines_train_two_nodes_on_localhost(tmp_path, tiny_model, color_dir):
    """The shipped multi-node script as Slurm runs it, with its variables set for 2 nodes: two "nodes" on
    localhost (machine ranks 0 and 1, one gloo process each, static rendezvous) train 2 GRPO steps
    together (HF generation: the per-rank vLLM servers need the vLLM environment)."""
    import json
    import socket

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(STUB_SRUN_PARALLEL)
    (bin_dir / "scontrol").write_text(
        '#!/usr/bin/env bash\n[[ "$1" == show ]] && printf "localhost\\nlocalhost\\n"\n'
    )
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = launch_env(PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_JOB_NODELIST="node-[0-1]", SLURM_NNODES="2",
               SLURM_JOB_ID="7", SLURM_SUBMIT_DIR=str(ROOT), GPUS_PER_NODE="1", CPUS_PER_NODE="1",
               MASTER_PORT=str(port), PYTHON=warm_python())  # fmt: skip
    out = tmp_path / "run"
    argv = ["bash", str(ROOT / "scripts" / "grpo" / "sbatch_colocate.sh"), "--task", "color", "--model",
            tiny_model("qwen2_vl"), "--dataset", str(color_dir), "--output_dir", str(out), "--max_steps", "2",
            "--use_cpu", "true", "--generation_backend", "hf", "--per_device_train_batch_size", "4",
            "--num_generations", "4", "--max_completion_length", "8", "--max_pixels", "3136",
            "--report_to", "none", "--save_strategy", "no", "--logging_steps", "1"]  # fmt: skip
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    layout = json.loads((out / "distributed.json").read_text())
    assert layout["world_size"] == 2 and layout["backend"] == "gloo"
    assert [r["rank"] for r in layout["ranks"]] == [0, 1] and [r["local_rank"] for r in layout["ranks"]] == [
        0,
        0,
    ]
    with open(out / "metrics.csv") as f:
        assert [row["step"] for row in csv.DictReader(f) if row.get("loss")] == ["1", "2"]
