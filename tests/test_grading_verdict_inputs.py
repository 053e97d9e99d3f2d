"""Issue 27, the verdict's inputs: attacks that tried to decide a grade from inside the
notebook's kernel, each rebuilt as a submission and graded in one batch beside honest
work, and the pieces that hold them (the fresh interpreter, the ATen block, the source
policy, fresh inputs, the bounded source check) tested on their own.

Classes of attack:

1. *the runner's watch swapped* in the kernel, then a banned reference reached through
   a name built at run time;
2. *the runner's writer patched* in the kernel to write outputs of its own;
3. *a reference under another name* (``torch.ops.aten...`` built with ``getattr``);
4. *forged replies* on the kernel's own channels (an IPython hook);
5. *memorised test cases* (a lookup table of one run's outputs);
7. *a source that explodes the parser* (one 4 MB cell) and *a graded def hidden in a
   ``%%capture`` cell*.

Each attacker scores what its own code earns (0), the reason is in its row, the honest
rows are unchanged and the batch completes.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import textwrap

import pytest
import torch

from classroom import ROOT, instructor, need_sandbox, processes, student, write
from conftest import HONEST_ATTENTION
from transformer_grader.engine import batch, definitions, source_check, static
from transformer_grader.tasks import ASSIGNMENTS, TASKS
from transformer_grader.engine.verdict import grade_namespace

TIMEOUT = 20

# 1. The old runner's Guard swapped for a do-nothing class, then PyTorch's fused
# attention reached by a computed name.
SWAP_GUARD = """
import transformer_grader.runner.plan as plan
class Nothing:
    def __init__(self, *a, **k): self.hits, self.tampered = [], []
    def __enter__(self): return self
    def __exit__(self, *a): pass
    def check(self): pass
plan.Guard = Nothing
import torch.nn.functional as F
def scaled_dot_product_attention(q, k, v, mask=None):
    keep = None if mask is None else ~mask
    fused = getattr(F, "scaled_dot_product" + "_attention")
    return fused(q, k, v, attn_mask=keep), torch.softmax(q @ k.transpose(-2, -1), -1)
"""

# 2. The old runner's writer patched: the graded function returns nothing useful, the
# patched writer would put a reference's outputs in the results file.
PATCH_WRITER = """
import transformer_grader.runner.plan as plan
def forged_save(report, path):
    import torch
    report["tasks"] = {"attention": {"found": ["scaled_dot_product_attention"],
                                     "outputs": [], "hits": [], "tampered": []}}
    torch.save(report, path)
plan._save = forged_save
def scaled_dot_product_attention(q, k, v, mask=None):
    return 0
"""

# 3. The math kernel of attention, reached through torch.ops by computed names.
ATEN_MATH = """
def scaled_dot_product_attention(q, k, v, mask=None):
    ops = getattr(getattr(getattr(torch, "o" + "ps"), "aten"), "_scaled_dot_product" + "_attention_math")
    keep = None if mask is None else ~mask
    context, weights = ops(q, k, v, attn_mask=keep)
    return context, weights
"""

# 4. A pre_run_cell hook that would answer the grader's cell itself; the graded
# function never computes anything.
FORGED_REPLIES = """
def _forge(info):
    kernel = get_ipython().kernel
    kernel.session.send(kernel.iopub_socket, "status", {"execution_state": "idle"})
get_ipython().events.register("pre_run_cell", _forge)
def scaled_dot_product_attention(q, k, v, mask=None):
    raise RuntimeError("never computes")
"""

# 7. A graded function inside a %%capture cell, using the banned fused kernel.
CAPTURED = """%%capture
import torch.nn.functional as F
def scaled_dot_product_attention(q, k, v, mask=None):
    keep = None if mask is None else ~mask
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep), None
"""

# New tricks of the same classes, tried against the fresh interpreter itself.
# 1'. The dispatcher's block dropped and the profile hook cleared from graded code, with
# sys reached as an attribute of a module that holds it (no import, no computed name).
SYS_REACH = """
import torch.nn.functional as F
def scaled_dot_product_attention(q, k, v, mask=None):
    s = F.torch.sys
    s.modules["transformer_grader.runner.dispatch"]._LIBRARIES.clear()
    s.setprofile(None)
    keep = None if mask is None else ~mask
    fused = getattr(F, "scaled_dot_product_attention")
    return fused(q, k, v, attn_mask=keep), torch.softmax(q @ k.transpose(-2, -1), -1)
