"""The pieces of sandboxed grading, one at a time: the student edition of the library
(the graded task's reference is not there, everything else works), what a sandboxed
Python sees and may do, and the grader's reading of the source for PyTorch references.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import nbformat
import pytest

from classroom import ROOT, instructor, need_sandbox
from transformer_grader.engine import edition, static
from transformer_grader.engine.sandbox import Limits, Sandbox
from transformer_grader.engine.submission import kernel_groups
from transformer_grader.tasks import ASSIGNMENTS, TASKS


def _python(folder, code: str) -> dict:
    """Run ``code`` with the edition in ``folder`` first on the path; it prints JSON."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, PYTHONPATH=str(folder), PYTHONDONTWRITEBYTECODE="1"),
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


_TRY = """
import json, torch
import transformer_lib as tl
from transformer_grader.runner.unavailable import ReferenceUnavailable
results = {}
def attempt(name, make):
    try:
        make()
        results[name] = "works"
    except ReferenceUnavailable:
        results[name] = "unavailable"
    except Exception:  # there, but called with nonsense
        results[name] = "error"
"""


@pytest.fixture(scope="module")
def editions(tmp_path_factory):
    """One edition per kernel group of every assignment: (assignment, tasks) ->
    folder."""
    built = {}
    for assignment, tasks in ASSIGNMENTS.items():
        for group in kernel_groups(tasks):
            bans = [b for t in group for b in TASKS[t].banned]
            folder = tmp_path_factory.mktemp(f"edition-{assignment}")
            built[(assignment, tuple(group))] = edition.build(folder / "lib", bans)
    return built


def test_an_assignment_whose_tasks_ban_different_parts_gets_two_kernels():
    assert kernel_groups(ASSIGNMENTS["08_greedy_cache"]) == [["kv_cache"], ["greedy"]]
    assert kernel_groups(ASSIGNMENTS["07_training"]) == [["noam", "train_step"]]


def test_the_edition_holds_no_grader_and_no_reference_source(editions):
    for (assignment, group), folder in editions.items():
        package = folder / "transformer_lib"
        grader = sorted(
            p.name
            for p in (folder / "transformer_grader").iterdir()
            if p.name != "__pycache__"
        )
        assert grader == ["__init__.py", "nbgrader.py", "runner"], assignment
        assert not (package / "grading").exists()
        assert not (package / "assignments").exists()
        text = "\n".join(p.read_text(encoding="utf-8") for p in folder.rglob("*.py"))
        for word in ("attention_variant", "greedy_variant", "def _judge", "make_cases"):
            assert word not in text, (assignment, word)
        for ban in edition.library_bans(b for t in group for b in TASKS[t].banned):
            module = package / (ban.split(".", 1)[1].replace(".", "/") + ".py")
            source = module.read_text(encoding="utf-8")
            assert "is not available while your work is graded" in source
            assert "def " not in source and "class " not in source, ban


@pytest.mark.parametrize(
    "assignment, group, works, unavailable",
    [
        ("01_attention", ("attention",), ["mha_object"], ["attention"]),
        ("03_multihead", ("multihead",), ["norm"], ["attention", "mha_object"]),
        (
            "06_encoder_layer",
            ("encoder",),
            ["mha", "ffn", "norm"],
            ["encoder", "model"],
        ),
        ("07_training", ("noam", "train_step"), ["model"], ["noam", "train"]),
        ("08_greedy_cache", ("kv_cache",), ["norm"], ["mha", "masks"]),
        ("08_greedy_cache", ("greedy",), ["model", "mha"], ["greedy"]),
    ],
)
def test_the_edition_keeps_what_the_task_allows(
    editions, assignment, group, works, unavailable
):
    code = (
        _TRY
        + """
x = torch.randn(1, 3, 8)
attempt("attention", lambda: tl.scaled_dot_product_attention(x, x, x))
attempt("mha_object", lambda: tl.MultiHeadAttention)
attempt("mha", lambda: tl.MultiHeadAttention(8, 2)(x, x, x))
attempt("ffn", lambda: tl.PositionwiseFeedForward(8, 16)(x))
attempt("norm", lambda: tl.LayerNorm(8)(x))
attempt("masks", lambda: tl.causal_mask(3))
attempt("encoder", lambda: tl.EncoderLayer(8, 2, 16))
attempt("model", lambda: tl.Transformer(10, 10, d_model=8, num_heads=2,
        num_encoder_layers=1, num_decoder_layers=1, d_ff=16)(
        torch.ones(1, 3, dtype=torch.long), torch.ones(1, 2, dtype=torch.long)))
attempt("noam", lambda: tl.noam_lr(1, 8, 10))
attempt("train", lambda: tl.train_step)
attempt("greedy", lambda: tl.greedy_decode(None, None, 1, 1, 2))
print(json.dumps(results))
"""
    )
    results = _python(editions[(assignment, group)], code)
    for name in works:
        assert results[name] == "works", (name, results)
    for name in unavailable:
        if name.endswith("_object") or name == "train":
            continue  # a stand-in is an object too: calling it is what fails
        assert results[name] == "unavailable", (name, results)


