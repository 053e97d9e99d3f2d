"""Small utilities every chapter uses: seeding, device choice, showing library source."""
from __future__ import annotations

import inspect
import os
import random
import re

import numpy as np
import torch

from ._checks import check_bool, check_instance, check_int


def set_seed(seed: int = 0, deterministic: bool | None = None) -> None:
    """Seed Python, NumPy and PyTorch, and choose whether PyTorch must use deterministic algorithms.

    - ``deterministic=None`` (the default): deterministic where it is free, on the CPU; on a machine
      with a CUDA device PyTorch may pick its fastest kernels (deterministic cuBLAS makes every
      matrix product several times dearer on the host).
    - ``True``: deterministic everywhere (``torch.use_deterministic_algorithms(True,
      warn_only=True)``, and ``CUBLAS_WORKSPACE_CONFIG`` set for cuBLAS if it is not set yet;
      PyTorch reads that variable once, so call this before the process's first CUDA matrix
      product, or set it in the environment). Bit-exact runs on a GPU need this.
    - ``False``: PyTorch's defaults.
    """
    check_int("seed", seed, 0, 2**32 - 1)  # NumPy's range
    if deterministic is not None:
        check_bool("deterministic", deterministic)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if deterministic is None:
        deterministic = not torch.cuda.is_available()
    elif deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(deterministic, warn_only=True)


def count_parameters(module: torch.nn.Module) -> int:
    """Trainable parameters of ``module``; a tensor shared by two sub-modules is counted once
    (``module.parameters()`` yields each tensor once)."""
    check_instance("module", module, torch.nn.Module, "a torch.nn.Module")
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def get_device() -> torch.device:
    """The best available device: CUDA, then Apple's MPS, then the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


class SourceCode:
    """The source text of a library object, displayed as a fenced ``python`` block of Markdown.

    A notebook stores this object's output as the *text* itself (``text/markdown`` and
    ``text/plain``), never as a highlighter's HTML: Jupyter, Colab and the HTML book highlight it
    when they display it. So the stored output changes when, and only when, the library's source
    changes (nbval then fails, as it should), not when Pygments or IPython is upgraded.
    """

    def __init__(self, source: str):
        self.source = source

    def _repr_markdown_(self) -> str:
        # A fence longer than any run of backticks inside the source, so none can close it early.
        longest = max((len(run) for run in re.findall(r"`+", self.source)), default=0)
        fence = "`" * max(3, longest + 1)
        return f"{fence}python\n{self.source.rstrip()}\n{fence}"

    def __repr__(self) -> str:
        return self.source.rstrip()


def show_source(obj) -> None:
    """Display the source code of a library function or class.

    Chapters use this to show the library's *real* code (not a copy), so book and package cannot
    drift apart. In a notebook the source is displayed as Markdown, which the front end
    highlights; outside one it is printed as plain text.
    """
    try:
        source = inspect.getsource(obj)
    except (TypeError, OSError):
        raise TypeError(f"obj must be a function, class or method with a source file, "
                        f"got {type(obj).__name__} {obj!r:.60}") from None
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python
        print(source)
        return
    if get_ipython() is None:
        print(source)
        return
    display(SourceCode(source))