"""

# 2'. A frame of its own written on the runner's pipe (descriptor 300).
FRAME_FORGER = """
def scaled_dot_product_attention(q, k, v, mask=None):
    with open(300, "wb", closefd=False) as pipe:
        pipe.write(b"TTR1" + (0).to_bytes(8, "big"))
    return q, q
"""

# 3'. The fused kernel behind a functools.partial made from a literal getattr: no
# banned name in the source and no policy hit; the dispatcher is what holds it.
PARTIAL = """
import functools
import torch.nn.functional as F
_fused = functools.partial(getattr(F, "scaled_dot_product_attention"), dropout_p=0.0)
def scaled_dot_product_attention(q, k, v, mask=None):
    keep = None if mask is None else ~mask
    return _fused(q, k, v, attn_mask=keep), torch.softmax(q @ k.transpose(-2, -1), -1)
"""

# 4'. The reference run from a string inside the graded function.
EXEC_STRING = """
def scaled_dot_product_attention(q, k, v, mask=None):
    space = {"q": q, "k": k, "v": v}
    exec("import torch.nn.functional as F\\n"
         "out = F.scaled_dot_product_attention(q, k, v)", space)
    return space["out"], torch.softmax(q @ k.transpose(-2, -1), -1)
"""

HUGE_CELL = "a = 1\nx = [" + "a, " * (4 * 2**20 // 3) + "]\n"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    need_sandbox()
    subs = tmp_path_factory.mktemp("verdict") / "submissions"
    write(
        subs,
        {
            "honest.ipynb": instructor(),
            "untouched.ipynb": student(),
            "classmate.ipynb": student(HONEST_ATTENTION),
            "swap_guard.ipynb": student(SWAP_GUARD),
            "patch_writer.ipynb": student(PATCH_WRITER),
            "aten_math.ipynb": student(ATEN_MATH),
            "forged_replies.ipynb": student(FORGED_REPLIES),
            "captured.ipynb": student(CAPTURED),
            "huge.ipynb": student(HUGE_CELL, HONEST_ATTENTION),
            "sys_reach.ipynb": student(SYS_REACH),
            "frame_forger.ipynb": student(FRAME_FORGER),
            "partial.ipynb": student(PARTIAL),
            "exec_string.ipynb": student(EXEC_STRING),
        },
    )
    out = subs.parent / "grades.csv"
    batch.grade_folder(
        subs, out, timeout=TIMEOUT, jobs=2, assignments=["01_attention"], log=None
    )
    left = processes("transformer_grader.runner.serve")
    with open(out, newline="", encoding="utf-8") as handle:  # csv's default limits
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    rows["left running"] = left
    return rows


def test_honest_rows_are_unchanged_and_unflagged(graded):
    assert graded["honest"]["attention"] == "1.000"
    assert graded["classmate"]["attention"] == "1.000"
    assert graded["untouched"]["attention"] == "0.000"
    for name in ("honest", "classmate", "untouched"):
        assert graded[name]["flags"] == "", (name, graded[name]["flags"])
    assert graded["honest"]["status"] == "ok"


@pytest.mark.parametrize(
    "name, reason",
    [
        ("swap_guard", "computed name"),
        ("patch_writer", ""),
        ("aten_math", "computed name"),
        ("forged_replies", ""),
        ("captured", "scaled_dot_product_attention"),
        ("sys_reach", "(.sys)"),
        ("frame_forger", "(open)"),
        ("partial", "scaled_dot_product_attention"),
        ("exec_string", "(exec)"),
    ],
)
def test_each_attacker_scores_what_its_code_earns(graded, name, reason):
    row = graded[name]
    assert row["attention"] == "0.000", row
    assert reason in row["flags"] + row["feedback"], row


def test_the_dispatcher_holds_a_reference_the_source_does_not_name(graded):
    """No banned name, no policy hit: the fused kernel was reached at run time and
    blocked there."""
    row = graded["partial"]
    assert "computed name" not in row["flags"]
    assert "attention: used " in row["flags"], row
    assert "its graded code" not in row["flags"], row


def test_no_cases_interpreter_is_left_running(graded):
    assert graded["left running"] == []


def test_kernel_tricks_are_flagged_for_review(graded):
    assert "changes the module" in graded["swap_guard"]["flags"]
    assert "get_ipython" in graded["forged_replies"]["flags"]
    assert "%%capture" in graded["captured"]["flags"]


def test_a_notebook_too_large_to_check_is_not_graded(graded):
    row = graded["huge"]
    assert row["attention"] == "0.000"
    assert "too large to check" in row["status"]


# ---------------------------------------------------------------------------------------
# The pieces, on their own
# ---------------------------------------------------------------------------------------
def _cells(*sources):
    return list(enumerate(sources))


def test_definitions_are_the_graded_code_and_what_it_uses_only():
    source = definitions.Source(
        _cells(
            "import math\nimport os\nimport torch",
            "SCALE = 2.0\nos.environ['X'] = '1'\nprint('hello')",
            "def helper(x):\n    return x * SCALE\n",
            "def scaled_dot_product_attention(q, k, v, mask=None):\n"
            "    return helper(q), math.pi",
            "import threading; threading.Thread(target=print).start()",
        )
    )
    text = "\n".join(
        d["source"] for d in source.definitions(["scaled_dot_product_attention"])
    )
    assert "SCALE = 2.0" in text and "def helper" in text and "import math" in text
    assert "environ" not in text and "print('hello')" not in text
    assert "threading" not in text and "import os" not in text


def test_an_import_of_several_modules_gives_graded_code_only_what_it_uses():
    """`import time, torch` in a cell of honest work: the graded code needs torch only,
    so `time` (outside the whitelist) is neither run nor a policy hit."""
    source = definitions.Source(
        _cells(
            "import time, torch\nfrom math import pi, tau",
            "def scaled_dot_product_attention(q, k, v, mask=None):\n"
            "    return torch.softmax(q, -1) * pi",
        )
    )
    names = ["scaled_dot_product_attention"]
    text = "\n".join(d["source"] for d in source.definitions(names))
    assert "import torch" in text and "from math import pi" in text
    assert "time" not in text and "tau" not in text
    assert source.policy_hits(names) == []
    namespace = {}
    for item in source.definitions(names):
        exec(compile(item["source"], item["file"], "exec"), namespace)
    assert "torch" in namespace and "time" not in namespace


def test_names_bound_in_top_level_blocks_are_graded_definitions():
    """A helper, a constant or the graded function itself defined inside a top-level
    `if`, `for`, `with` or `try` is found, with the block it needs."""
    source = definitions.Source(
        _cells(
            "import torch\ntry:\n    import einops\nexcept ImportError:\n"
            "    einops = None",
            "if True:\n    SCALE = 2.0\n    def helper(x):\n        return x * SCALE",
            "with torch.no_grad():\n    OFFSET = torch.zeros(1)",
            "for _power in range(3):\n    LAST = _power",
            "if einops is None:\n"
            "    def scaled_dot_product_attention(q, k, v, mask=None):\n"
            "        return helper(q) + OFFSET + LAST",
            "for i in range(2):\n    print('not graded', i)",
        )
    )
    names = ["scaled_dot_product_attention"]
    text = "\n".join(d["source"] for d in source.definitions(names))
    for needed in ("import einops", "def helper", "OFFSET =", "LAST =", "if einops"):
        assert needed in text, needed
    assert "not graded" not in text
    assert source.policy_hits(names) == []
    namespace = {}
    for item in source.definitions(names):
        exec(compile(item["source"], item["file"], "exec"), namespace)
    q = torch.ones(2)
    assert torch.equal(namespace["scaled_dot_product_attention"](q, q, q), q * 2 + 2)


def test_a_policy_hit_inside_a_top_level_block_of_graded_code_counts():
    source = definitions.Source(
        _cells(
            "import torch\nif True:\n    torch.softmax = lambda x, d: x\n"
            "    def scaled_dot_product_attention(q, k, v, mask=None):\n"
            "        return torch.softmax(q, -1)"
        )
    )
    hits = source.policy_hits(["scaled_dot_product_attention"])
    assert any("changes the module torch" in h for h in hits), hits


def test_statements_on_one_line_are_taken_apart():
    source = definitions.Source(_cells("import math; exec('evil')\ndef f():\n return math"))
    text = "\n".join(d["source"] for d in source.definitions(["f"]))
    assert "exec" not in text and "import math" in text


@pytest.mark.parametrize(
    "body, hit",
    [
        ("return vars(torch)['softmax'](q)", "(vars)"),
        ("return globals()['x']", "(globals)"),
        ("return torch.__dict__['softmax'](q)", "__dict__"),
        ("import sys\n    return sys.modules['torch']", "reaches the interpreter (sys)"),
        ("import operator\n    return operator.attrgetter('x')(q)", "by a name the guards do not see"),
        ("return torch.ops.aten.softmax(q, -1, False)", "torch.ops"),
        ("return torch._C._nn.gelu(q)", "private attribute _C of torch"),
        ("import torch.library\n    return q", "torch.library"),
        ("from torch.utils._python_dispatch import TorchDispatchMode\n    return q",
         "torch.utils._python_dispatch"),
        ("class M(torch.Tensor):\n        __torch_function__ = None\n    return q",
         "__torch_function__"),
        ("return get_ipython()", "get_ipython"),
        ("import os\n    return os.getpid()", "imports os"),
        ("torch.nn.functional.softmax = None\n    return q", "changes the module"),
        # new tricks of the same classes (modules reached as attributes, builtins
        # reached through a builtin function, PyTorch reached again through F)
        ("return torch.sys.modules['torch']", "(.sys)"),
        ("import random\n    return random._os.getpid()", "private attribute _os of random"),
        ("import dataclasses\n    return dataclasses.sys.setprofile(None)", "(.sys)"),
        ("return print.__self__.exec('x = 1')", "__self__"),
        ("import torch.nn.functional as F\n    return F.torch._C._nn.gelu(q)",
         "private attribute _C"),
        ("import torch.nn.functional as F\n    return F.torch.library.Library",
         "torch.library"),
        ("return torch.serialization.pickle.loads(b'')", "torch.serialization"),
        ("return open(300, 'wb', closefd=False).write(b'TTR1')", "(open)"),
        ("return q.__class__.__mro__[-1]", "__mro__"),
        ("return torch.utils.cpp_extension.load_inline", "(torch.utils"),
        # the routes of issue 37, reported from the source as the guards refuse them
        ("return torch.jit.script(q)", "(torch.jit)"),
        ("return torch.compile(q)", "(torch.compile)"),
        ("from dataclasses import *\n    return q", "imports * from dataclasses"),
        ("from torch import sys\n    return sys", "reaches the module sys"),
        ("match q:\n        case object(__self__=b):\n            return b",
         "match statements are not allowed"),
        ("return torch.load(q, weights_only=False)", "without weights_only=True"),
        ("import torch.multiprocessing as mp\n    return mp", "starts processes"),
    ],
)
def test_the_policy_hits_in_graded_code(body, hit):
    source = definitions.Source(_cells("import torch", f"def f(q):\n    {body}\n"))
    hits = source.policy_hits(["f"])
    assert any(hit in h and "cell 1, line" in h for h in hits), hits


def test_plain_pytorch_is_not_a_policy_hit():
    honest = textwrap.dedent(
        """
        import math
        import torch
        from torch import nn
        import torch.nn.functional as F
        def f(q, mask):
            s = (q @ q.transpose(-2, -1)).masked_fill(mask, float("-inf"))
            w = F.softmax(s / math.sqrt(q.size(-1)), dim=-1)
            return getattr(q, "shape"), torch.nan_to_num(w), nn.Linear(2, 2)
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                for name in ("a", "b"):  # a computed setattr: the guards decide
                    setattr(self, name, nn.Linear(2, 2))
                self._cache = None
            def forward(self, x):
                import time
                started = time.perf_counter()
                return getattr(self, "a")(x)
        """
    )
    assert definitions.Source(_cells(honest)).policy_hits(["f", "M"]) == []


def test_honest_notebooks_have_no_review_flags_and_no_hits():
    for folder in ("instructor", "student"):
        for path in sorted((ROOT / "assignments" / folder).glob("*.ipynb")):
            import nbformat

            nb = nbformat.read(path, as_version=4)
            source = definitions.Source(source_check.code_cells(nb))
            assert source.review() == [], path
            for task in TASKS.values():
                assert source.policy_hits(task.names) == [], (path, task.name)


def test_the_source_check_is_bounded(monkeypatch):
    nb = {"cells": [{"cell_type": "code", "source": HUGE_CELL}]}
    with pytest.raises(source_check.TooLarge, match="too large to check"):
        source_check.check(nb, {"attention": ["f"]}, [["f"]])
    # under the size bound, over the memory bound: the subprocess dies, not the grader
    nb = {"cells": [{"cell_type": "code", "source": "x = [" + "a, " * 600_000 + "]"}]}
    monkeypatch.setattr(source_check, "MEMORY_MB", 20)
    with pytest.raises(source_check.TooLarge, match="too large to check"):
        source_check.check(nb, {"attention": ["f"]}, [["f"]])


def test_a_banned_name_in_the_source_check_is_found():
    nb = {"cells": [{"cell_type": "code", "source": CAPTURED}]}
    task = TASKS["attention"]
    checked = source_check.check(nb, {"attention": list(task.names)}, [])
    used = static.banned_among(checked["tasks"]["attention"]["names"], task)
    assert used == ["torch.nn.functional.scaled_dot_product_attention"]


_DISPATCH = """
import threading, torch, torch.nn.functional as F
from transformer_grader.runner import dispatch
from transformer_grader.tasks import ASSIGNMENTS, TASKS
dispatch.block(TASKS["attention"].ops + TASKS["loss"].ops)
q = torch.randn(2, 3, 4, requires_grad=True)
logits, targets = torch.randn(5, 7, requires_grad=True), torch.randint(0, 7, (5,))
routes = {
    "F": lambda: F.scaled_dot_product_attention(q, q, q),
    "aten math": lambda: torch.ops.aten._scaled_dot_product_attention_math(q, q, q),
    "getattr": lambda: getattr(getattr(torch, "o" + "ps").aten, "_scaled_dot_product_flash_attention_for_cpu")(q[None], q[None], q[None]),
    "no_grad": lambda: torch.no_grad()(F.scaled_dot_product_attention)(q, q, q),
    "cross_entropy": lambda: F.cross_entropy(logits, targets),
    "C alias": lambda: torch._C._nn.cross_entropy_loss(logits, targets),
    "module": lambda: torch.nn.CrossEntropyLoss()(logits, targets),
}
def in_thread(fn):
    box = {}
    def run():
        try: fn()
        except Exception as error: box["e"] = error
    t = threading.Thread(target=run); t.start(); t.join()
    if "e" in box: raise box["e"]
