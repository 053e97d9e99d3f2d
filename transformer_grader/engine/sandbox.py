"""The operating-system sandbox every graded kernel runs in (bubblewrap, on Linux).

Nothing that runs inside a student's process can be trusted to watch that process: the
student's code can switch any watch off. So each kernel runs in a sandbox where there is
nothing to steal and nothing to reach:

- **what it sees**, read-only: the system's libraries (``/usr``), the interpreter and
  the virtualenv (less ``HIDDEN_PACKAGES``: Hugging Face's ``transformers``), and the
  *student edition* of the library (``engine/edition.py``), shown also in place of the
  installed library; writable: one private folder of its own (the
  kernel's working folder, its sockets, the grader's plan and its outputs) and a small
  ``/tmp`` in memory. No other submission, no instructor notebook, no file of the
  grader's, no home folder.
- **its own namespaces**: user (an unprivileged user inside, ``--disable-userns`` for
  nested ones where bubblewrap has it), PID (it sees only its own processes: not the
  grader, not another kernel), IPC, network (no network at all: the grader talks to the
  kernel over Jupyter's ``ipc`` transport, Unix sockets in the private folder) and UTS.
- **its own session and no parent to outlive**: ``--new-session``,
  ``--die-with-parent``; when the kernel's first process ends, the PID namespace ends
  with it, so a process the notebook started (a daemon, with ``setsid`` or through
  ``ctypes``) cannot live on.
- **a cleared environment**: nothing of the instructor's shell; ``HOME``, ``TMPDIR``,
  IPython's and Jupyter's folders in the sandbox's ``/tmp``.
- **limits** (``Limits``), set before the kernel starts (``runner/launch.py``): memory,
  processes and threads, CPU time, file size, open files; the size of ``/tmp``; and,
  in the grader, how much output a kernel may send, how much its private folder may
  hold on disk (``disk``) and how much memory all its processes may hold together
  (``memory``; each kernel process is also the out-of-memory killer's first choice).

When the grader runs as root, the kernel must not: a process of root escapes the process
limit and owns what it writes. Then an outer bubblewrap, as root, shows the same files
and the same private folder, and ``setpriv`` starts the inner sandbox as an unprivileged
user of its own (one per kernel slot, no capability left).

Where no sandbox can run (not Linux, no ``bwrap``, user namespaces switched off), the
grader refuses to grade unless told ``--no-sandbox`` (``Sandbox.unsandboxed``), and then
says so in every row.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import transformer_lib

from . import cgroup

# Where the edition appears in the sandbox (it holds transformer_lib/ and
# transformer_grader/).
LIBRARY = "/sandbox/library"
LAUNCH = f"{LIBRARY}/transformer_grader/runner/launch.py"
HOME = "/tmp/home"
SANDBOX_UID = 1000
# When the grader is root: the unprivileged users kernels run as (slot k: BASE_UID + k).
BASE_UID = 1_900_000_000
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Packages of the virtualenv that a kernel does not see (an empty folder in their place):
# Hugging Face's models hold ready-made attention, encoder layers, losses and greedy
# generation, a reference for every task, and no assignment needs them.
HIDDEN_PACKAGES = ("transformers",)
_ETC = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
)


# The least address space a graded kernel can start in (``--memory``): Jupyter's kernel
# with PyTorch, the library and the runner imported, one thread, peaks at about 1.4 GB
# of address space (measured: VmPeak 1.38 GB; started under 1280 MB, it fails to load
# libtorch), and the notebook's own tensors need room on top.
MIN_KERNEL_MEMORY_MB = 2048


class SandboxUnavailable(RuntimeError):
    """No sandbox can run on this machine; the message says why and what to do."""


@dataclass(frozen=True)
class Limits:
    """What one graded kernel may use. ``cpu_seconds`` counts every thread of every
    process; ``processes`` counts threads too (Linux counts both the same way)."""

    memory_mb: int = 4096  # address space of each process (RLIMIT_AS)
    processes: int = 128  # processes and threads (RLIMIT_NPROC)
    cpu_seconds: int = 600  # CPU time of each process (RLIMIT_CPU)
    file_mb: int = 256  # size of any file it writes (RLIMIT_FSIZE)
    open_files: int = 512  # open file descriptors (RLIMIT_NOFILE)
    tmp_mb: int = 256  # the sandbox's /tmp, in memory
    output_mb: int = 32  # output the grader accepts from it before stopping it
    disk_mb: int = 1024  # what its private folder may hold on disk (``disk.watch``)
    files: int = 10_000  # files and folders its private folder may hold
    total_memory_mb: int = 6144  # all its processes together (``memory``): 1.5 x

    def launch_arguments(self) -> list[str]:
        """The arguments of ``runner/launch.py`` that set the limits
        (``NAME=VALUE``)."""
        return [
            f"AS={self.memory_mb * 2**20}",
            f"NPROC={self.processes}",
            f"CPU={self.cpu_seconds}",
            f"FSIZE={self.file_mb * 2**20}",
            f"NOFILE={self.open_files}",
            "CORE=0",
        ]


def _passwd() -> tuple[str, str]:
    user = f"student:x:{SANDBOX_UID}:{SANDBOX_UID}:student:{HOME}:/usr/sbin/nologin\n"
    group = f"student:x:{SANDBOX_UID}:\n"
    return user, group


def _hidden_folders() -> list[str]:
    """Where the ``HIDDEN_PACKAGES`` are installed (found, not imported)."""
    import importlib.util

    found = []
    for name in HIDDEN_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for folder in getattr(spec, "submodule_search_locations", None) or []:
            if os.path.isdir(folder):
                found.append(os.path.realpath(folder))
    return found


def _installed_packages() -> dict[str, Path]:
    """Where the library and the grader are installed (package name -> folder)."""
    return {
        "transformer_lib": Path(transformer_lib.__file__).resolve().parent,
        "transformer_grader": Path(__file__).resolve().parent.parent,
    }


def _python_trees() -> list[str]:
    """The interpreter and the virtualenv, as the kernel must find them (same paths)."""
    trees = []
    for path in (sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix):
        path = os.path.abspath(path)
        if path not in trees and not any(
            path == t or path.startswith(t + os.sep) for t in trees + ["/usr"]
        ):
            trees.append(path)
    return trees


class Sandbox:
    """Makes the command line that starts a kernel: in bubblewrap (``Sandbox(root)``)
    or, for ``--no-sandbox``, plainly (``Sandbox.unsandboxed(root)``).

    ``root`` is the grader's own folder for this batch; it holds ``etc/`` (the sandbox's
    user and group files). Check ``Sandbox.problem()`` first: None, or why no sandbox
    can run here."""

    def __init__(self, root, limits: Limits = Limits(), confined: bool = True):
        self.root, self.limits, self.confined = Path(root), limits, confined
        self.as_root = confined and os.name == "posix" and os.geteuid() == 0
        self.bwrap = shutil.which("bwrap")
        self.setpriv = shutil.which("setpriv")
        # private folder -> the memory cgroups of the processes started for it
        self.groups: dict[str, list[cgroup.MemoryGroup]] = {}
        self.left: list[cgroup.MemoryGroup] = []  # not removable yet (still ending)
        etc = self.root / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        user, group = _passwd()
        (etc / "passwd").write_text(user, encoding="ascii")
        (etc / "group").write_text(group, encoding="ascii")
        for path in (self.root, etc, etc / "passwd", etc / "group"):
            path.chmod(0o755 if path.is_dir() else 0o644)

    @classmethod
    def unsandboxed(cls, root, limits: Limits = Limits()) -> "Sandbox":
        return cls(root, limits, confined=False)

    # -- can it run here? --------------------------------------------------------------
    @staticmethod
    def problem_without_trying() -> str | None:
        if not sys.platform.startswith("linux"):
            return f"the sandbox needs Linux (bubblewrap); this is {sys.platform}"
        if shutil.which("bwrap") is None:
            return (
                "bubblewrap is not installed (the `bwrap` command): install it, e.g."
                " `apt-get install bubblewrap` or `dnf install bubblewrap`"
            )
        if os.geteuid() == 0 and shutil.which("setpriv") is None:
            return (
                "running as root, the sandbox needs `setpriv` (util-linux) to start"
                " kernels as an unprivileged user"
            )
        return None

    def problem(self, edition: Path) -> str | None:
        """None if a sandboxed Python starts here with ``edition``; else why not."""
        reason = self.problem_without_trying()
        if reason:
            return reason
        private = self.private_folder("probe", 0)
        try:
            command = self.command(
                private,
                edition,
                0,
                ["-c", f"import os; os.stat({LAUNCH!r})"],
            )
            try:
                done = subprocess.run(
                    command, capture_output=True, timeout=60, env=self.outer_env()
                )
            except (OSError, subprocess.TimeoutExpired) as error:
                return f"bwrap could not start a sandbox: {error}"
            if done.returncode != 0:
                said = done.stderr.decode("utf-8", "replace").strip().splitlines()
                return (
                    "bwrap could not start a sandbox here"
                    + (f" ({said[-1]})" if said else "")
                    + ": user namespaces may be switched off (sysctl"
                    " kernel.unprivileged_userns_clone or user.max_user_namespaces),"
                    " or a container forbids them"
                )
        finally:
            self.release(private)
            shutil.rmtree(private, ignore_errors=True)
        return None

    # -- the private folder ------------------------------------------------------------
    def uid(self, slot: int) -> int:
        """The user a kernel in ``slot`` runs as, seen from outside the sandbox."""
        return BASE_UID + slot if self.as_root else os.getuid()

    def private_folder(self, name: str, slot: int) -> Path:
        """A new private folder (``work/`` inside, the kernel's working folder), owned
        by the user the kernel in ``slot`` runs as, closed to everyone else."""
        private = self.root / name
        folders = [private, private / "work", private / "ipc"]
        if not self.confined:  # the kernel's HOME and TMPDIR (a sandbox has /tmp)
            folders += [private / "home", private / "tmp"]
        for path in folders:
            path.mkdir(parents=True)
        for path in folders:
            path.chmod(0o700)
            if self.as_root:
                os.chown(path, self.uid(slot), self.uid(slot))
        return private

    def hand_over(self, fd: int, slot: int) -> None:
        """Make a file the grader wrote in a private folder (open as ``fd``: never
        through a path the kernel could have changed) readable by its kernel."""
        os.fchmod(fd, 0o644)
        if self.as_root:
            os.fchown(fd, self.uid(slot), self.uid(slot))

    # -- the command line --------------------------------------------------------------
    def outer_env(self) -> dict:
        """The environment bwrap itself starts with (the kernel's is set inside)."""
        keep = ("PATH", "LANG", "LC_ALL")
        env = {k: v for k, v in os.environ.items() if k in keep}
        env.setdefault("PATH", "/usr/bin:/bin")
        return env

    def kernel_env(self, private: Path, edition: Path) -> dict:
        """The kernel's environment: nothing of the grader's, except the locale."""
        tmp = "/tmp" if self.confined else str(private / "tmp")
        home = HOME if self.confined else str(private / "home")
        library = LIBRARY if self.confined else str(edition)
        env = {
            "PATH": os.pathsep.join(
                [os.path.join(sys.prefix, "bin"), "/usr/local/bin", "/usr/bin", "/bin"]
            ),
            "HOME": home,
            "USER": "student",
            "LOGNAME": "student",
            "LANG": "C.UTF-8",
            "TMPDIR": tmp,
            "PYTHONPATH": library,
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "IPYTHONDIR": f"{home}/.ipython",
            "JUPYTER_CONFIG_DIR": f"{home}/.jupyter",
            "JUPYTER_DATA_DIR": f"{home}/.local/share/jupyter",
            "JUPYTER_RUNTIME_DIR": f"{home}/.local/share/jupyter/runtime",
            "MPLCONFIGDIR": f"{home}/.config/matplotlib",
            "MPLBACKEND": "Agg",
            # One thread per kernel: --jobs kernels run side by side on tiny tensors.
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        if os.name != "posix":  # Windows needs its own variables to start Python at all
            for name in ("SYSTEMROOT", "WINDIR", "COMSPEC", "PATHEXT"):
                if name in os.environ:
                    env[name] = os.environ[name]
            env["PATH"] = os.pathsep.join([env["PATH"], os.environ.get("PATH", "")])
        return env

    def command(self, private: Path, edition: Path, slot: int, python_args) -> list:
        """The command that runs ``python *python_args`` for a kernel: with its limits,
        in the sandbox (or not, unsandboxed)."""
        python = [sys.executable]
        if os.name != "posix":  # no resource limits, and exec would end the process
            return [*python, *python_args]
        if not self.confined:
            launch = edition / "transformer_grader" / "runner" / "launch.py"
            return [*python, str(launch), *self.limits.launch_arguments(), "--"] + list(
                python_args
            )
        inner = [
            self.bwrap,
            *self._namespaces(),
            *self._view(private, edition),
            "--chdir",
            str(private / "work"),
            "--clearenv",
            *[
                x
                for name, value in self.kernel_env(private, edition).items()
                for x in ("--setenv", name, value)
            ],
            "--",
            *python,
            LAUNCH,
            *self.limits.launch_arguments(),
            "--",
            *python_args,
        ]
        if not self.as_root:
            return inner
        outer = [*self._outer(private, edition), "--", *self._drop(slot), *inner]
        if not cgroup.available():
            return outer
        groups = self.groups.setdefault(str(private), [])
        group = cgroup.MemoryGroup(
            f"tt-grade-{self.root.name}-{private.name}-{len(groups)}",
            self.limits.total_memory_mb * 2**20,
        )
        groups.append(group)
        return group.wrap(outer)

    def release_all(self) -> None:
        """Remove every memory cgroup still held (end of a batch: a group whose
        processes took long to end was left behind by ``release``)."""
        for private in list(self.groups):
            self.release(Path(private))
        for group in self.left:
            group.remove(wait=10.0)
        self.left.clear()

    def release(self, private: Path) -> str | None:
        """After the processes started for ``private`` ended: remove their memory
        cgroups (if they had any) and say what went over, if one passed its limit."""
        over = self.over(private)
        for group in self.groups.pop(str(private), []):
            if not group.remove():
                self.left.append(group)
        return over

    def over(self, private: Path) -> str | None:
        """Whether a memory cgroup of ``private``'s processes passed its limit (they may
        still run: a slot's cases server lives for the batch); None if not."""
        if any(g.went_over() for g in self.groups.get(str(private), [])):
            return f"its processes held more than {self.limits.total_memory_mb} MB of memory"
        return None

    def _namespaces(self) -> list[str]:
        flags = [
            "--unshare-user",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            "sandbox",
            "--die-with-parent",
            "--new-session",
        ]
        if _bwrap_has("--disable-userns"):
            flags.append("--disable-userns")
        return flags

    def _sources(self, edition: Path) -> list[str]:
        """The host paths a sandbox shows (besides its private folder)."""
        found = [p for p in _SYSTEM + _ETC if os.path.lexists(p)]
        return found + _python_trees() + [str(edition), str(self.root / "etc")]

    def _view(self, private: Path, edition: Path) -> list[str]:
        """What the kernel sees: bwrap's mount options."""
        # (bwrap's --size applies to the next --tmpfs)
        view = ["--size", str(self.limits.tmp_mb * 2**20), "--tmpfs", "/tmp"]
        for path in _SYSTEM + _ETC:
            if os.path.islink(path) and path in _SYSTEM:  # merged /usr: /bin -> usr/bin
                view += ["--symlink", os.readlink(path), path]
            elif os.path.exists(path):
                view += ["--ro-bind", path, path]
        for tree in _python_trees():
            view += ["--ro-bind", tree, tree]
        for folder in _hidden_folders():  # an empty folder, read-only, in its place
            view += ["--size", "4096", "--tmpfs", folder, "--remount-ro", folder]
        view += ["--ro-bind", str(edition), LIBRARY]
        for name, installed in _installed_packages().items():
            if any(
                str(installed).startswith(t + os.sep)
                for t in _python_trees() + ["/usr"]
            ):  # installed (not editable): show the edition in its place
                view += ["--ro-bind", str(edition / name), str(installed)]
        etc = self.root / "etc"
        view += ["--ro-bind", str(etc / "passwd"), "/etc/passwd"]
        view += ["--ro-bind", str(etc / "group"), "/etc/group"]
        view += ["--bind", str(private), str(private)]
        view += ["--dir", HOME, "--proc", "/proc", "--dev", "/dev"]
        # POSIX shared memory is files in /dev/shm: in memory too, so limited as /tmp
        view += ["--size", str(self.limits.tmp_mb * 2**20), "--tmpfs", "/dev/shm"]
        if _bwrap_has("--mqueue"):  # its own message queues, for the fork server to see
            view += ["--mqueue", "/dev/mqueue"]
        view += ["--remount-ro", "/dev"]  # its own nodes stay usable, no new files
        # the root itself (a tmpfs of bwrap's, holding the mount points) read-only: the
        # only places to write are the private folder and the small /tmp
        view += ["--remount-ro", "/"]
        return view

    def _outer(self, private: Path, edition: Path) -> list[str]:
        """As root: a first bwrap that shows the inner one's sources at their paths
        (their parent folders opened for the unprivileged user) and a fresh PID
        namespace; /proc is the host's, which the inner one replaces by its own."""
        sources = [p for p in self._sources(edition) if not os.path.islink(p)]
        sources.append(str(private))
        outer = [self.bwrap, "--unshare-pid", "--die-with-parent", "--new-session"]
        for path in _SYSTEM:
            if os.path.islink(path):
                outer += ["--symlink", os.readlink(path), path]
        parents = set()
        for path in sources:
            outer += ["--bind" if path == str(private) else "--ro-bind", path, path]
            parent = os.path.dirname(path)
            while parent not in ("/", ""):
                parents.add(parent)
                parent = os.path.dirname(parent)
        mounted = set(sources)
        for parent in sorted(parents):
            if not any(parent == m or parent.startswith(m + os.sep) for m in mounted):
                outer += ["--chmod", "0755", parent]
        outer += ["--bind", "/proc", "/proc", "--dev", "/dev"]
        outer += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        return outer

    def _drop(self, slot: int) -> list[str]:
        uid = self.uid(slot)
        return [
            self.setpriv,
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--no-new-privs",
            "--",
        ]


_HELP: dict[str, str] = {}


def _bwrap_has(flag: str) -> bool:
    """Whether this bubblewrap knows ``flag`` (older ones lack ``--disable-userns``)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False
    if bwrap not in _HELP:
        try:
            done = subprocess.run([bwrap, "--help"], capture_output=True, timeout=10)
            _HELP[bwrap] = done.stdout.decode("utf-8", "replace")
        except (OSError, subprocess.TimeoutExpired):
            _HELP[bwrap] = ""
    return flag in _HELP[bwrap]
