"""The student's side of grading: the only grading code a sandbox has.

Batch grading runs every submission in a sandbox, with a *student edition* of the
library in which the graded task's reference does not exist and the grading package is
reduced to this runner (see ``engine/edition.py``). What it holds, and nothing more:

- ``cases``: run one case on the student's code and turn what came out into plain data;
- ``calls``: how each task's cases call the student's code (the grader's inputs in, the
  raw outputs back); no reference, no judgement;
- ``serve``: the fresh interpreter that runs the cases, beside the notebook's kernel: it
  reads the graded definitions and the cases on its standard input and sends the raw
  outputs back on its standard output;
- ``fork_server``: in a batch, a warm parent of those interpreters (PyTorch imported
  once per kernel slot) that forks one for each notebook and cleans up after it;
- ``dispatch``: blocks the task's banned ATen operators in PyTorch's dispatcher, in that
  interpreter, before any of the student's code runs;
- ``plan``: the kernel's warm-up cell, and the run of one task's cases;
- ``guard``: notices a call of a PyTorch reference the task does not allow by its
  Python name (a second watch beside ``dispatch``);
- ``placeholders``: what ``check_attention(...)`` and friends print in a graded kernel;
- ``unavailable``: what the edition puts where a reference was;
- ``audit``: the kernel's half of the file-access report, used only when grading without
  a sandbox;
- ``launch``: a script that sets the kernel's resource limits and starts it.

The verdict is never computed here: the grading process reads the outputs as data and
judges them against the references, outside the sandbox.
"""
