"""Tokenizers for number words: English words for the source, characters or morphemes for the target.

Every tokenizer here round-trips: ``detokenize(tokenize(text)) == text`` for the texts it is meant
for (the output of ``num2words``), so the model's output tokens turn back into exactly the string a
person would write.

Why morphemes for the target? German writes a number as one long word: 97 is "siebenundneunzig".
As characters that is 16 output steps that mostly copy spelling; as morphemes it is 4 steps,
"sieben und neun zig", each a decision that carries meaning (which digit, which order). The
inventory is small and fixed (about twenty German pieces), so a word is cut by *longest match*
against it, like a hand-made WordPiece; any character the inventory does not cover becomes a
token of its own, so the cut is always possible and always exact.

French writes numbers as several words ("quatre-vingt-dix-sept mille"). With separators
as tokens of their own, almost every second output step only writes a space or a hyphen.
The "glued" scheme attaches each separator to the piece after it ("quatre", "-vingt",
"-dix", "-sept", " mille"): 45% fewer steps, and the separator is chosen with the word.
German, one word, is cut the same way by both schemes.

The fourth scheme, "bpe", is learned from the training targets instead of written by
hand: a byte-pair encoding (``bpe.py``), as in the paper.
"""
from __future__ import annotations

import re

from .bpe import BPETokenizer

# Separators are tokens of their own: "ninety-nine" -> ["ninety", "-", "nine"].
_SOURCE_PATTERN = re.compile(r"[^\s,\-]+|[,\-]")

GERMAN_MORPHEMES = (
    "null", "ein", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sech", "sieben", "sieb",
    "acht", "neun", "zehn", "elf", "zwölf", "zwan", "zig", "ßig", "und", "hundert", "tausend",
)
FRENCH_MORPHEMES = (
    "zéro", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf", "dix", "onze",
    "douze", "treize", "quatorze", "quinze", "seize", "vingt", "vingts", "trente", "quarante",
    "cinquante", "soixante", "cent", "cents", "mille", "et",
)
MORPHEMES = {"de": GERMAN_MORPHEMES, "fr": FRENCH_MORPHEMES}


def _check_text(text) -> None:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")


def _check_tokens(tokens) -> None:
    if isinstance(tokens, str) or not all(isinstance(t, str) for t in tokens):
        raise TypeError(f"tokens must be a list of token strings, got {tokens!r:.60}")


def tokenize_words(text: str) -> list[str]:
    """English number words -> word tokens, with hyphens and commas as tokens of their own.

    >>> tokenize_words("one thousand, two hundred and forty-two")
    ['one', 'thousand', ',', 'two', 'hundred', 'and', 'forty', '-', 'two']
    """
    _check_text(text)
    return _SOURCE_PATTERN.findall(text)


def detokenize_words(tokens: list[str]) -> str:
    """The inverse of ``tokenize_words`` for normally written text: one space between words,
    none around a hyphen, none before a comma."""
    _check_tokens(tokens)
    text = ""
    for i, token in enumerate(tokens):
        glue = i > 0 and token not in ("-", ",") and tokens[i - 1] != "-"
        text += (" " if glue else "") + token
    return text


def tokenize_chars(text: str) -> list[str]:
    """Characters as tokens: the simplest target scheme (long sequences, tiny vocabulary)."""
    _check_text(text)
    return list(text)


def detokenize_chars(tokens: list[str]) -> str:
    _check_tokens(tokens)
    return "".join(tokens)


