"""The watch on what a graded kernel keeps on disk (``engine/disk.py``), without a kernel:
what it counts, what it never follows, and that it stops the kernel once, when a
limit is passed. The sandboxed batch with a disk-filling student is in
``test_grading_attacks.py``."""

from __future__ import annotations

import asyncio
import os

import pytest

from transformer_grader.engine import disk
from transformer_grader.engine.kernel import WATCH_PERIOD, watch

MB = 2**20


def _fill(path, megabytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * (megabytes * MB))


def test_files_in_nested_folders_are_counted(tmp_path):
    _fill(tmp_path / "a" / "b" / "c" / "big", 3)
    _fill(tmp_path / "small", 1)
    assert disk.overuse(tmp_path, 5 * MB, 100) is None
    assert (
        disk.overuse(tmp_path, 3 * MB, 100) == "its folder held more than 3 MB of files"
    )


def test_every_file_and_folder_counts_as_an_entry(tmp_path):
    for n in range(6):
        (tmp_path / "spray").mkdir(exist_ok=True)
        (tmp_path / "spray" / str(n)).touch()
    assert disk.overuse(tmp_path, 100 * MB, 7) is None  # 6 files and their folder
    assert (
        disk.overuse(tmp_path, 100 * MB, 6)
        == "its folder held more than 6 files and folders"
    )


def test_links_are_never_followed(tmp_path):
    outside = tmp_path / "outside"
    _fill(outside / "big", 4)
    private = tmp_path / "private"
    private.mkdir()
    (private / "to-folder").symlink_to(outside)
    (private / "to-file").symlink_to(outside / "big")
    (private / "to-root").symlink_to("/")
    assert disk.overuse(private, 1 * MB, 10) is None


def test_a_sparse_file_costs_what_it_stores(tmp_path):
    with open(tmp_path / "sparse", "wb") as handle:
        handle.truncate(50 * 2**30)  # 50 GB long, nothing stored
    assert disk.overuse(tmp_path, 1 * MB, 10) is None


def test_a_folder_that_cannot_be_read_stops_the_kernel(tmp_path, monkeypatch):
    (tmp_path / "hidden").mkdir()
    if os.geteuid() != 0:  # as root, no mode keeps the grader out: pretend
        (tmp_path / "hidden").chmod(0)
    else:
        real_open = os.open

        def refuse(path, *args, **kwargs):
            if str(path).endswith("hidden"):
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(disk.os, "open", refuse)
    try:
        found = disk.overuse(tmp_path, 100 * MB, 100)
    finally:
        (tmp_path / "hidden").chmod(0o700)
    assert found == "its folder held a folder the grader may not read"


def test_the_watch_stops_the_kernel_once_the_folder_grows_too_big(tmp_path):
    stopped = []

    async def stop():
        stopped.append(True)

    async def scenario():
        watching = asyncio.create_task(
            watch(lambda: disk.overuse(tmp_path, 2 * MB, 100), stop)
        )
        await asyncio.sleep(3 * WATCH_PERIOD)
        assert not watching.done() and stopped == []  # an empty folder: still watching
        _fill(tmp_path / "grows", 3)
        return await asyncio.wait_for(watching, timeout=10 * WATCH_PERIOD)

    assert asyncio.run(scenario()) == "its folder held more than 2 MB of files"
    assert stopped == [True]


@pytest.mark.parametrize("limit", [0, 1])
def test_the_limits_are_bounds_not_hints(tmp_path, limit):
    (tmp_path / "one").touch()
    found = disk.overuse(tmp_path, 100 * MB, limit)
    assert (found is None) == (limit == 1)


def test_a_private_folder_is_removed_whatever_modes_the_kernel_left(tmp_path):
    private = tmp_path / "private"
    _fill(private / "work" / "locked" / "deeper" / "f", 1)
    outside = tmp_path / "outside"
    _fill(outside / "kept", 1)
    (private / "work" / "to-outside").symlink_to(outside)
    (private / "work" / "locked" / "deeper").chmod(0)
    (private / "work" / "locked").chmod(0)
    disk.remove(private)
    assert not private.exists()
    assert (outside / "kept").exists()  # a link is removed, never followed
