"""Time the batch grader on a made-up class: ``python benchmarks/grade_class.py``.

Builds a class folder (one folder per student; the first 60% of the students hand in the
instructor notebooks, the others the untouched student versions), runs ``python -m
transformer_grader grade`` on it and prints the wall time (after checking that
every notebook was graded). ``--library`` runs the grader of another checkout (e.g. an
older commit, from ``git worktree add``) with the same Python, and ``--notebooks`` takes
the notebooks from another checkout's ``assignments/``, so that two graders can be timed
on the very same submissions.

    python benchmarks/grade_class.py --students 5 --assignments 01_attention 02_masks
    python benchmarks/grade_class.py --library /tmp/old --notebooks /tmp/old/assignments

What grading costs is measured here, never asserted in a test: a wall-clock bound in a test
fails on a loaded machine (``test_sandboxing_costs_little`` asked for 400 s and took 412 s
under load), so the tests check what the grader decides and this script prints how long it
took, side by side with another checkout on the same submissions.

Every assignment is named with ``--assignment`` (older graders accept it too), so the
same command times the grader before and after a change.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_class(folder: Path, notebooks: Path, students: int, assignments) -> int:
    """Write the class; return the number of notebooks."""
    honest = max(1, round(0.6 * students))
    count = 0
    for index in range(students):
        student = folder / f"student{index + 1:02d}"
        student.mkdir(parents=True)
        version = "instructor" if index < honest else "student"
        for name in assignments:
            shutil.copy(
                notebooks / version / f"{name}.ipynb", student / f"{name}.ipynb"
            )
            count += 1
    return count


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=5)
    parser.add_argument(
        "--assignments",
        nargs="+",
        default=None,
        help="default: every instructor notebook of --notebooks",
    )
    parser.add_argument(
        "--notebooks",
        default=str(ROOT / "assignments"),
        help="an assignments/ folder with instructor/ and student/",
    )
    parser.add_argument(
        "--library", default=str(ROOT), help="the checkout whose grader runs"
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--no-sandbox",
        action="store_true",
        help="pass --no-sandbox to the grader (its cost without the sandbox)",
    )
    args = parser.parse_args(argv)
    notebooks = Path(args.notebooks)
    assignments = args.assignments or sorted(
        p.stem for p in (notebooks / "instructor").glob("*.ipynb")
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "class"
        count = build_class(folder, notebooks, args.students, assignments)
        env = dict(os.environ, PYTHONPATH=args.library)
        # the grader's own package; before it had one, transformer_lib.grading
        module = (
            "transformer_grader"
            if (Path(args.library) / "transformer_grader").is_dir()
            else "transformer_lib.grading"
        )
        started = time.perf_counter()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                module,
                "grade",
                str(folder),
                "--out",
                str(Path(tmp) / "grades.csv"),
                "--jobs",
                str(args.jobs),
                *[x for name in assignments for x in ("--assignment", name)],
                *(["--no-sandbox"] if args.no_sandbox else []),
            ],
            env=env,
            capture_output=True,
            text=True,
            cwd=tmp,
        )  # not the repository: it would shadow
        # --library on sys.path (python -m puts the working directory first)
        seconds = time.perf_counter() - started
        statuses = [line for line in result.stderr.splitlines() if line.endswith(" s]")]
        failed = [line for line in statuses if "): ok [" not in line]
    if result.returncode != 0:
        print(result.stdout + result.stderr, file=sys.stderr)
        return result.returncode
    if (
        len(statuses) != count or failed
    ):  # a timing of a run that did not grade is worthless
        print(
            f"{count - len(statuses) + len(failed)} notebooks were not graded"
            " cleanly:\n"
            + "\n".join(failed[:5]),
            file=sys.stderr,
        )
        return 1
    print(
        f"{args.students} students x {len(assignments)} assignments ({count}"
        f" notebooks), --jobs {args.jobs}"
        f"{', --no-sandbox' if args.no_sandbox else ''}: {seconds:.1f} s (grader:"
        f" {args.library})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
