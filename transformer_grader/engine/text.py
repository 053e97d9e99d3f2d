"""Text from a notebook made safe to show: in the CSV, in a spreadsheet, in a terminal.

Everything a row holds that a student chose (a file name, an exception message, a
status) may carry control characters (ANSI escapes that move the cursor, set a window
title or forge a log line), right-to-left overrides that make ``bob<RLO>000.0`` look
like a score, or a megabyte of text that no CSV reader accepts. So:

- ``shown(text)`` writes every control, format and bidi character as a visible escape
  (``\\x1b``, ``\\u202e``), and a backslash as ``\\\\``: two different texts are never
  shown alike (the escaping is injective), and nothing reaches a terminal raw;
- ``capped(text, limit)`` keeps at most ``limit`` characters and says how many were
  left out;
- ``cell(text)`` keeps a spreadsheet from reading a cell as a formula: a leading
  apostrophe when it starts with ``= + - @``, a tab, a carriage return or an apostrophe
  (so ``=1+1`` and ``'=1+1`` stay two different cells: ``'=1+1`` and ``''=1+1``);
- ``look_alike(name)`` is the key under which names that look the same (NFC/NFD forms,
  compatibility forms, case) are grouped, to flag them.
"""

from __future__ import annotations

import unicodedata

FEEDBACK_CHARS = 2000  # of one task's feedback in the CSV
STATUS_CHARS = 400
FLAG_CHARS = 400
FLAGS = 30  # flags kept per row


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _visible(char: str, newlines: bool) -> str:
    if char == "\\":
        return "\\\\"
    if char == "\n" and newlines:
        return char
    category = unicodedata.category(char)
    # Cc: controls (C0, DEL, C1); Cf: format (bidi overrides and isolates, zero-width
    # joiners, BOM); Zl/Zp: line and paragraph separators; Co/Cs/Cn: private, surrogate,
    # unassigned
    if category in ("Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn"):
        return _escape(char)
    return char


def shown(text, newlines: bool = False) -> str:
    """``text`` with every control, format or bidi character (and ``\\``) escaped;
    with ``newlines``, line breaks are kept as they are."""
    text = str(text)
    if text.isascii() and text.isprintable() and "\\" not in text:
        return text
    return "".join(_visible(c, newlines) for c in text)


def capped(text: str, limit: int) -> str:
    """At most about ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f" [... {len(text) - limit} more characters]"


def cell(value: str) -> str:
    """A cell a spreadsheet shows as text, injectively (see the module)."""
    if value and value[0] in "=+-@\t\r'":
        return "'" + value
    return value


def look_alike(name: str) -> str:
    """Names equal under this key look the same to a reader."""
    return unicodedata.normalize("NFKC", name).casefold()