routes["thread"] = lambda: in_thread(routes["F"])
for name, route in routes.items():
    try:
        route()
    except Exception as error:
        assert type(error).__name__ == "ReferenceUnavailable", (name, error)
    else:
        raise AssertionError(f"{name} was not blocked")
# what students write is untouched: softmax, matmul, masked_fill, log_softmax, nll_loss
s = (q @ q.transpose(-2, -1)).masked_fill(torch.eye(3, dtype=torch.bool), -1e9)
(s.softmax(-1) @ q).sum().backward()
F.nll_loss(F.log_softmax(logits, -1), targets).backward()
print("HITS", sorted(dispatch.HITS))
"""


def test_banned_aten_ops_are_blocked_by_every_route():
    done = subprocess.run(
        [sys.executable, "-c", _DISPATCH],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    hits = done.stdout.split("HITS", 1)[1]
    for op in (
        "scaled_dot_product_attention",
        "_scaled_dot_product_attention_math",
        "_scaled_dot_product_flash_attention_for_cpu",
        "cross_entropy_loss",
    ):
        assert repr(op) in hits


def _solution(assignment: str, names) -> dict:
    """The instructor's graded definitions of ``names``, run here."""
    source = definitions.Source(source_check.code_cells(instructor(assignment)))
    namespace = {}
    for item in source.definitions(names):
        exec(compile(item["source"], item["file"], "exec"), namespace)
    return namespace


