"""GradeResult: the outcome of one check, case by case, readable by a student.

``Failed``, ``NOT_IMPLEMENTED`` and ``describe_exception`` come from the runner (the
student's side raises and words them too); they are re-exported here for the judges.
"""

from __future__ import annotations

import html

from ..runner.cases import NOT_IMPLEMENTED, Failed, describe_exception

__all__ = ["Failed", "GradeResult", "NOT_IMPLEMENTED", "describe_exception"]


class GradeResult:
    """The outcome of one check: a list of cases, each ``(name, passed, message)``.

    ``bool(result)`` is True only when there is at least one case and every case passed.
    ``result.score`` is the fraction of cases passed (0.0 to 1.0). ``print(result)`` (or
    displaying it in Jupyter) shows one line per case with a tick or a cross, and for
    each failure what was expected, what was found and, when recognised, the name of the
    classic mistake.
    """

    def __init__(self, title: str, cases=None):
        self.title = title
        self.cases: list[tuple[str, bool, str]] = list(cases or [])
        # what the batch grader would refuse in the graded code (``notebook_warnings``):
        # shown to the student, never a failed case
        self.warnings: list[str] = []

    # -- building ----------------------------------------------------------------------
    def add(self, name: str, passed: bool, message: str = "") -> None:
        self.cases.append((name, bool(passed), message))

    def run(self, name: str, case) -> bool:
        """Run ``case()``; it passes unless it raises. Never lets an exception
        escape."""
        try:
            case()
        except Failed as failure:
            self.add(name, False, str(failure))
        except NotImplementedError:
            self.add(name, False, NOT_IMPLEMENTED)
        except (
            Exception
        ) as error:  # the student's code crashed: report it, do not crash
            self.add(name, False, describe_exception(error))
        else:
            self.add(name, True, "")
        return self.cases[-1][1]

    # -- reading -----------------------------------------------------------------------
    @property
    def passed(self) -> int:
        return sum(1 for _, ok, _ in self.cases if ok)

    @property
    def total(self) -> int:
        return len(self.cases)

    @property
    def score(self) -> float:
        return self.passed / self.total if self.total else 0.0

    def __bool__(self) -> bool:
        return self.total > 0 and self.passed == self.total

    def failures(self) -> list[tuple[str, str]]:
        return [(name, msg) for name, ok, msg in self.cases if not ok]

    def feedback(self) -> str:
        """Only the failed cases, one paragraph each (for a grade sheet)."""
        if not self.cases:
            return f"{self.title}: nothing was checked."
        if self:
            return f"{self.title}: all {self.total} cases passed."
        lines = [f"{self.title}: {self.passed}/{self.total} cases passed."]
        for (name, ok, _), shown in zip(self.cases, self._shown_messages()):
            if not ok:
                lines.append(f"- {name}: {shown}")
        return "\n".join(lines)

    def __str__(self) -> str:
        verdict = (
            "all passed" if self else "some failed" if self.total else "nothing checked"
        )
        lines = [f"{self.title}: {self.passed}/{self.total} cases passed ({verdict})"]
        for (name, ok, _), shown in zip(self.cases, self._shown_messages()):
            lines.append(f"  {'✓' if ok else '✗'} {name}")
            lines += [f"      {line}" for line in shown.splitlines()]
        lines += [f"  ⚠ warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def _shown_messages(self) -> list[str]:
        """The message to show for each case, shortened when it repeats an earlier one:
        an identical message becomes "(same problem as above)", and a repeated
        explanation (the lines after the first) is replaced by "(same mistake as
        above)"."""
        shown, seen_messages, seen_hints = [], set(), set()
        for _, ok, msg in self.cases:
            if ok or not msg:
                shown.append("")
                continue
            first, _, hint = msg.partition("\n")
            if msg in seen_messages:
                shown.append("(same problem as above)")
            elif hint and hint in seen_hints:
                shown.append(f"{first}\n(same mistake as above)")
            else:
                shown.append(msg)
            seen_messages.add(msg)
            if hint:
                seen_hints.add(hint)
        return shown

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self else "#cf222e"
        rows = []
        for (name, ok, _), shown in zip(self.cases, self._shown_messages()):
            mark = "&#10003;" if ok else "&#10007;"
            mark_colour = "#1a7f37" if ok else "#cf222e"
            detail = (
                ""
                if not shown
                else (
                    "<div style='margin:2px 0 6px"
                    f" 1.6em;white-space:pre-wrap'>{html.escape(shown)}</div>"
                )
            )
            rows.append(
                f"<div><span style='color:{mark_colour};font-weight:bold'>{mark}</span>"
                f" {html.escape(name)}{detail}</div>"
            )
        for warning in self.warnings:
            rows.append(
                "<div><span style='color:#9a6700;font-weight:bold'>&#9888;</span>"
                f" warning: {html.escape(warning)}</div>"
            )
        return (
            "<div style='font-family:monospace'><div"
            f" style='color:{colour};font-weight:bold'>{html.escape(self.title)}:"
            f" {self.passed}/{self.total} cases passed</div>" + "".join(rows) + "</div>"
        )
