"""The grading engine: everything between a folder of submissions and ``grades.csv``.

- ``collect``: which notebooks count, one per student and assignment;
- ``edition``: the student edition of the library (no reference of the graded task);
- ``sandbox``: bubblewrap's command line and the limits of a kernel;
- ``kernel``: one notebook's cells in its kernel, with the watches (``disk``,
  ``memory``, the output cap) and the grader's first and last cells;
- ``static``: a look at the notebook's source; ``audit`` and ``watch``: what the
  unsandboxed mode can still report;
- ``verdict``: the saved outputs judged against the references, outside the sandbox;
- ``submission``: one notebook from its bytes to its report; ``batch``: the class, its
  rows and ``grades.csv``.
"""