def test_one_function_can_be_left_out_of_a_module(tmp_path):
    folder = edition.build(tmp_path / "lib", ["transformer_lib.masks.causal_mask"])
    code = (
        _TRY
        + """
tokens = torch.tensor([[3, 4, 0]])
attempt("padding", lambda: tl.padding_mask(tokens))
attempt("causal", lambda: tl.causal_mask(3))
print(json.dumps(results))
"""
    )
    assert _python(folder, code) == {"padding": "works", "causal": "unavailable"}


def test_an_unknown_ban_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="not defined at its top level"):
        edition.build(tmp_path / "lib", ["transformer_lib.masks.no_such_thing"])


# --------------------------------------------------------------------------------------
# What a sandboxed Python sees and may do
# --------------------------------------------------------------------------------------
_LOOK = r"""
import json, os, resource, socket
seen = {"uid": os.getuid(), "home": sorted(os.listdir(os.environ["HOME"]))}
seen["repo"] = os.path.exists("@REPO@/assignments/instructor")
seen["library"] = __import__("transformer_lib").__file__
try:  # Hugging Face's models: references for every task, hidden
    seen["marian"] = hasattr(__import__("transformers"), "MarianMTModel")
except ImportError:
    seen["marian"] = False
seen["env"] = sorted(os.environ)
seen["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
seen["limits"] = {n: resource.getrlimit(getattr(resource, "RLIMIT_" + n))[0]
                  for n in ("AS", "NPROC", "CPU", "FSIZE", "NOFILE")}
try:
    socket.create_connection(("127.0.0.1", 22), timeout=1)
    seen["network"] = True
except OSError:
    seen["network"] = False
for path in ("/sandbox/library/transformer_lib/x.py", "@REPO@/x", "/x", "/usr/x"):
    try:
        open(path, "w").write("x")
        seen.setdefault("wrote", []).append(path)
    except OSError:
        pass
seen["memory_files"] = {}
for folder in ("/tmp", "/dev/shm", "/dev", "/"):
    written = 0
    try:
        for n in range(4):
            with open(os.path.join(folder, f"fill{n}"), "wb") as handle:
                for _ in range(10):
                    handle.write(b"x" * 2**20)
                    written += 1
    except OSError:
        pass
    seen["memory_files"][folder] = written
open("mine.txt", "w").write("written in the sandbox")
print(json.dumps(seen))
"""


