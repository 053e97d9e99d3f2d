"""Grading without a sandbox (``--no-sandbox``): notice files that changed while
submissions ran: the submissions folder, the library, the places Python and Jupyter read
code from at start-up. (A sandboxed kernel cannot write any of them.)

A snapshot maps each file to (size, mtime, ctime, inode). The ctime cannot be set back
by a program (``os.utime`` sets mtime and atime only), so any write, rename or ``chmod``
shows, even one that restores the old mtime. A folder is known by what it holds,
bytecode caches left aside: Python writing a ``__pycache__`` (the grader's own imports
do) is not a change. Nothing is hashed and nothing is written: watching is cheap enough
to repeat after every notebook. It cannot see bytecode planted in a ``__pycache__``:
that is one of the reasons to grade in a sandbox.
"""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path


def _stat(path: str):
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def _folder(path: str):
    try:
        names = os.listdir(path)
    except OSError:
        return None
    return ("folder", tuple(sorted(n for n in names if n != "__pycache__")))


def snapshot(roots, shallow=(), ignore=()) -> dict[str, tuple]:
    """{path: stat} for every file and folder under ``roots`` (recursively, links not
    followed) and for the entries directly inside each of ``shallow`` (site-packages: a
    new ``.pth`` file there would run code in every later Python process). Paths in
    ``ignore`` are skipped.
    """
    ignore = {os.path.abspath(p) for p in ignore}
    found: dict[str, tuple] = {}
    for root in roots:
        root = os.path.abspath(root)
        if not os.path.isdir(root):
            continue
        found[root] = _folder(root)
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in dirs:
                path = os.path.join(folder, name)
                if path not in ignore:
                    found[path] = _folder(path)
            for name in files:
                path = os.path.join(folder, name)
                if path not in ignore:
                    found[path] = _stat(path)
    for folder in shallow:
        folder = os.path.abspath(folder)
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            path = os.path.join(folder, name)
            if (
                path not in ignore
            ):  # a package folder: only whether it is there (imports
                # write caches inside); a file (.pth, sitecustomize.py): all of it
                found[path] = "folder" if os.path.isdir(path) else _stat(path)
    return found


# Files that change by themselves: IPython's history of the instructor's own sessions
# (grading kernels keep theirs in their private folder), and the grader's own temporary
# files.
_NOISE = ("history.sqlite", "history.sqlite-journal", "history.sqlite-wal")


def _noise(path: str) -> bool:
    name = os.path.basename(path)
    return name in _NOISE or name.startswith(".grades-")


def changes(before: dict, after: dict) -> list[str]:
    """What differs, in words: ``changed: PATH``, ``created: PATH``, ``deleted: PATH``.
    A folder whose only change is that an entry inside it changed is not listed
    again."""
    created = sorted(p for p in set(after) - set(before) if not _noise(p))
    deleted = sorted(p for p in set(before) - set(after) if not _noise(p))
    changed = sorted(
        p for p in set(before) & set(after) if before[p] != after[p] and not _noise(p)
    )
    listed = set(created) | set(deleted) | set(changed)
    parents = {os.path.dirname(p) for p in listed | {p for p in after if _noise(p)}}
    changed = [p for p in changed if p not in parents or os.path.isfile(p)]
    return (
        [f"created: {p}" for p in created]
        + [f"deleted: {p}" for p in deleted]
        + [f"changed: {p}" for p in changed]
    )


def watched_places(submissions) -> tuple[list[str], list[str]]:
    """(recursive roots, shallow folders) to watch while grading ``submissions``: the
    submissions, the library and the grader, IPython's and Jupyter's folders (start-up
    files and kernel configuration), and the site-packages folders."""
    import transformer_lib

    home = Path.home()
    roots = [
        str(submissions),
        str(Path(transformer_lib.__file__).parent),
        str(Path(__file__).resolve().parent.parent),  # transformer_grader
        str(home / ".ipython"),
        str(home / ".jupyter"),
    ]
    shallow = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    user_site = (
        site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    )
    if isinstance(user_site, str):
        shallow.append(user_site)
    shallow += [p for p in sys.path if p.endswith("site-packages") and p not in shallow]
    return roots, shallow
