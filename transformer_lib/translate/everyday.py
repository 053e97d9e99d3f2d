"""The everyday sentences: short German sentences written for this project (MIT), each with
one or two English references, in ``benchmarks/data/everyday_de_en.tsv``.

They are not from the Ding dictionary, so a results file may keep what a model makes of
them, and a chapter may print them freely. The file format, one sentence a line::

    # a comment
    Ich bin müde.<TAB>I am tired.<TAB>I'm tired.

The benchmark, chapter 14 and the tests read the file with ``parse_everyday``, so the
format is checked in one place.
"""
from __future__ import annotations

__all__ = ["load_everyday", "parse_everyday"]


def parse_everyday(text: str, where: str = "everyday sentences"
                   ) -> list[tuple[str, list[str]]]:
    """The (German, [English references]) pairs of ``text`` (the file's content), in order.

    Blank lines and lines that start with ``#`` are skipped. A line without a reference,
    or with an empty field, raises ``ValueError`` naming ``where`` and the line number.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be the file's content (a str), got {type(text).__name__}")
    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        source, *references = line.split("\t")
        if not source.strip() or not references or not all(r.strip() for r in references):
            raise ValueError(f"{where}:{number}: expected German<TAB>English[<TAB>English], "
                             f"got {line!r}")
        pairs.append((source, references))
    return pairs


def load_everyday(path) -> list[tuple[str, list[str]]]:
    """``parse_everyday`` of the file at ``path`` (UTF-8)."""
    with open(path, encoding="utf-8") as f:
        return parse_everyday(f.read(), where=str(path))
