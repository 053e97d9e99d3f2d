"""The batch's fork servers (``engine/fork_servers.py``, ``runner/fork_server.py``): a
warm parent per kernel slot forks each notebook's cases interpreter. A child must be as
fresh as a new interpreter: it answers exactly what ``fresh.run`` answers, and nothing
one notebook's child does (a process left running, a file left behind, the parent
stopped or killed, the parent's memory read) reaches the next notebook's child.

Each test runs sandboxed cases of the attention task: a hostile notebook's definitions
do their trick once, then compute honestly (so their own score says nothing), and the
next notebook's definitions check what they inherited: an honest answer scores 1.0 only
where the check passed.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from classroom import need_sandbox
from conftest import HONEST_ATTENTION
from transformer_grader.engine import edition as _edition
from transformer_grader.engine import fork_servers, fresh, memory
from transformer_grader.engine.sandbox import Limits, Sandbox
from transformer_grader.engine.verdict import judge_task, plan_item
from transformer_grader.tasks import TASKS

TASK = TASKS["attention"]

# The honest function, its output multiplied by `_ok()`: 1.0 only where the check held.
CHECKED = HONEST_ATTENTION.replace(
    "def scaled_dot_product_attention(q, k, v, mask=None):",
    "def scaled_dot_product_attention(q, k, v, mask=None):\n    assert _ok()",
)


def _definitions(*sources: str) -> list[dict]:
    """The request's definitions: ``CHECKED`` is graded code (restricted Python); the
    rest is *trusted* (plain Python, ``serve.define``), standing for code that got past
    restricted Python: what the sandbox, the seccomp filter and the warm parent must
    hold on their own."""
    head = "import math, os, signal, subprocess, sys, time\nimport torch\n"
    return [{"file": "<cell 1>", "source": head, "trusted": True}] + [
        {"file": f"<cell {i + 2}>", "source": s, "trusted": s is not CHECKED}
        for i, s in enumerate(sources)
    ]


@pytest.fixture
def box(tmp_path):
    need_sandbox()
    sandbox = Sandbox(tmp_path / "root", Limits())
    edition = _edition.build(
        tmp_path / "root" / "edition-0", _edition.library_bans(TASK.banned)
    )
    yield sandbox, edition
    sandbox.release_all()


def _server_pid(servers) -> int | None:
    (server,) = servers.servers.values() or [None]
    return None if server is None else server.process.pid


def _grade(servers, edition, definitions, seed=3):
    """(score, problem) of the attention task's cases (seed ``seed``) on
    ``definitions``, in the test's one event loop (the servers' processes belong to the
    loop that started them)."""
    return _LOOP.run_until_complete(_job(servers, edition, definitions, seed))


async def _job(servers, edition, definitions, seed):
    cases = TASK.make_cases(TASK.names, seed)
    report, problem = await servers.run(
        definitions,
        [plan_item(TASK, cases)],
        edition=edition,
        slot=0,
        timeout=30.0,
        startup_timeout=120.0,
    )
    entry = (report or {}).get("tasks", {}).get(TASK.name)
    return judge_task(TASK, cases, entry, problem)["score"], problem


_LOOP: asyncio.AbstractEventLoop


@pytest.fixture
def servers(box):
    global _LOOP
    sandbox, edition = box
    _LOOP = asyncio.new_event_loop()
    pool = fork_servers.ForkServers(sandbox)
    yield pool, edition
    _LOOP.run_until_complete(pool.close())
    _LOOP.close()


def _next_passes(pool, edition, body: str) -> None:
    """The next notebook checks what it inherited with ``body`` (the body of its
    ``_ok()``): its honest answer must score 1.0, so the check must hold."""
    look = "def _ok():\n" + textwrap.indent(body, "    ")
    assert _grade(pool, edition, _definitions(look, CHECKED)) == (1.0, "")


def _processes_below(pid: int) -> list[str]:
    names = []
    for p in memory.descendants(pid):
        try:
            names.append(Path(f"/proc/{p}/comm").read_text().strip())
        except OSError:
            pass
    return names


def test_a_warm_server_answers_what_a_fresh_interpreter_answers(servers):
    pool, edition = servers
    honest = _definitions("_ok = lambda: True", CHECKED)
    score, problem = _grade(pool, edition, honest)
    assert (score, problem) == (1.0, "")
    first = _server_pid(pool)
    assert first is not None, "an honest notebook cost the server"
    for seed in (4, 5):
        assert _grade(pool, edition, honest, seed) == (1.0, "")
    assert _server_pid(pool) == first, "an honest notebook cost the server"
    # the very same outputs as a new interpreter's
    cases = TASK.make_cases(TASK.names, 9)
    item = [plan_item(TASK, cases)]
    args = dict(edition=edition, slot=0, timeout=30.0, startup_timeout=120.0)
    warm, _ = _LOOP.run_until_complete(pool.run(honest, item, **args))
    new, _ = _LOOP.run_until_complete(
        fresh.run(honest, item, sandbox=pool.sandbox, name="fresh", **args)
    )
    a, b = warm["tasks"]["attention"]["outputs"], new["tasks"]["attention"]["outputs"]
    assert len(a) == len(b) == len(cases)
    import torch

    for x, y in zip(a, b):
        assert type(x) is type(y)
        if isinstance(x, (tuple, list)):
            assert all(torch.equal(p, q) for p, q in zip(x, y))


# Every way to leave something for the next notebook that the seccomp filter refuses
# (``runner/syscalls.py``): each attempt must fail with EPERM in the child itself.
ATTEMPTS = """
import ctypes, errno, multiprocessing
_libc = ctypes.CDLL(None, use_errno=True)
_refused = {}
def _raises_eperm(name, action):
    try:
        action()
    except OSError as error:
        _refused[name] = error.errno == errno.EPERM
    else:
        _refused[name] = False