def test_a_sandboxed_python_sees_nothing_of_the_graders(tmp_path, monkeypatch):
    need_sandbox()
    monkeypatch.setenv("TT_TEST_SECRET", "never-seen")
    root = tmp_path / "batch"
    root.mkdir()
    folder = edition.build(root / "edition", TASKS["attention"].banned)
    limits = Limits(memory_mb=2048, processes=64, tmp_mb=16)
    box = Sandbox(root, limits)
    assert box.problem(folder) is None
    private = box.private_folder("k", 0)
    done = subprocess.run(
        box.command(private, folder, 0, ["-c", _LOOK.replace("@REPO@", str(ROOT))]),
        capture_output=True,
        text=True,
        env=box.outer_env(),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["uid"] == 1000 and seen["home"] == []
    assert seen["repo"] is False and "wrote" not in seen
    assert seen["library"].startswith("/sandbox/library/")
    assert seen["marian"] is False
    assert "TT_TEST_SECRET" not in seen["env"]
    assert max(seen["pids"]) < 10  # its own PID namespace: a handful of processes
    assert seen["network"] is False
    assert seen["limits"]["AS"] == 2048 * 2**20 and seen["limits"]["NPROC"] == 64
    # what it may write in memory is bounded: /tmp and /dev/shm by their size, nothing
    # at all elsewhere
    written = seen["memory_files"]
    assert 0 < written["/tmp"] <= 16 and 0 < written["/dev/shm"] <= 16
    assert written["/dev"] == 0 and written["/"] == 0
    written = private / "work" / "mine.txt"
    assert written.read_text(encoding="utf-8") == "written in the sandbox"
    if os.geteuid() == 0:  # the grader is root: the kernel must not be
        assert written.stat().st_uid == box.uid(0) != 0


# --------------------------------------------------------------------------------------
# The source, read in the grading process
# --------------------------------------------------------------------------------------
def _notebook(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    return nb


def test_references_are_found_through_imports_and_helpers():
    nb = _notebook(
        "import torch.nn.functional as F\nfrom torch import nn\n"
        "from torch.nn.functional import cross_entropy as ce",
        "def helper(x, t):\n    return ce(x, t)",
        "def masked_cross_entropy(logits, targets, pad_id=0, label_smoothing=0.0):\n"
        "    return helper(logits, targets)",
        "class MultiHeadAttention(nn.Module):\n"
        "    def __init__(self, d, h):\n"
        "        super().__init__()\n"
        "        self.inner = nn.MultiheadAttention(d, h)",
        "class EncoderLayer(nn.TransformerEncoderLayer):\n    pass",
        "%time x = F.cross_entropy  # a magic, outside the graded code",
    )
    assert static.banned_references(nb, TASKS["loss"]) == [
        "torch.nn.functional.cross_entropy"
    ]
    assert static.banned_references(nb, TASKS["multihead"]) == [
        "torch.nn.MultiheadAttention"
    ]
    assert static.banned_references(nb, TASKS["encoder"]) == [
        "torch.nn.TransformerEncoderLayer"
    ]
    assert static.banned_references(nb, TASKS["attention"]) == []


def test_honest_notebooks_name_no_reference_and_no_trick():
    for assignment, tasks in ASSIGNMENTS.items():
        nb = instructor(assignment)
        assert static.tricks(nb) == [], assignment
        for task in tasks:
            assert static.banned_references(nb, TASKS[task]) == [], task


def test_tricks_are_flagged_for_review():
    nb = _notebook(
        "import ctypes, sys\nsys.setprofile(None)\nexec('1')",
        "get_ipython().input_transformers_cleanup.append(len)",
        "y = torch.compile  # not a trick",
        "this is not python (",
    )
    found = static.tricks(nb)
    assert any("ctypes" in f for f in found)
    assert any("sys.setprofile" in f for f in found)
    assert any("exec" in f for f in found)
    assert any("rewrites the cells" in f for f in found)
    assert not any("compile" in f for f in found)


def test_an_installed_library_is_hidden_behind_the_edition(tmp_path, monkeypatch):
    """A library and grader installed into the virtualenv (not editable) would be
    readable there, references and judges included: the sandbox shows the edition's
    packages in their place."""
    from transformer_grader.engine import sandbox

    site = os.path.join(sys.prefix, "lib", "site-packages")
    names = ("transformer_lib", "transformer_grader")
    monkeypatch.setattr(
        sandbox,
        "_installed_packages",
        lambda: {name: sandbox.Path(site, name) for name in names},
    )
    box = Sandbox(tmp_path)
    command = box.command(tmp_path / "k", tmp_path / "edition", 0, ["-c", "pass"])
    pairs = list(zip(command, command[1:], command[2:]))
    for name in names:
        assert (
            "--ro-bind",
            str(tmp_path / "edition" / name),
            os.path.join(site, name),
        ) in pairs
