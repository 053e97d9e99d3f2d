"""The student's side of grading: the only grading code a graded kernel has.

Batch grading runs every submission in a sandbox, with a *student edition* of the
library in which the graded task's reference does not exist and the grading package is
reduced to this runner (see ``engine/edition.py``). What it holds, and nothing more:

- ``cases``: run one case on the student's code and turn what came out into plain data;
- ``calls``: how each task's cases call the student's code (the grader's inputs in, the
  raw outputs back); no reference, no judgement;
- ``plan``: the grader's first and last cells (warm-up; run every case of the plan, save
  the outputs with ``torch.save``);
- ``guard``: notices, for the student's feedback, a call of a PyTorch reference the task
  does not allow (a courtesy: the kernel's own code can switch it off, so the grade
  never rests on it alone);
- ``placeholders``: what ``check_attention(...)`` and friends print in a graded kernel;
- ``unavailable``: what the edition puts where a reference was;
- ``audit``: the kernel's half of the file-access report, used only when grading without
  a sandbox;
- ``launch``: a script that sets the kernel's resource limits and starts it.

The verdict is never computed here: the grading process reads the saved outputs as data
and judges them against the references, outside the sandbox.
"""
