"""Issue 37: graded code is restricted Python. Each route the third hostile review took
to arbitrary Python (or to a reference the watch could not see) is refused by the
guards of ``runner/restricted.py`` and scores 0 with a reason; the honest solutions the
old deny-list zeroed score 1.0.

Graded in this process as the cases interpreter grades (``classroom.grade_restricted``):
the rules are what is tested here; ``test_grading_attacks.py`` grades in sandboxes.
"""

from __future__ import annotations

import nbformat
import pytest

from classroom import INSTRUCTOR, grade_restricted, student
from conftest import HONEST_ATTENTION

CHEATS = {
 "getattr_self": ("01_attention", "attention", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    b = getattr(print, "__self__")
    return b.eval("1")
'''),
 "from_torch_sys": ("01_attention", "attention", '''
from torch import sys
def scaled_dot_product_attention(q, k, v, mask=None):
    return sys.modules["transformer_lib"].scaled_dot_product_attention(q, k, v, mask)
'''),
 "dataclasses_sys": ("01_attention", "attention", '''
from dataclasses import sys
def scaled_dot_product_attention(q, k, v, mask=None):
    return sys.modules["torch"].nn.functional.scaled_dot_product_attention(q, k, v)
'''),
 "match": ("01_attention", "attention", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    match print:
        case object(__self__=b):
            return b
'''),
 "typing_hints": ("01_attention", "attention", '''
import typing
def f(x: "__import__('os').system('id')"): pass
def scaled_dot_product_attention(q, k, v, mask=None):
    typing.get_type_hints(f)
'''),
 "star_pickle": ("01_attention", "attention", '''
from torch.serialization import *
def scaled_dot_product_attention(q, k, v, mask=None):
    return pickle.loads(b"")
'''),
 "torch_load": ("01_attention", "attention", '''
import io, torch
def scaled_dot_product_attention(q, k, v, mask=None):
    return torch.load(io.BytesIO(b""), weights_only=False)
'''),
 "definition_time_mask": ("02_masks", "masks", '''
import torch
TABLE = torch.nn.Transformer.generate_square_subsequent_mask(64) == float("-inf")
def causal_mask(length):
    return TABLE[:length, :length][None, None]
'''),
 "jit_script": ("01_attention", "attention", '''
import torch
F = torch.nn.functional
S = torch.jit.script(F.scaled_dot_product_attention)
def scaled_dot_product_attention(q, k, v, mask=None):
    return S(q, k, v), None
'''),
 "jit_encoder": ("06_encoder_layer", "encoder", '''
import torch
from torch import nn
class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.inner = torch.jit.script(nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout, batch_first=True, norm_first=norm_first))
    def forward(self, x, mask=None):
        return self.inner(x)
'''),
 "subclass_encoder": ("06_encoder_layer", "encoder", '''
from torch import nn
class EncoderLayer(nn.TransformerEncoderLayer):
    pass
'''),
 "compile": ("01_attention", "attention", '''
import torch
def scaled_dot_product_attention(q, k, v, mask=None):
    f = torch.compile(torch.nn.functional.scaled_dot_product_attention)
    return f(q, k, v), None
'''),
 "nn_compile": ("03_multihead", "multihead", '''
import torch
from torch import nn
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.m = nn.Linear(d_model, d_model)
        self.m.compile()
'''),
 "multiprocessing": ("04_loss", "loss", '''
import torch.multiprocessing as mp
def masked_cross_entropy(logits, targets, pad_id=0, label_smoothing=0.0):
    return mp.get_context("fork")
'''),
 "ao_copy": ("03_multihead", "multihead", '''
import torch
class MultiHeadAttention(torch.ao.nn.quantizable.MultiheadAttention):
    pass
'''),
 "ao_import": ("03_multihead", "multihead", '''
from torch.ao.nn.quantizable import MultiheadAttention as M
class MultiHeadAttention(M):
    pass
'''),
 "private_C": ("04_loss", "loss", '''
import torch
def masked_cross_entropy(logits, targets, pad_id=0, label_smoothing=0.0):
    return torch._C._nn.cross_entropy_loss(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), None, 1, pad_id, label_smoothing)
'''),
 "format_escape": ("01_attention", "attention", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    return "{0.__self__}".format(print)
'''),
 "gen_frame": ("01_attention", "attention", '''
def scaled_dot_product_attention(q, k, v, mask=None):
    g = (i for i in range(3))
    return g.gi_frame.f_globals
'''),
}


@pytest.mark.parametrize("route", sorted(CHEATS))
def test_a_route_to_arbitrary_python_scores_zero_with_a_reason(route):
    assignment, task, code = CHEATS[route]
    verdict = grade_restricted(student(code, assignment=assignment), [task])[task]
    assert verdict["score"] == 0.0, verdict
    reasons = " ".join(verdict["flags"]) + verdict["feedback"]
    assert (
        "graded code was refused" in reasons
        or "not allowed in graded code" in reasons
        or "not available while your work is graded" in reasons
        or "your code used" in reasons
    ), verdict


def test_every_instructor_notebook_scores_one_under_the_guards():
    for path in sorted(INSTRUCTOR.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        tasks = nb.metadata["transformer_lib"]["tasks"]
        graded = grade_restricted(nb, tasks)
        assert graded["defined"] == [], (path.name, graded["defined"])
        for task in tasks:
            assert graded[task]["score"] == 1.0, (path.name, graded[task])
            assert graded[task]["flags"] == [], (path.name, graded[task])


# The four honest, correct solutions the old deny-list scored 0 (issue 37).
ATTENTION = "\nimport math\nimport torch" + HONEST_ATTENTION  # (a blank first line)
HONEST = {
    # a later exploratory cell binds `weights` (a local of the graded function) with
    # PyTorch's reference: a local is a local, that cell is not graded code
    "local_named_like_a_later_cell": ("01_attention", "attention", ATTENTION, '''
import torch.nn.functional as F
q = k = v = torch.randn(1, 2, 4)
weights = F.scaled_dot_product_attention(q, k, v)
'''),
    # projections made in a loop with a computed setattr on self
    "setattr_loop": ("03_multihead", "multihead", '''
import math
import torch
from torch import nn
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.h, self.d_k = num_heads, d_model // num_heads
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, nn.Linear(d_model, d_model))
        self._scale = 1 / math.sqrt(self.d_k)
    def _split(self, x):
        b, n, _ = x.shape
        return x.reshape(b, n, self.h, self.d_k).transpose(1, 2)
    def forward(self, query, key, value, mask=None):
        q, k, v = (self._split(getattr(self, p)(x)) for p, x in
                   (("q_proj", query), ("k_proj", key), ("v_proj", value)))
        scores = q @ k.transpose(-2, -1) * self._scale
        if mask is not None:
            scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights.masked_fill(mask, 0.0)
        out = (weights @ v).transpose(1, 2)
        return self.out_proj(out.reshape(out.size(0), out.size(1), -1)), weights
''', ""),
    # a dead debugging line that would print vars()
    "dead_vars_print": ("01_attention", "attention", ATTENTION.replace(
        "    return weights @ v, weights",
        "    if DEBUG:\n        print(vars())\n    return weights @ v, weights",
    ) + "\nDEBUG = False\n", ""),
    # `import time` inside the function (a timing left in)
    "import_time": ("01_attention", "attention", ATTENTION.replace(
        "    scores =", "    import time\n    started = time.perf_counter()\n    scores =", 1
    ), ""),
}


@pytest.mark.parametrize("solution", sorted(HONEST))
def test_an_honest_unusual_solution_scores_one(solution):
    assignment, task, code, later = HONEST[solution]
    cells = [code] + ([later] if later else [])
    graded = grade_restricted(student(*cells, assignment=assignment), [task])
    assert graded[task]["score"] == 1.0, graded[task]
    assert graded["defined"] == [], graded["defined"]


def test_everyday_builtins_and_exceptions_are_there():
    """An honest solution may catch OSError or format with hex(): such builtins are safe
    (the guards still stand between them and any dunder)."""
    code = ATTENTION.replace(
        "    scores =",
        "    try:\n        raise OSError('no file')\n    except (OSError, RecursionError):\n"
        "        tag = hex(len(q.shape)) + bin(0)\n    scores =", 1)
    graded = grade_restricted(student(code, assignment="01_attention"), ["attention"])
    assert graded["attention"]["score"] == 1.0, graded["attention"]


# --------------------------------------------------------------------------------------
# The same, graded for real: sandboxed, from the command line, as a class hands in
# --------------------------------------------------------------------------------------
# a few routes of each kind: a builtin's module, a module reached by import from
# another, a star-import, unpickling, compiling out of sight, a copy of the reference
BATCH_CHEATS = ("getattr_self", "from_torch_sys", "star_pickle", "torch_load",
                "jit_script", "compile", "ao_copy")


@pytest.fixture(scope="module")
def batch_rows(tmp_path_factory):
    import csv

    from classroom import grade_args, grader_processes, need_sandbox, run_cli, write

    need_sandbox()
    base = tmp_path_factory.mktemp("restricted")
    subs, out = base / "submissions", base / "grades.csv"
    files = {}
    for name, (assignment, _, code, later) in HONEST.items():
        cells = [code] + ([later] if later else [])
        files[f"honest_{name}/{assignment}.ipynb"] = student(*cells, assignment=assignment)
    for name in BATCH_CHEATS:
        assignment, _, code = CHEATS[name]
        files[f"cheat_{name}/{assignment}.ipynb"] = student(code, assignment=assignment)
    write(subs, files)
    args = grade_args(subs, out, "--seed", "11", "--timeout", "30", "--jobs", "2",
                      "--assignment", "03_multihead")
    done, _ = run_cli(args)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out, newline="", encoding="utf-8") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert grader_processes() == []
    return rows


@pytest.mark.parametrize("solution", sorted(HONEST))
def test_an_honest_unusual_solution_scores_one_in_a_real_batch(batch_rows, solution):
    assignment, task, _, _ = HONEST[solution]
    row = batch_rows[f"honest_{solution}"]
    assert row[task] == "1.000", row
    assert f"{assignment}: ok" in row["status"], row  # (the other: not submitted)
    assert "seccomp" not in row["flags"], row
    # a flag is allowed (the dead `vars()` is one, with its line), never a 0
    if solution == "dead_vars_print":
        assert "the grader would refuse its graded code: calls vars" in row["flags"], row


@pytest.mark.parametrize("route", BATCH_CHEATS)
def test_a_route_scores_zero_with_a_reason_in_a_real_batch(batch_rows, route):
    _, task, _ = CHEATS[route]
    row = batch_rows[f"cheat_{route}"]
    assert row[task] == "0.000", row
    reasons = row["flags"] + row["feedback"]
    assert (
        "graded code was refused" in reasons
        or "not allowed in graded code" in reasons
        or "not available while your work is graded" in reasons
        or "your code used" in reasons
        or "your code uses" in reasons
    ), row


# --------------------------------------------------------------------------------------
# The notebook's own check says it first (a warning, never a failed case)
# --------------------------------------------------------------------------------------
def test_the_check_cell_warns_of_what_the_grader_would_refuse():
    from transformer_grader.tasks._task import notebook_warnings

    cells = [
        (1, "import math\nimport torch"),
        (2, ATTENTION),  # an earlier run of the same function: its last run counts
        (3, ATTENTION.replace("    scores =", "    import os\n    scores =", 1)),
        (4, "check_attention(scaled_dot_product_attention)"),
    ]
    warnings = notebook_warnings(["scaled_dot_product_attention"], cells)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("the grader would refuse In [3], line 5: your code"
                                  " imports os"), warnings
    # honest code: no warning; and a result shows its warnings without failing
    assert notebook_warnings(["scaled_dot_product_attention"], cells[:2]) == []
    from transformer_grader import GradeResult

    result = GradeResult("attention")
    result.add("a case", True)
    result.warnings = warnings
    assert result and "⚠ warning: the grader would refuse In [3]" in str(result)
    assert "warning: the grader would refuse" in result._repr_html_()


def test_the_check_cell_reads_the_running_notebook():
    """``check_attention`` in IPython reads the cells run so far (``In``)."""
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    try:
        for source in (
            "import math, torch",
            HONEST["dead_vars_print"][2].replace("DEBUG = False", ""),
            "DEBUG = False",
            "from transformer_grader import check_attention\n"
            "result = check_attention(scaled_dot_product_attention)",
        ):
            shell.run_cell(source, store_history=True)
        result = shell.user_ns["result"]
    finally:
        shell.run_cell("%reset -f")
    assert result, str(result)
    assert any("calls vars" in w for w in result.warnings), result.warnings