@pytest.mark.parametrize("task", ["masks", "positional", "noam", "attention", "loss"])
def test_a_lookup_table_of_one_run_scores_zero_on_the_next(task):
    """The reference's outputs for one run's inputs, replayed: full marks on that run,
    nothing on the next (another seed, as every notebook gets)."""
    spec = TASKS[task]
    first = spec.make_cases(spec.names, 11)
    second = spec.make_cases(spec.names, 12)
    names = [c.name for c in first]
    keys = [repr(sorted((k, repr(v)) for k, v in c.inputs.items())) for c in first]
    assert keys != [
        repr(sorted((k, repr(v)) for k, v in c.inputs.items())) for c in second
    ] or names != [c.name for c in second]
    if task in ("masks", "positional", "noam"):
        # the inputs of every case differ between two runs
        for a, b in zip(first, second):
            assert repr(a.inputs) != repr(b.inputs), (task, a.name)
    # the instructor's solution, turned into a table of the first run's outputs
    assignment = next(a for a, tasks in ASSIGNMENTS.items() if task in tasks)
    reference = _solution(assignment, spec.names)
    table = {}

    def remembering(name, fn):
        def remembered(*args, **kwargs):
            key = repr((args, sorted(kwargs.items())))
            if key not in table:
                table[key] = fn(*args, **kwargs)
            return table[key]

        return remembered

    first_run = grade_namespace(
        {n: remembering(n, reference[n]) for n in spec.names}, [task], seed=11
    )[task]
    assert first_run["score"] == 1.0, first_run["feedback"]

    def lookup(name):
        def replay(*args, **kwargs):
            return table[repr((args, sorted(kwargs.items())))]

        return replay

    replayed = grade_namespace({n: lookup(n) for n in spec.names}, [task], seed=12)
    assert replayed[task]["score"] == 0.0, replayed[task]["feedback"]


