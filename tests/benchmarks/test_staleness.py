"""``benchmarks/staleness.py``: each RESULTS.md figure's date, commit and whether its code changed since."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT

spec = importlib.util.spec_from_file_location("staleness", ROOT / "benchmarks" / "staleness.py")
staleness = importlib.util.module_from_spec(spec)
sys.modules["staleness"] = staleness  # dataclasses look their module up by name
spec.loader.exec_module(staleness)


def _git(repo, *args):
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _commit(repo, message):
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "--short", "HEAD")


@pytest.fixture
def repo(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "src" / "r1vision" / "tasks" / "svg").mkdir(parents=True)
    (tmp_path / "src" / "r1vision" / "tasks" / "svg" / "reward.py").write_text("x = 1\n")
    (tmp_path / "src" / "r1vision" / "estimate.py").write_text("y = 1\n")
    (tmp_path / "benchmarks" / "bench_svg_reward.py").write_text("")
    return tmp_path


def test_a_figure_turns_stale_when_its_code_changes_and_mark_says_so(repo):
    first = _commit(repo, "code")
    results = repo / "benchmarks" / "RESULTS.md"
    results.write_text(
        "# Benchmark results\n\n"
        f"## SVG reward (2026-11-20, commit {first})\n\n`bench_svg_reward.py`: 8x\n\n"
        "## estimate, no commit named (2026-11-21)\n\n`bench_estimate.py`: 1 GiB\n\n"
        "## trainer_overhead (ok, 50 s)\n\nno date of its own\n"
    )
    recorded = _commit(repo, "results")
    found = {s.heading.split(" ")[0]: s for s in staleness.check(results, repo)}
    assert all(s.verdict == "current" for s in found.values() if s.benchmarks), found
    assert (found["SVG"].commit, found["SVG"].how) == (first, "named")
    assert (found["estimate,"].commit, found["estimate,"].how) == (recorded, "recorded in")
    # the history block's untitled run takes the section before it
    assert (found["trainer_overhead"].date, found["trainer_overhead"].how) == (
        "2026-11-21",
        "as the section before",
    )

    (repo / "src" / "r1vision" / "tasks" / "svg" / "reward.py").write_text("x = 2\n")
    change = _commit(repo, "svg reward changed")
    found = {s.heading.split(" ")[0]: s for s in staleness.check(results, repo)}
    assert found["SVG"].changed == [change] and found["SVG"].verdict.startswith("stale: 1 commit")
    assert found["estimate,"].verdict == "current"  # its code did not change

    staleness.mark(results, list(found.values()), "abc1234")
    text = results.read_text()
    assert text.count(staleness.STATUS) == 3
    staleness.mark(results, staleness.check(results, repo), "abc1234")  # a second mark replaces, not adds
    lines = results.read_text().splitlines()
    assert sum(line.startswith(staleness.STATUS) for line in lines) == 3
    svg = lines.index(next(line for line in lines if line.startswith("## SVG")))
    assert lines[svg + 1].startswith("> status") and "stale: 1 commit" in lines[svg + 1]


def test_every_shipped_figure_has_a_date_a_commit_and_a_status_line():
    """Each section of the shipped RESULTS.md resolves to a date and a commit git knows, and carries the
    status line --mark writes (so a reader sees whether the code under it changed since)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the commits cannot be looked up")
    results = ROOT / "benchmarks" / "RESULTS.md"
    found = staleness.check(results, ROOT)
    assert len(found) > 20
    for sec in found:
        assert sec.date and sec.commit, sec.heading
    lines = results.read_text().splitlines()
    for sec in staleness.sections(results.read_text()):
        assert lines[sec.line + 1].startswith(staleness.STATUS), sec.heading
