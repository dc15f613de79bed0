"""Which figures in ``benchmarks/RESULTS.md`` still describe today's code.

Each ``## `` section of RESULTS.md is one measurement. For each, this finds

- the date it was measured (the first ``YYYY-MM-DD`` of its heading, else of its text);
- the commit it was measured on: the first commit id the heading or text names that git knows, else the
  commit that added the heading to RESULTS.md ("recorded in"); a section with neither a date nor a commit
  (the numbered runs under "Earlier runs") takes the section before it;
- the benchmark it ran: the ``bench_*.py`` scripts it names, else a keyword of its heading
  (:data:`KEYWORDS`), and the code each measures (:data:`MEASURES`);

and counts the commits since that one which changed the benchmark or its code. Zero: current; more:
stale. ``--mark`` writes the verdict as the first line under each heading (replacing an earlier one), so
a reader sees it beside the numbers; re-run the benchmark to replace a stale figure.

    python benchmarks/staleness.py [--results benchmarks/RESULTS.md] [--mark]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
S = "src/r1vision/"
# benchmark -> the code its figures measure (besides the script itself)
MEASURES: dict[str, list[str]] = {
    "bench_backends": [S + "generation/"],
    "bench_cpu_sft": [S + "cli.py", S + "trainer/", S + "commands/sft.py", S + "demo/"],
    "bench_demo": [S + "demo/", S + "trainer/", S + "tasks/sgg/", S + "tasks/geometry/", S + "tasks/svg/"],
    "bench_dynamic_sampling": [S + "demo/", S + "trainer/"],
    "bench_estimate": [S + "estimate.py"],
    "bench_faults": [S + "trainer/", S + "diffusion/", S + "runners/", S + "checkpoints.py"],
    "bench_fused_head": [S + "trainer/fused_head.py"],
    "bench_geometry_verify": [S + "tasks/geometry/"],
    "bench_lora_sync": [S + "generation/"],
    "bench_sgg_eval": [S + "tasks/sgg/", S + "_speedups.c", S + "commands/eval.py"],
    "bench_sgg_rewards": [S + "tasks/sgg/", S + "_speedups.c", S + "tasks/fastjson.py"],
    "bench_sgg_vs_r1sgg": [S + "tasks/sgg/", S + "_speedups.c", S + "tasks/fastjson.py"],
    "bench_startup": [S + "__init__.py", S + "cli.py", S + "commands/", S + "tasks/registry.py"],
    "bench_svg_reward": [S + "tasks/svg/"],
    "bench_t2i": [S + "diffusion/"],
    "bench_t2i_gpu": [S + "diffusion/"],
    "bench_t2i_processes": [S + "diffusion/", S + "runners/t2i.py"],
    "bench_trainer_overhead": [S + "trainer/"],
    "gpu_check": ["scripts/gpu_check.sh", S + "trainer/", S + "generation/", S + "diffusion/"],
}
# heading words -> benchmark, for sections that do not name their script
KEYWORDS: list[tuple[str, str]] = [
    ("gpu check", "gpu_check"),
    ("gpu session", "gpu_check"),
    ("text-to-image", "bench_t2i"),
    ("start-up", "bench_startup"),
    ("startup", "bench_startup"),
    ("sgg eval", "bench_sgg_eval"),
    ("sgg_eval", "bench_sgg_eval"),
    ("sgg rewards", "bench_sgg_rewards"),
    ("sgg_rewards", "bench_sgg_rewards"),
    ("svg reward", "bench_svg_reward"),
    ("svg_reward", "bench_svg_reward"),
    ("lora weight sync", "bench_lora_sync"),
    ("trainer_overhead", "bench_trainer_overhead"),
    ("geometry_verify", "bench_geometry_verify"),
    ("dynamic sampling", "bench_dynamic_sampling"),
    ("demo", "bench_demo"),
    ("backends", "bench_backends"),
    ("estimate", "bench_estimate"),
]
STATUS = "> status "  # the line --mark writes under a heading
_DATE = re.compile(r"\b(20\d\d-\d\d-\d\d)\b")
_HEX = re.compile(r"\b([0-9a-f]{7,40})\b")
_BENCH = re.compile(r"\b(bench_[a-z0-9_]+)\.py\b")


@dataclass
class Section:
    """One ``## `` section of RESULTS.md and what :func:`check` found for it."""

    heading: str
    line: int  # 0-based index of the heading line
    body: list[str] = field(default_factory=list)
    date: str | None = None
    commit: str | None = None
    how: str = ""  # "named", "recorded in" or "as the section before"
    benchmarks: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # commits since, touching its code

    @property
    def verdict(self) -> str:
        if not self.commit:
            return "unknown: no commit found"
        if not self.benchmarks:
            return "unknown: no benchmark named"
        if not self.changed:
            return "current"
        return f"stale: {len(self.changed)} commit(s) changed its code since"


