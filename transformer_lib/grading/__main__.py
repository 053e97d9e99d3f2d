"""Command line: ``python -m transformer_lib.grading grade SUBMISSIONS_DIR --out
grades.csv``."""

from __future__ import annotations

import argparse
import sys

from .batch import check_jobs, check_timeout, grade_folder
from .tasks import ASSIGNMENTS


def _type(check):
    def parse(text):
        try:
            return check(int(text) if check is check_jobs else text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_lib.grading",
        description=(
            "Grade submitted notebooks: each runs in its own kernel in a private"
            " folder; its functions' outputs are judged outside that kernel."
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
        help=(
            "the assignment the notebooks are (needed for one notebook per "
            "student; repeat it to expect several)"
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
        "--kernel", default="python3", help="Jupyter kernel name (default python3)"
    )
    args = parser.parse_args(argv)
    try:
        rows = grade_folder(
            args.submissions,
            args.out,
            timeout=args.timeout,
            kernel_name=args.kernel,
            jobs=args.jobs,
            assignments=args.assignment,
            seed=args.seed,
            log=lambda line: print(line, file=sys.stderr),
        )
    except ValueError as error:
        parser.error(str(error))
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