def _fork():
    if os.fork() == 0:  # (without the filter: the copy leaves at once)
        os._exit(0)
def _c_eperm(name, result):
    _refused[name] = result == -1 and ctypes.get_errno() == errno.EPERM
# (the C library's system(): 127 as the status when no shell could be started)
_refused["os.system"] = os.system("sleep 300 &") in (-1, 127 << 8)
_raises_eperm("subprocess", lambda: subprocess.Popen(["sleep", "300"], start_new_session=True))
_raises_eperm("os.fork", _fork)
_raises_eperm("multiprocessing", lambda: multiprocessing.get_context("fork").Process(
    target=time.sleep, args=(300,)).start())
_raises_eperm("multiprocessing spawn", lambda: multiprocessing.get_context("spawn").Process(
    target=time.sleep, args=(300,)).start())
_c_eperm("mq_open", _libc.mq_open(b"/tt-note", os.O_CREAT | os.O_RDWR, 0o600, None))
# add_key("user", "tt-note", "hello", 5, KEY_SPEC_USER_KEYRING); keyctl(GET_KEYRING_ID)
_ADD_KEY, _KEYCTL = 248, 250  # x86_64
_c_eperm("add_key", _libc.syscall(_ADD_KEY, b"user", b"tt-note", b"hello",
                                  ctypes.c_size_t(5), ctypes.c_int(-4)))
_c_eperm("keyctl", _libc.syscall(_KEYCTL, 0, ctypes.c_int(-4), 1))
import threading
_thread = threading.Thread(target=lambda: None)
_thread.start()
_thread.join()  # threads stay allowed: PyTorch's pool is threads
def _ok():
    missing = [name for name, refused in _refused.items() if not refused]
    assert not missing, missing
    return True