def _git(root: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def _is_commit(root: Path, rev: str) -> bool:
    return bool(_git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"))


def sections(text: str) -> list[Section]:
    """The ``## `` sections of a RESULTS.md text (its status lines left out of the body)."""
    out: list[Section] = []
    for i, line in enumerate(text.splitlines()):
        if line.startswith("## "):
            out.append(Section(line[3:].strip(), i))
        elif out and not line.startswith(STATUS):
            out[-1].body.append(line)
    return out


def check(results: Path, root: Path = ROOT) -> list[Section]:
    """Every section of ``results`` with its date, commit, benchmarks and the commits that changed their code."""
    rel = str(results.resolve().relative_to(root.resolve()))
    found = sections(results.read_text())
    previous: Section | None = None
    for sec in found:
        text = "\n".join(sec.body)
        for source in (sec.heading, text):
            if sec.date is None and (m := _DATE.search(source)):
                sec.date = m.group(1)
            if sec.commit is None:
                sec.commit = next((h for h in _HEX.findall(source) if _is_commit(root, h)), None)
                sec.how = "named" if sec.commit else ""
        if sec.date is None and sec.commit is None and previous is not None:
            sec.date, sec.commit, sec.how = previous.date, previous.commit, "as the section before"
        if sec.commit is None:  # the commit that wrote the heading: the code it measured was at most that
            added = _git(root, "log", "--format=%h", "--reverse", "-S", sec.heading, "--", rel).splitlines()
            if added:
                sec.commit, sec.how = added[0], "recorded in"
        names = list(dict.fromkeys(_BENCH.findall(sec.heading + "\n" + text)))
        if not names:
            low = sec.heading.lower()
            names = [bench for word, bench in KEYWORDS if word in low][:1]
        sec.benchmarks = [n for n in names if n in MEASURES]
        if sec.commit and sec.benchmarks:
            paths = []
            for name in sec.benchmarks:
                paths += [f"benchmarks/{name}.py", *MEASURES[name]]
            existing = [p for p in dict.fromkeys(paths) if (root / p).exists()]
            log = _git(root, "log", "--format=%h", f"{sec.commit}..HEAD", "--", *existing) if existing else ""
            sec.changed = log.splitlines()
        previous = sec
    return found


def status_line(sec: Section, head: str) -> str:
    """The line ``--mark`` writes under a section's heading."""
    where = f"{sec.how} {sec.commit}" if sec.commit else "no commit"
    return f"{STATUS}(benchmarks/staleness.py at {head}): measured {sec.date or 'undated'}, {where}; {sec.verdict}"


def mark(results: Path, found: list[Section], head: str) -> None:
    """Rewrite ``results`` with one status line under each heading (earlier status lines replaced)."""
    by_line = {sec.line: sec for sec in found}
    out: list[str] = []
    for i, line in enumerate(results.read_text().splitlines()):
        if line.startswith(STATUS):
            continue
        out.append(line)
        if i in by_line:
            out.append(status_line(by_line[i], head))
    results.write_text("\n".join(out) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    p.add_argument("--mark", action="store_true", help="write each verdict under its heading")
    a = p.parse_args(argv)
    results = Path(a.results)
    root = Path(_git(results.resolve().parent, "rev-parse", "--show-toplevel") or ROOT)
    found = check(results, root)
    head = _git(root, "rev-parse", "--short", "HEAD")
    print("| section | measured | commit | benchmark | verdict |\n|---|---|---|---|---|")
    for sec in found:
        print(
            f"| {sec.heading[:70]} | {sec.date or '?'} | {sec.how} {sec.commit or '?'} | "
            f"{', '.join(sec.benchmarks) or '?'} | {sec.verdict} |"
        )
    if a.mark:
        mark(results, found, head)
    return 0


if __name__ == "__main__":
    sys.exit(main())