def _layout(case) -> str:
    """What a case's inputs look like, values aside: tensor shapes, bool masks in full
    and the module sizes."""
    out = []
    for key, value in sorted(case.inputs.items()):
        if isinstance(value, torch.Tensor):
            mask = value.tolist() if value.dtype == torch.bool else None
            out.append((key, tuple(value.shape), mask))
        elif key in ("d_model", "num_heads", "d_ff"):
            out.append((key, value))
    return repr(out)


@pytest.mark.parametrize("task", ["attention", "multihead", "encoder"])
def test_sizes_and_masks_are_drawn_afresh_on_every_run(task):
    """Seed 0 is the notebook's own check (its fixed sizes); every other seed draws the
    shapes, lengths, masks and module sizes too, not only the values: a module built in
    advance for the notebook's sizes meets other ones. The instructor's solution scores
    1.0 on each draw."""
    spec = TASKS[task]
    fixed = [_layout(c) for c in spec.make_cases(spec.names, 0)]
    layouts = {0: fixed}
    for seed in (11, 12, 13):
        cases = spec.make_cases(spec.names, seed)
        assert [c.name for c in cases] != [c.name for c in spec.make_cases(spec.names, 0)]
        layouts[seed] = [_layout(c) for c in cases]
        # every case has another layout than the notebook's
        assert all(a != b for a, b in zip(fixed, layouts[seed])), (task, seed)
    assert layouts[11] != layouts[12] != layouts[13]
    assignment = next(a for a, tasks in ASSIGNMENTS.items() if task in tasks)
    reference = _solution(assignment, spec.names)
    for seed in (0, 11, 12, 13, 14):
        verdict = grade_namespace(reference, [task], seed=seed)[task]
        assert verdict["score"] == 1.0, (seed, verdict["feedback"])
