"""The tests' warm launcher (tests/helpers/warm_launch.py) runs a command as the interpreter would: exit
codes, output, environment, working directory, ``PYTHONPATH`` with a ``sitecustomize``, a hang guard that
stops the whole session, and a 2-process launch that trains to the same numbers as a cold one."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.launch import LAUNCHES, _warm_launcher, python_launches, run_command, warm_python
from tests.helpers.paths import ROOT
from tests.trainer.test_distributed import _grpo_args

pytestmark = pytest.mark.slow  # starts the warm server (~6 s) and launches


def _warm_run(tmp_path: Path, code: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    script = tmp_path / "cmd.py"
    script.write_text(code)
    launcher = _warm_launcher()
    full_env = {**launcher.base_env, **env}  # the server's own: earlier tests may have changed os.environ
    assert launcher.accepts([sys.executable, str(script)], full_env)
    return launcher.run([sys.executable, str(script), "a b", "c"], tmp_path, full_env, timeout)


def test_exit_codes_output_environment_and_argv_are_the_interpreters(tmp_path):
    (tmp_path / "work").mkdir()
    proc = _warm_run(
        tmp_path,
        "import os, sys\nprint('out', sys.argv[1:], os.getcwd(), os.environ['R1V_PROBE'])\n"
        "print('err', file=sys.stderr)\nos.chdir('work')\nsys.exit(3)\n",
        R1V_PROBE="seen",
    )
    assert proc.returncode == 3
    assert proc.stdout == f"out ['a b', 'c'] {tmp_path} seen\n" and proc.stderr == "err\n"
    proc = _warm_run(tmp_path, "raise ValueError('bad row 7')\n")
    assert proc.returncode == 1 and proc.stderr.rstrip().endswith("ValueError: bad row 7")
    proc = _warm_run(tmp_path, "import sys\nsys.exit('refused: --flag')\n")
    assert (proc.returncode, proc.stderr) == (1, "refused: --flag\n")
    # atexit handlers and non-daemon threads of the command run before it exits; the server's do not
    proc = _warm_run(
        tmp_path,
        "import atexit, threading, time\natexit.register(print, 'atexit')\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print('thread'))).start()\n",
    )
    assert (proc.returncode, proc.stdout) == (0, "thread\natexit\n")


def test_pythonpath_and_its_sitecustomize_apply_to_the_command_only(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import builtins\nbuiltins.R1V_SITE = True\n")
    (site / "r1v_probe_mod.py").write_text("VALUE = 42\n")
    code = (
        "import builtins, r1v_probe_mod\nprint(getattr(builtins, 'R1V_SITE', False), r1v_probe_mod.VALUE)\n"
    )
    proc = _warm_run(tmp_path, code, PYTHONPATH=str(site))
    assert (proc.returncode, proc.stdout) == (0, "True 42\n")
    proc = _warm_run(tmp_path, code)
    assert proc.returncode == 1 and "No module named 'r1v_probe_mod'" in proc.stderr


def test_an_import_time_variable_that_differs_runs_cold():
    launcher = _warm_launcher()
    cmd = [sys.executable, "-m", "r1vision.cli", "--help"]
    base = launcher.base_env
    # what an in-process `r1vision` command and accelerate's CUDA probe leave in os.environ: still warm
    assert launcher.accepts(cmd, {**base, "DS_ACCELERATOR": "cpu", "PYTORCH_NVML_BASED_CUDA_CHECK": "1"})
    assert not launcher.accepts(cmd, {**base, "OMP_NUM_THREADS": "2"})
    assert launcher.refusal(cmd, {**base, "TRACKIO_DIR": "/tmp/x"}) == "TRACKIO_DIR differs"  # read at import
    assert not launcher.accepts(["bash", "-c", "true"], base)


def test_a_timeout_stops_the_command_and_what_it_started(tmp_path):
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\ntime.sleep(600)\n"
    )
    server = _warm_launcher().server.pid
    with pytest.raises(subprocess.TimeoutExpired):
        _warm_run(tmp_path, code, timeout=8)
    pid = int(pid_file.read_text())
    import time

    for _ in range(100):  # the server stops the command's session: its own child goes too
        if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"process {pid} of the timed-out command still runs")
    # and the server goes on serving (it exited here once, and every later launch ran cold)
    assert _warm_run(tmp_path, "print('next')\n").stdout == "next\n"
    assert _warm_launcher().server.pid == server


def test_the_python_shim_runs_a_program_and_what_it_starts_warm(tmp_path):
    """``warm_python()`` as a script's ``PYTHON``: ``"$PYTHON" prog.py`` forks warm (torch's stack already
    imported), the program's ``sys.executable`` is the shim so its own children fork warm too, stdin,
    output, exit codes and signals pass through, killing the shim stops its command, and what the server
    cannot run (``-I``) is exec'd on the real interpreter."""
    import os
    import signal
    import time

    launcher = _warm_launcher()
    shim = warm_python()
    assert shim == launcher.python
    before = len(python_launches())
    (tmp_path / "prog.py").write_text(
        "import subprocess, sys\nwarm = 'trl' in sys.modules\n"
        "child = subprocess.run([sys.executable, '-c', 'import sys; print(\"trl\" in sys.modules)'],\n"
        "                       capture_output=True, text=True).stdout.strip()\n"
        "print(warm, child, sys.stdin.read().strip())\nsys.exit(7)\n"
    )
    script = (
        'echo rows | "$PYTHON" prog.py; echo "exit $?"\n'
        '"$PYTHON" -I -c "import sys; print(sys.flags.isolated, \'trl\' in sys.modules)"\n'
    )
    env = {**launcher.base_env, "PYTHON": shim}
    proc = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.stdout == "True True rows\nexit 7\n1 False\n", proc.stderr
    assert python_launches()[before:] == ["warm", "warm", "cold (interpreter arguments -I -c)"]
    # a signal to the shim reaches its command (here a preemption handler exiting 75, as the trainers do)
    trapping = subprocess.Popen(
        [shim, "-c", "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(75))\n"
         "print('ready', flush=True)\ntime.sleep(600)\n"], env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert trapping.stdout.readline() == "ready\n"
    trapping.send_signal(signal.SIGTERM)
    assert trapping.wait(timeout=60) == 75
    # a killed shim (a caller's timeout) stops the command it started
    pid_file = tmp_path / "pid"
    waiting = subprocess.Popen(
        [
            shim,
            "-c",
            f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)",
        ],
        env=env,
    )
    for _ in range(200):
        if pid_file.is_file() and pid_file.read_text():
            break
        time.sleep(0.05)
    waiting.send_signal(signal.SIGKILL)
    waiting.wait()
    pid = int(pid_file.read_text())
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"process {pid} of the killed shim's command still runs")


def _numbers(out: Path) -> list[tuple[str | None, ...]]:
    with open(out / "metrics.csv") as f:
        return [tuple(r.get(k) for k in ("step", "loss", "grad_norm", "reward")) for r in csv.DictReader(f)]


def test_a_warm_two_process_launch_trains_exactly_as_a_cold_one(tmp_path, tiny_model):
    from r1vision.tasks.color.synth import synth_color
    from r1vision.trainer.distributed import launch_command

    synth_color(tmp_path / "data", 16, seed=0, split="train")
    model = tiny_model("qwen2_vl")
    runs = {}
    env = _warm_launcher().base_env  # the server's own environment: this launch is warm whatever ran before
    for cold in (True, False):
        out = tmp_path / ("cold" if cold else "warm")
        cmd = launch_command("ddp", 2, _grpo_args(model, tmp_path / "data", out, "--max_steps", "2"))
        warm_before = LAUNCHES["warm"]
        proc = run_command([*cmd, "--save_strategy", "no"], ROOT, env, cold=cold)
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert LAUNCHES["warm"] == warm_before + (not cold)
        runs[cold] = _numbers(out)
    assert len(runs[True]) == 2 and all(None not in row for row in runs[True])
    assert runs[True] == runs[False]  # to the last digit written