class MorphemeTokenizer:
    """Cut each word into pieces from a fixed inventory by greedy longest match.

    Spaces, hyphens and commas are tokens of their own, or with ``glue=True`` glued to
    the front of the piece that follows them; a character that no piece covers becomes a
    one-character token. Detokenizing is plain concatenation, so the round trip is
    exact.

    >>> MorphemeTokenizer(GERMAN_MORPHEMES).tokenize("siebenundneunzig")
    ['sieben', 'und', 'neun', 'zig']
    >>> MorphemeTokenizer(FRENCH_MORPHEMES, glue=True).tokenize("quatre-vingt mille")
    ['quatre', '-vingt', ' mille']
    """

    separators = (" ", "-", ",")

    def __init__(self, morphemes, glue: bool = False):
        pieces = [m for m in morphemes]
        if not pieces or not all(isinstance(m, str) and m for m in pieces):
            raise ValueError(f"morphemes must be a non-empty list of non-empty strings, got {morphemes!r}")
        if not isinstance(glue, bool):
            raise TypeError(f"glue must be a bool, got {type(glue).__name__}")
        self.morphemes = tuple(sorted(set(pieces), key=lambda m: (-len(m), m)))  # longest first
        self.glue = glue
        self._longest = len(self.morphemes[0])
        self._set = set(self.morphemes)

    def __repr__(self) -> str:
        glue = ", glue=True" if self.glue else ""
        return f"MorphemeTokenizer({len(self.morphemes)} morphemes{glue})"

    def tokenize(self, text: str) -> list[str]:
        _check_text(text)
        tokens, i = [], 0
        prefix = ""  # with glue: separators waiting for the piece after them
        while i < len(text):
            if text[i] in self.separators:
                if self.glue:
                    prefix += text[i]
                else:
                    tokens.append(text[i])
                i += 1
                continue
            # The longest inventory piece that starts here; else one character.
            for size in range(min(self._longest, len(text) - i), 0, -1):
                if text[i:i + size] in self._set:
                    break
            else:
                size = 1
            tokens.append(prefix + text[i:i + size])
            prefix = ""
            i += size
        return tokens + ([prefix] if prefix else [])  # separators at the end: one token

    def detokenize(self, tokens: list[str]) -> str:
        return "".join(tokens)


class CharTokenizer:
    """Characters as target tokens, with the same interface as ``MorphemeTokenizer``."""

    def tokenize(self, text: str) -> list[str]:
        return tokenize_chars(text)

    def detokenize(self, tokens: list[str]) -> str:
        return detokenize_chars(tokens)

    def __repr__(self) -> str:
        return "CharTokenizer()"


SCHEMES = ("glued", "morphemes", "chars", "bpe")


def target_tokenizer(lang: str, scheme: str = "glued", morphemes=None):
    """The target-side tokenizer for ``lang`` ("de" or "fr"): ``scheme="glued"``
    (default: morphemes, each separator glued to the piece after it), ``"morphemes"``
    (separators as tokens of their own), ``"chars"`` or ``"bpe"``. ``morphemes``
    overrides the built-in inventory (e.g. one read from a checkpoint). A BPE
    vocabulary is learned from data, not built in: for ``"bpe"``, ``morphemes`` is the
    learned ``BPETokenizer`` or its ``state()`` (see ``tokenizer_inventory``)."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    if scheme == "chars":
        return CharTokenizer()
    if scheme == "bpe":
        if isinstance(morphemes, BPETokenizer):
            return morphemes
        if morphemes is None:
            raise ValueError("scheme='bpe' needs the learned BPETokenizer or its state(); "
                             "NumberWordsData(scheme='bpe') learns one")
        return BPETokenizer.from_state(morphemes)
    if morphemes is None:
        if lang not in MORPHEMES:
            raise ValueError(f"no morpheme inventory for lang={lang!r}; expected one of {sorted(MORPHEMES)}")
        morphemes = MORPHEMES[lang]
    return MorphemeTokenizer(morphemes, glue=scheme == "glued")


def tokenizer_inventory(tokenizer):
    """What ``target_tokenizer`` needs to rebuild ``tokenizer`` (its ``morphemes``): the
    morpheme list, a BPE tokenizer's ``state()`` string, or None for characters."""
    if isinstance(tokenizer, MorphemeTokenizer):
        return list(tokenizer.morphemes)
    if isinstance(tokenizer, BPETokenizer):
        return tokenizer.state()
    return None