"""


def test_the_cases_child_may_start_no_process_queue_or_key(servers):
    """The seccomp filter answers EPERM (an error the student sees, not a kill) to a
    new process by every route, a program started, a POSIX message queue and a key;
    a thread still starts. The child's honest answer then scores 1.0 (``_ok`` checks
    every attempt was refused) and the server is kept: nothing was left."""
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("the keyring calls are numbered for x86_64")
    pool, edition = servers
    assert _grade(pool, edition, _definitions(ATTEMPTS, CHECKED)) == (1.0, "")
    assert _server_pid(pool) is not None
    _next_passes(
        pool,
        edition,
        "mine = {1, os.getpid(), os.getppid()}\n"
        "alive = [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in mine]\n"
        "queues = os.listdir('/dev/mqueue') if os.path.isdir('/dev/mqueue') else []\n"
        "keys = [l for l in open('/proc/keys').read().splitlines()"
        " if l.split()[7:8] != ['keyring']]\n"
        "return not alive and not queues and not keys",
    )


def test_the_warm_parent_sees_a_queue_or_a_key_left_behind(tmp_path):
    """Where a queue or a key did get made (a kernel without the filter), the parent's
    look before reuse finds it, and the grader starts a new server."""
    from transformer_grader.runner import fork_server

    queues = tmp_path / "mqueue"
    queues.mkdir()
    assert fork_server._no_queue(str(queues))
    (queues / "tt-note").write_text("QSIZE:5")
    assert not fork_server._no_queue(str(queues))
    assert fork_server._no_queue(str(tmp_path / "not-mounted"))
    keys = tmp_path / "keys"
    keyring = "1b2c3d4e I--Q---     1 perm 3f030000  1000  1000 keyring   _ses: 1"
    keys.write_text(keyring + "\n")
    assert fork_server._no_key(str(keys))
    keys.write_text(keyring + "\n"
                    "0a1b2c3d I--Q---     1 perm 3f010000  1000  1000 user      tt-note: 5\n")
    assert not fork_server._no_key(str(keys))


def test_no_process_a_notebook_starts_outlives_its_cases(servers):
    pool, edition = servers
    leave = _definitions(
        "for _ in range(3):\n"
        "    try:\n"
        "        subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "    except OSError:\n"
        "        pass  # the seccomp filter: no new process\n"
        "try:\n"
        "    if os.fork() == 0:\n        time.sleep(300)\n        os._exit(0)\n"
        "except OSError:\n"
        "    pass\n"
        "_ok = lambda: True",
        CHECKED,
    )
    assert _grade(pool, edition, leave) == (1.0, "")
    server = _server_pid(pool)
    assert server is not None, "a clean kill of the leftovers keeps the server"
    assert "sleep" not in _processes_below(server)
    # the next notebook's child sees no process but init, its parent and itself
    _next_passes(
        pool,
        edition,
        "mine = {1, os.getpid(), os.getppid()}\n"
        "return not [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in mine]",
    )


def test_a_file_left_behind_costs_the_server_not_the_next_notebook(servers):
    pool, edition = servers
    plant = _definitions(
        "os.makedirs('/tmp/empty/made', exist_ok=True)\n"
        "for _p in ('/tmp/planted', '/dev/shm/planted', 'planted', '../planted'):\n"
        "    open(_p, 'w').write('x')\n"
        "_ok = lambda: True",
        CHECKED,
    )
    assert _grade(pool, edition, plant)[0] == 1.0
    assert _server_pid(pool) is None, "a server with files left behind was kept"
    _next_passes(
        pool,
        edition,
        "return not any(os.path.exists(p) for p in ('/tmp/planted',"
        " '/dev/shm/planted', 'planted', '../planted'))",
    )


def test_the_servers_memory_is_out_of_a_childs_reach(servers):
    pool, edition = servers
    look = (
        "def _ok():\n"
        "    for name in ('mem', 'environ', 'maps', 'fd/0', 'fd/1', 'root/proc/1/mem'):\n"
        "        try:\n"
        "            open(f'/proc/{os.getppid()}/{name}', 'rb').read(16)\n"
        "            return False\n"
        "        except OSError:\n"
        "            pass\n"
        "    return True"
    )
    assert _grade(pool, edition, _definitions(look, CHECKED)) == (1.0, "")


@pytest.mark.parametrize("how", ["SIGSTOP", "SIGKILL"])
def test_a_child_that_stops_its_server_costs_only_the_server(servers, monkeypatch, how):
    pool, edition = servers
    monkeypatch.setattr(fork_servers, "DONE_SECONDS", 2.0)
    hit = _definitions(
        f"os.kill(os.getppid(), signal.{how})\n_ok = lambda: True", CHECKED
    )
    _grade(pool, edition, hit)  # its own score: whatever it gets
    assert _server_pid(pool) is None, "a server that did not answer was kept"
    honest = _definitions("_ok = lambda: True", CHECKED)
    assert _grade(pool, edition, honest) == (1.0, "")
    assert _server_pid(pool) is not None


def test_an_empty_folder_made_while_grading_is_removed_and_keeps_the_server(servers):
    """PyTorch itself makes ``/tmp/torchinductor_<user>`` when a training step imports
    its compiler: an empty folder is tidied away, not a reason to start again."""
    pool, edition = servers
    make = _definitions(
        "os.makedirs('/tmp/torchinductor_x/a/b', exist_ok=True)\n_ok = lambda: True",
        CHECKED,
    )
    assert _grade(pool, edition, make) == (1.0, "")
    first = _server_pid(pool)
    assert first is not None
    _next_passes(pool, edition, "return not os.path.exists('/tmp/torchinductor_x')")
    assert _server_pid(pool) == first


def test_a_server_imports_what_its_tasks_name_once_for_every_child(servers):
    """``Task.imports`` (the training task: ``torch._dynamo``, which an optimizer's first
    construction imports at ~1.2 s of CPU) is imported by the server, so a child finds
    it loaded; a server whose tasks name nothing stays lean."""
    pool, edition = servers
    cases = TASK.make_cases(TASK.names, 3)
    look = "def _ok():\n    return ('torch._dynamo' in sys.modules) == WANTED"
    args = dict(edition=edition, timeout=30.0, startup_timeout=120.0)
    for slot, imports in ((0, []), (1, ["torch._dynamo"])):
        item = dict(plan_item(TASK, cases), imports=imports)
        wanted = f"WANTED = {bool(imports)}"
        report, problem = _LOOP.run_until_complete(
            pool.run(_definitions(wanted, look, CHECKED), [item], slot=slot, **args)
        )
        entry = report["tasks"][TASK.name]
        assert judge_task(TASK, cases, entry, problem)["score"] == 1.0, imports
    assert TASKS["train_step"].imports == ("torch._dynamo",)


def test_without_libseccomp_the_runner_says_why_and_the_row_is_flagged(monkeypatch):
    """Fail safe, and said: where ``libseccomp.so.2`` cannot be found the filter is not
    loaded (nothing here is), the runner's first frame says why, and that reason
    becomes the row's flag (``submission._grade_group``)."""
    import ctypes.util

    from transformer_grader.runner import syscalls

    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    why = syscalls.install()
    assert why == "libseccomp (libseccomp.so.2) is not installed"
    frames = fresh._Frames()
    frames.add({"seccomp": why})
    assert frames.report["seccomp"] == why
    assert "without the seccomp filter (libseccomp" in syscalls.flag(why)
    assert fresh._Frames().report["seccomp"] is None  # unsaid: no flag
