"""The grading engine: everything between a folder of submissions and ``grades.csv``.

- ``collect``: which notebooks count, one per student and assignment;
- ``edition``: the student edition of the library (no reference of the graded task);
- ``sandbox``: bubblewrap's command line and the limits of a kernel;
- ``kernel``: one notebook's cells in its kernel, with the watches (``disk``,
  ``memory``, ``cgroup``, the output cap), for the status and the student's feedback;
- ``source_check`` and ``definitions``: the source read in a bounded subprocess: each
  task's graded definitions and what the rules of graded code would refuse in them (flags); ``static``: banned names in them;
- ``fresh``: the cases run on the graded definitions in a fresh sandboxed interpreter
  (``runner/serve.py``), beside the kernel; ``fork_servers``: in a batch, that
  interpreter forked from a warm parent per kernel slot (``runner/fork_server.py``);
  ``audit`` and ``watch``: what the unsandboxed mode can still report;
- ``bounds``, ``judge`` and ``verdict``: the raw outputs bounded, then judged against the
  references in a worker with its own memory limit, outside the sandbox;
- ``submission``: one notebook from its bytes to its report; ``batch``: the class, its
  rows and ``grades.csv`` (``collect``, ``text``: who is who, and text shown safely).
"""
