"""Who handed in what: the submissions folder read into memory, with rules a folder
cannot trick.

Layouts:

- one notebook per student, ``SUBMISSIONS/alice.ipynb``: the student is ``alice``, the
  notebook is the one assignment the instructor names;
- one folder per student, ``SUBMISSIONS/alice/**/01_attention.ipynb`` (nbgrader's
  ``submitted/alice/ps1/01_attention.ipynb`` too): each notebook is graded on the
  assignment its file is named after. With one assignment named, a folder holding a
  single notebook of any name is that assignment.

Rules:

- **The instructor's list decides what is expected** (``--assignment``): a student's
  notebook of another assignment is ignored (and noted), so no one's extra file changes
  another student's row or ``max_total``.
- **Only regular files are graded**, read once, through ``O_NOFOLLOW``, with a size
  limit: a link, a folder, a FIFO or a device named like a notebook, or a file larger
  than ``MAX_NOTEBOOK_BYTES``, gets its row with the reason and scores 0. Links are
  never followed, to files or to folders. Two students whose notebooks are one file (a
  hard link) are both flagged.
- **One notebook per assignment and student**: the one nearest the top of the student's
  folder counts; the others are ignored and the row is flagged. If several are equally
  near (``a/01_attention.ipynb`` and ``b/01_attention.ipynb``), none is graded: the
  assignment scores 0 and the row is flagged, for the instructor to decide.

Nothing is ever written to the submissions folder.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..tasks import ASSIGNMENTS

MAX_NOTEBOOK_BYTES = 32 * 2**20
_SKIPPED_FOLDERS = (".ipynb_checkpoints", "__pycache__")


@dataclass
class Student:
    """A row of the grade sheet: the notebooks to grade (assignment -> (shown path,
    bytes)), the expected assignments that cannot be graded (assignment -> reason), and
    flags for the instructor."""

    name: str
    notebooks: dict = field(default_factory=dict)
    problems: dict = field(default_factory=dict)
    flags: list = field(default_factory=list)
    files: dict = field(default_factory=dict)  # assignment -> (device, inode)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def read_notebook(path: Path, shown: str) -> tuple[bytes | None, str, tuple]:
    """(bytes, "", (device, inode)) of a regular file, or (None, why not, ())."""
    try:
        mode = os.lstat(path).st_mode
    except OSError as error:
        return None, f"{shown} cannot be read ({error.strerror})", ()
    if not stat.S_ISREG(mode):
        return None, f"{shown} is {_kind(mode)}, not a notebook file", ()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        return None, f"{shown} cannot be read ({error.strerror})", ()
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):  # replaced since we looked
            return None, f"{shown} is {_kind(info.st_mode)}, not a notebook file", ()
        if info.st_size > MAX_NOTEBOOK_BYTES:
            return (
                None,
                f"{shown} is larger than {MAX_NOTEBOOK_BYTES // 2**20} MB",
                (),
            )
        data = handle.read(MAX_NOTEBOOK_BYTES + 1)
    if len(data) > MAX_NOTEBOOK_BYTES:
        return None, f"{shown} is larger than {MAX_NOTEBOOK_BYTES // 2**20} MB", ()
    return data, "", (info.st_dev, info.st_ino)


def _walk(folder: Path) -> list[tuple[int, str, Path]]:
    """(depth, path relative to ``folder``, path) of every entry named ``*.ipynb``
    under ``folder``, whatever its type; folders are entered only if they are real
    folders (not links), hidden ones and checkpoints skipped."""
    found = []
    for top, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(
            d for d in dirs if not d.startswith(".") and d not in _SKIPPED_FOLDERS
        )
        relative = Path(top).relative_to(folder)
        for name in sorted(dirs + files):
            if name.endswith(".ipynb") and not name.startswith("."):
                shown = (relative / name).as_posix()
                found.append((len(relative.parts) + 1, shown, Path(top) / name))
    return found


def _choose(student: Student, assignment: str, candidates, folder_name: str) -> None:
    """Apply the one-notebook rule to ``candidates`` [(depth, shown, path)]."""
    candidates = sorted(candidates)
    nearest = [c for c in candidates if c[0] == candidates[0][0]]
    if len(nearest) > 1:
        listed = ", ".join(f"{folder_name}/{c[1]}" for c in nearest)
        student.problems[assignment] = (
            f"several notebooks for {assignment} ({listed}): none graded"
        )
        student.flags.append(
            f"{assignment}: several notebooks equally near the top of the folder"
            f" ({listed}); none was graded (rule: exactly one notebook per"
            " assignment)"
        )
        return
    _, shown, path = nearest[0]
    if len(candidates) > 1:
        ignored = ", ".join(f"{folder_name}/{c[1]}" for c in candidates[1:])
        student.flags.append(
            f"{assignment}: several notebooks; graded {folder_name}/{shown}, ignored"
            f" {ignored} (rule: the one nearest the top of the student's folder)"
        )
    _take(student, assignment, path, f"{folder_name}/{shown}")


def _take(student: Student, assignment: str, path: Path, shown: str) -> None:
    data, problem, identity = read_notebook(path, shown)
    if data is None:
        student.problems[assignment] = f"not graded: {problem}"
    else:
        student.notebooks[assignment] = (shown, data)
        student.files[assignment] = identity


def collect(folder, assignments) -> tuple[list[Student], list[str]]:
    """The students of ``folder`` (sorted by name) and notes on what was ignored.
    ``assignments``: the instructor's list (at least one; exactly one for one notebook
    per student). ``ValueError`` if there is nothing to grade."""
    folder = Path(folder)
    assignments = list(assignments)
    notes: list[str] = []
    students: list[Student] = []
    entries = sorted(
        (e for e in os.scandir(folder) if not e.name.startswith(".")),
        key=lambda e: e.name,
    )
    flat = [e for e in entries if e.name.endswith(".ipynb")]
    if flat and len(assignments) != 1:
        raise ValueError(
            f"{str(folder)!r} holds one notebook per student ({flat[0].name}, ...):"
            " name exactly one assignment with --assignment"
        )
    for entry in entries:
        if entry.name.endswith(".ipynb"):
            student = Student(entry.name[: -len(".ipynb")])
            _take(student, assignments[0], Path(entry.path), entry.name)
            students.append(student)
        elif entry.is_dir(follow_symlinks=False):
            students.append(_student_folder(Path(entry.path), assignments, notes))
        elif entry.is_symlink():
            student = Student(entry.name)
            for assignment in assignments:
                student.problems[assignment] = (
                    f"not graded: {entry.name} is a symbolic link, not a folder"
                )
            students.append(student)
        else:
            notes.append(f"ignored {entry.name} (not a notebook or a student's folder)")
    owners: dict[tuple, list[tuple[str, str]]] = {}
    for student in students:
        for assignment, identity in student.files.items():
            owners.setdefault(identity, []).append((student.name, assignment))
    for student in students:
        for assignment, identity in student.files.items():
            others = [
                f"{name} ({task})"
                for name, task in owners[identity]
                if name != student.name
            ]
            if others:
                student.flags.append(
                    f"{assignment}: the same file as {', '.join(others)} (a hard link)"
                )
    if not any(s.notebooks for s in students):
        raise ValueError(f"no notebooks to grade in {str(folder)!r}")
    return students, notes


def _student_folder(path: Path, assignments: list[str], notes: list[str]) -> Student:
    student = Student(path.name)
    found = _walk(path)
    by_assignment: dict[str, list] = {}
    for depth, shown, file in found:
        stem = Path(shown).name[: -len(".ipynb")]
        if stem in assignments:
            by_assignment.setdefault(stem, []).append((depth, shown, file))
        elif stem in ASSIGNMENTS:
            notes.append(
                f"{path.name}: ignored {shown} ({stem} is not an assignment of this"
                " batch)"
            )
    if len(assignments) == 1 and not by_assignment and len(found) == 1:
        by_assignment[assignments[0]] = found  # alice/whatever.ipynb
    for depth, shown, file in found:
        if all(shown != c[1] for group in by_assignment.values() for c in group):
            stem = Path(shown).name[: -len(".ipynb")]
            if stem not in ASSIGNMENTS:
                notes.append(
                    f"{path.name}: ignored {shown} (not named after an assignment)"
                )
    for assignment in assignments:
        if assignment in by_assignment:
            _choose(student, assignment, by_assignment[assignment], path.name)
    return student
