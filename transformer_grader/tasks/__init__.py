"""The graded tasks and the assignments that hold them: the instructor's side of
grading.

``TASKS`` maps a task to its ``Task`` (the names a notebook defines, the check, the
references its code may not use). ``ASSIGNMENTS`` maps each assignment (the instructor
notebook's file name, without ``.ipynb``) to its tasks. Batch grading takes the task
list from here, never from a submitted notebook's metadata (a student can edit that);
``tests/test_assignments.py`` keeps it equal to the instructor notebooks' metadata.
"""

from __future__ import annotations

from . import (
    attention,
    encoder,
    greedy,
    kv_cache,
    loss,
    masks,
    multihead,
    noam,
    positional,
    train_step,
)

_MODULES = (
    attention,
    masks,
    multihead,
    loss,
    positional,
    encoder,
    noam,
    train_step,
    kv_cache,
    greedy,
)
TASKS = {module.TASK.name: module.TASK for module in _MODULES}

ASSIGNMENTS = {
    "01_attention": ("attention",),
    "02_masks": ("masks",),
    "03_multihead": ("multihead",),
    "04_loss": ("loss",),
    "05_positional": ("positional",),
    "06_encoder_layer": ("encoder",),
    "07_training": ("noam", "train_step"),
    "08_greedy_cache": ("kv_cache", "greedy"),
}

MISTAKES = {}
for _module in _MODULES:
    for _key, _message in _module.MISTAKES.items():
        assert _key not in MISTAKES, f"two tasks name the mistake {_key!r}"
        MISTAKES[_key] = _message
