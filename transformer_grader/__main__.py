"""Command line: ``python -m transformer_grader grade SUBMISSIONS_DIR --assignment
01_attention --out grades.csv``."""

from __future__ import annotations

import argparse
import sys

from .engine.batch import check_jobs, check_timeout, grade_folder
from .engine.sandbox import Limits, SandboxUnavailable
from .tasks import ASSIGNMENTS


def _type(check):
    def parse(text):
        try:
            return check(int(text) if check is check_jobs else text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def _megabytes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 64:
        raise argparse.ArgumentTypeError(f"expected megabytes >= 64, got {text!r}")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_grader",
        description=(
            "Grade submitted notebooks: each runs in its own sandboxed kernel"
            " (bubblewrap), with a copy of the library that holds no reference of"
            " the graded task; its functions' outputs are judged outside."
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True)
    grade = sub.add_parser(
        "grade", help="grade every notebook (or student folder) in a folder"
    )
    grade.add_argument(
        "submissions", help="folder of .ipynb files (or one sub-folder per student)"
    )
    grade.add_argument(
        "--out", default="grades.csv", help="CSV file to write (default grades.csv)"
    )
    grade.add_argument(
        "--assignment",
        action="append",
        choices=list(ASSIGNMENTS),
        default=None,
        required=True,
        help=(
            "an assignment the class hands in (repeat it for several): exactly these"
            " are expected from every student"
        ),
    )
    grade.add_argument(
        "--timeout",
        type=_type(check_timeout),
        default=60.0,
        help="seconds allowed for each notebook's cells (default 60)",
    )
    grade.add_argument(
        "--jobs",
        type=_type(check_jobs),
        default=2,
        help="notebooks graded at the same time, each in its own kernel (default 2)",
    )
    grade.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the test inputs (default: a fresh one for every notebook)",
    )
    grade.add_argument(
        "--memory",
        type=_megabytes,
        default=Limits.memory_mb,
        help=(
            f"memory of each kernel process, in MB (default {Limits.memory_mb}); all"
            " the processes of one kernel together may hold 1.5 times that"
        ),
    )
    grade.add_argument(
        "--no-sandbox",
        action="store_true",
        help=(
            "grade without an OS sandbox where none can run (not Linux, no"
            " bubblewrap): kernels can then read and change what their user can;"
            " every row says so"
        ),
    )
    args = parser.parse_args(argv)
    try:
        rows = grade_folder(
            args.submissions,
            args.out,
            timeout=args.timeout,
            jobs=args.jobs,
            assignments=args.assignment,
            seed=args.seed,
            log=lambda line: print(line, file=sys.stderr),
            sandbox=not args.no_sandbox,
            limits=Limits(memory_mb=args.memory, total_memory_mb=args.memory * 3 // 2),
        )
    except ValueError as error:
        parser.error(str(error))
    except SandboxUnavailable as error:
        parser.error(
            f"no sandbox can run here: {error}. Grade on a Linux machine with"
            " bubblewrap, in a container (assignments/README.md), or pass --no-sandbox"
            " to grade without one (every row will say so)"
        )
    except KeyboardInterrupt:
        print("grading interrupted", file=sys.stderr)
        return 130
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
