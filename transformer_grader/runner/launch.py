"""Start a graded kernel with its resource limits: run as a script (by path, so that no
package is imported first), before any of the student's code.

    python launch.py AS=4294967296 NPROC=128 CPU=600 ... -- -m ipykernel_launcher -f F

It sets each ``NAME=VALUE`` as ``resource.RLIMIT_NAME`` (soft and hard; the CPU
limit's hard value is a few seconds above the soft one, so that the kernel first gets
``SIGXCPU``), makes this process the out-of-memory killer's first choice (Linux), then
the Python after ``--`` replaces this process. Lowering a limit needs no privilege, and
nothing the kernel does later can raise it again. Where there is no ``resource``
module, the limits are skipped (on Windows the grader starts the kernel directly).
"""

import os
import sys


def main(argv: list[str]) -> None:
    cut = argv.index("--")
    limits, python_args = argv[:cut], argv[cut + 1 :]
    try:
        import resource
    except ImportError:  # Windows
        resource = None
    for item in limits if resource is not None else ():
        name, _, value = item.partition("=")
        which = getattr(resource, f"RLIMIT_{name}")
        soft = int(value)
        hard = soft + 5 if name == "CPU" else soft
        _, allowed = resource.getrlimit(which)
        if allowed != resource.RLIM_INFINITY:  # a limit can only go down
            hard, soft = min(hard, allowed), min(soft, allowed)
        resource.setrlimit(which, (soft, hard))
    try:  # out of memory, the kernel's OOM killer takes a kernel, never the grader
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")
    except OSError:  # not Linux
        pass
    os.execv(sys.executable, [sys.executable, *python_args])


if __name__ == "__main__":
    main(sys.argv[1:])
