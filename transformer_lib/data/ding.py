"""The Ding German-English dictionary as a parallel corpus: its full sentences, and its phrases.

Debian's and Ubuntu's package ``trans-de-en`` installs the dictionary of TU Chemnitz (Frank
Richter, GPL-2.0-or-later) as one text file, ``/usr/share/trans/de-en``. We read it at run time
and never store any of it. Each line is one entry::

    German | German | ... :: English | English | ...

The parts between `` | `` correspond position by position on the two sides: a headword, its
forms, phrases with it, and example sentences, e.g. (an abridged real line)::

    Absicht {f} | ... | Das war nicht meine Absicht. :: intention | ... | Such was not my intention.

Within a part, ``;`` separates synonyms, and the rest is annotation: ``{f}``, ``{pl}``, ``{vt}``
(grammar), ``[Br.]``, ``[ugs.]`` (usage), ``(...)`` (explanations or optional words), ``<...>``
(search keywords), `` /Abk./`` (abbreviations); ``word/word`` writes alternatives.

How a part becomes one clean pair (``clean_part``):

1. annotations are removed (innermost brackets first, so ``(in (terms of) a unit)`` goes whole);
2. of the synonyms, the *first* is kept on each side (one pair per part: later synonyms are
   often variants of the first, and taking all combinations would weigh a part by how many
   synonyms it has);
3. ``a/b`` becomes ``a`` (``er/sie hat/hatte`` -> ``er hat``; a final ``.``, ``?`` or ``!`` of
   the last alternative is kept; ``50/50`` stays); a variant after a space goes (``colour /color``
   -> ``colour``), and so does a spaced `` / `` with the word after it. Where an alternative
   has a space beside its slash, or follows punctuation, its extent is unknown: such a part is
   marked as no sentence;

   The file writes alternatives of several words the same way (``keine Ahnung/keinen Dunst``,
   ``is still outstanding/currently pending``): taking the first *word* would break the
   sentence (``keine Ahnung Dunst``). Nothing in the text says where such an alternative ends,
   so a part with slash alternatives stays a sentence only where each alternative reads as
   one word (``_slash_extent``): all of a group's alternatives are function words, or none is
   (``ist/befindet sich`` fails); they agree in capitalisation; none repeats its neighbour
   (``unter null/unter dem``); two groups are not one word apart (``fallen/come down on/for``);
   and every alternative forms, with the word before and the word after it, a word pair
   (bigram) that the dictionary writes elsewhere without a slash. The last check needs the
   whole file, so ``load_ding`` makes it, not ``parse_line``. In "devel 2023-01-30" 1,280
   sentence pairs have slash alternatives; 149 pass and are expanded to their first
   alternatives, 1,131 are dropped (they remain phrase material with ``phrases=True``);
4. Unicode NFC, the typographic apostrophe ``’`` made ``'`` (the file uses both), single spaces,
   no space before ``, . ! ?``.

A part is a **sentence pair** (``is_sentence``) when both sides start with a capital letter, a
digit or an opening quote, end with ``.``, ``?`` or ``!``, have ``min_words`` to ``max_words``
words, and hold no placeholder (``etw.``, ``jdn.``, ``sth.``, ``sb.``), no ``…`` and no slash of
unknown extent: 15,618 pairs of 3 to 12 words in the version "devel 2023-01-30". Everything else
(about 370,000 words, phrases and sentences of other lengths) can be extra training material
(``phrases=True``), never validation or test.

One reference per pair. Where the dictionary translates one sentence several ways (a later
synonym after ``;``, or the same sentence in several entries), the later synonyms are dropped
(step 2) and the entries stay separate pairs; the split puts all pairs of one source in one
split (``splits.group_pairs``), so a test source with two translations is scored once against
each. They are not made extra reference streams for sacreBLEU: only a few sentences have one
(7 of the 917 test sources), and a second reference for a few sentences would make scores
incomparable with every single-reference score the book reports.
"""
from __future__ import annotations

import functools
import os
import re
import time
import unicodedata

from .._checks import check_bool, check_int
from .corpus import Corpus, CorpusNotFoundError
from .splits import DEFAULT_FRACTIONS, normalise_for_split, split_pairs

DING_PATH = "/usr/share/trans/de-en"
INSTALL_HINT = ("install it with `sudo apt-get install trans-de-en` (Debian/Ubuntu; in Colab "
                "run `!apt-get install -y trans-de-en` in a cell)")

# While a text is cleaned, the separators " | " and " :: " are held as single characters
# (_PART, _SIDE) that no pattern below can match, so no annotation or alternative that a typo
# left open can swallow the next part.
_PART, _SIDE = "\x01", "\x02"
_INSIDE = r"[^{}\[\]<>()\n\x01\x02]*"
_ANNOTATION = re.compile(rf"\{{{_INSIDE}\}}|\[{_INSIDE}\]|<{_INSIDE}>|\({_INSIDE}\)")
# An abbreviation between slashes after a space: "Minute {f} /Min./" (but not "Dyn/cm2").
_ABBREVIATION = re.compile(r" /(?![\s/])[^/\n\x01\x02]*?[^\s/]/(?!\S)")
# A spaced slash and the word after it: "festgehalten / verewigt" -> "festgehalten".
_SPACED_SLASH = re.compile(r" / +[^\s/]*?(?=[.,!?]*(?: |$))")
# Slash alternatives inside a word: "er/sie", "sb./sth.", "meine/r/s."
_ALTERNATIVES = re.compile(r"(?<!\S)([^\s/]+)((?:/[^\s/]+)+)")
_STRAY_BRACKET = re.compile(r"[{}\[\]<>]")
# A variant after a space: "privatisation /privatization." -> "privatisation."
_VARIANT = re.compile(r" /[^\s/]*?(?=[.,!?]*(?: |$))")
# What keeps a part from being a sentence: a stray bracket, an ellipsis, a slash with a space
# beside it (alternatives of unknown extent), or after punctuation ("'Beats me.'/'It's ...'").
_NOT_CLEAN = re.compile(r"[{}\[\]<>()…]|\.\.\.| /|/ |[.?!'\"“”„]/")
_PLACEHOLDERS = re.compile(r"(?<!\w)(etw|jdn|jdm|jds|jd|sth|sb)\.", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.?!][\"'“”»«‘’]?$")
_SENTENCE_ENDS = tuple(".?!\"'“”»«‘’")
_OPENING_QUOTES = "\"'„“‚‘»«"
# Patterns that start with a literal character: Python's re then skips quickly to candidates,
# which keeps the passes over the whole file fast.


# Closed-class words of the two languages: a slash group whose alternatives mix these with other
# words ("ist/befindet sich", "money/a good salary") is an alternative of several words.
_FUNCTION_WORDS = frozenset("""
a an the this that these those my your his her its our their some any no every each all both
either neither is are was were be been being am has have had do does did will would shall should
can could may might must not to of in on at by for with without from into onto about over under
after before since until than as and or but nor if when where while why how what which who whom
whose there here it i you he she we they me him us them one up out off down away back
der die das den dem des ein eine einen einem einer eines kein keine keinen keinem keiner keines
mein meine meinen meinem meiner meines dein deine deinen deinem deiner deines sein seine seinen
seinem seiner seines ihr ihre ihren ihrem ihrer ihres unser unsere unseren unserem unserer euer
eure ist sind war waren bin bist seid hat habe hast haben hatte hatten wird werden wurde wurden
kann können konnte konnten muss müssen musste soll sollen sollte will wollen wollte darf dürfen
mag möchte nicht nie auch noch schon nur im an am auf aus bei mit nach von vom zu zum zur für
gegen ohne um durch über unter vor hinter neben zwischen und oder aber denn dass wenn ob als wie
was wer wo warum ich du er sie es wir mich dich sich uns euch mir dir ihm ihnen man da dann so
darauf daran dazu davon dafür damit darüber
""".split())
# What a word is compared by: lower case, without the punctuation around or inside it.
_WORD_KEY = str.maketrans("", "", ".,;:!?\"'„“”‚‘»«")
_WORD_PUNCTUATION = re.compile("[.,;:!?\"'„“”‚‘»«]+")  # the same, faster on a whole file


def _word_key(word: str) -> str:
    return word.lower().translate(_WORD_KEY)


def _is_ending(alternative: str) -> bool:
    """``r`` and ``s`` in ``meine/r/s``, ``in`` in ``Lehrer/in``: an ending, not a word."""
    return len(alternative) <= 2 and alternative.islower() and \
        (alternative not in _FUNCTION_WORDS or alternative == "in")


def _slash_extent(text: str) -> tuple[bool, frozenset]:
    """Slash alternatives of a first synonym -> (whether each alternative reads as one word by
    the local checks of the module's docstring, the word pairs each alternative forms with its
    neighbours: the file must write every one of them elsewhere)."""
    words = text.split()
    groups = [i for i, word in enumerate(words) if _ALTERNATIVES.fullmatch(word)
              and not word.replace("/", "").replace(".", "").replace(",", "").isdigit()]
    if any(b - a == 2 for a, b in zip(groups, groups[1:])):  # "fallen/come down on/for"
        return False, frozenset()
    keys = [[_word_key(w) for w in word.split("/")] for word in words]
    pairs = set()
    for i in groups:
        alternatives = keys[i][:1] + [a for a in keys[i][1:] if not _is_ending(a)]
        if not all(alternatives):
            return False, frozenset()
        if len({a in _FUNCTION_WORDS for a in alternatives}) > 1:
            return False, frozenset()
        shown = [a.strip(".,;:!?\"'„“”‚‘»«") for a in words[i].split("/")]
        shown = shown[:1] + [a for a in shown[1:] if not _is_ending(a)]
        if i > 0 and len({a[:1].isupper() for a in shown}) > 1:
            return False, frozenset()
        before = keys[i - 1] if i > 0 else []
        after = keys[i + 1] if i + 1 < len(words) else []
        if set(alternatives[1:]) & set(before) or alternatives[0] in after:
            return False, frozenset()  # "unter null/unter dem", "einmal/irgendwann einmal"
        pairs.update((b, a) for b in before for a in alternatives)
        pairs.update((a, c) for a in alternatives for c in after)
    return True, frozenset(pairs)


def _first_alternative(match: re.Match) -> str:
    first, last = match.group(1), match.group(2).rsplit("/", 1)[1]
    if first.replace(".", "").isdigit():  # 50/50, 1/2: numbers, not alternatives
        return match.group(0)
    end = re.search(r"[.,!?]+$", last)
    if end and not first.endswith(end.group(0)):
        first += end.group(0)
    return first


def _clean_text(text: str) -> str:
    """Step 1 of the module's docstring (and the apostrophe of step 4) on any number of whole
    lines at once: the whole file is cleaned in a few passes of compiled regular expressions.
    Spaces are made single, and a space before , . ! ? is dropped."""
    text = unicodedata.normalize("NFC", text).replace("’", "'").replace("\t", " ")
    text = text.replace(" | ", f" {_PART} ").replace(" :: ", f" {_SIDE} ")
    text = _ABBREVIATION.sub(" ", text)
    while True:
        stripped = _ANNOTATION.sub(" ", text)
        if stripped == text:
            break
        text = stripped
    text = re.sub("  +", " ", text)
    return re.sub(" (?=[,.!?])", "", text)


_NO_PAIRS: frozenset = frozenset()


def _first_synonym(part: str) -> tuple[str, bool, frozenset]:
    """A cleaned part -> (its first synonym with slash alternatives resolved (steps 2 and 3),
    whether it is clean enough to be a sentence, the word pairs its alternatives need attested
    in the file (``_slash_extent``))."""
    text = part.split(";", 1)[0].strip()
    clean = not _NOT_CLEAN.search(text)
    pairs = _NO_PAIRS
    if "/" in text:
        text = _VARIANT.sub("", _SPACED_SLASH.sub("", text))
        if clean and text.endswith(_SENTENCE_ENDS):  # only what may be a sentence
            clean, pairs = _slash_extent(text)
        text = _ALTERNATIVES.sub(_first_alternative, text)
    if not clean:
        text = " ".join(_STRAY_BRACKET.sub(" ", text).split())
    return text.strip(" /"), clean, pairs


def _parts(line: str) -> list[tuple[str, str, bool, frozenset]]:
    """A cleaned line -> (German, English, clean, word pairs to attest) per part; [] if it is
    no entry."""
    german, separator, english = line.partition(_SIDE)
    if not separator or line.startswith("#"):
        return []
    german_parts, english_parts = german.split(_PART), english.split(_PART)
    if len(german_parts) != len(english_parts):
        return []
    out = []
    for de_part, en_part in zip(german_parts, english_parts):
        (de, de_clean, de_pairs), (en, en_clean, en_pairs) = \
            _first_synonym(de_part), _first_synonym(en_part)
        if de and en:
            clean = de_clean and en_clean
            out.append((de, en, clean, de_pairs | en_pairs if clean else _NO_PAIRS))
    return out


def _attested(text: str, wanted: set) -> set:
    """The word pairs of ``wanted`` that occur, as two plain neighbouring words, somewhere in
    the cleaned ``text`` (a word with a slash in it attests nothing). One pass over the words."""
    words = _WORD_PUNCTUATION.sub("", text.lower()).replace("\n", " \n ").split(" ")
    firsts = {first for first, _ in wanted}
    return {pair for pair in zip(words, words[1:]) if pair[0] in firsts and pair in wanted}


def clean_part(part: str) -> tuple[str, bool]:
    """One side of one ``|``-part -> (its first synonym as clean text, whether it is clean enough
    to be a sentence: no spaced slash, no stray bracket, no ellipsis).

    >>> clean_part("er/sie hat/hatte verheimlicht {vt} [geh.]; verhehlt")
    ('er hat verheimlicht', True)
    """
    if not isinstance(part, str):
        raise TypeError(f"part must be a str, got {type(part).__name__}")
    return _first_synonym(_clean_text(part.replace("\n", " ")))[:2]


def is_sentence(text: str, min_words: int = 3, max_words: int = 12) -> bool:
    """Whether a clean text reads as a full sentence of ``min_words`` to ``max_words`` words
    (see the module's docstring)."""
    if not text.endswith(_SENTENCE_ENDS):
        return False
    if not min_words <= len(text.split()) <= max_words:
        return False
    start = text.lstrip(_OPENING_QUOTES)[:1]
    if not (start.isupper() or start.isdigit()):
        return False
    return bool(_SENTENCE_END.search(text)) and not _PLACEHOLDERS.search(text)


def parse_line(line: str) -> list[tuple[str, str, bool]]:
    """One line of the file -> a (German, English, clean) triple per ``|``-part; [] for comments,
    blank lines and lines without `` :: ``. ``clean`` is False when either side is not clean
    enough to be a sentence (``clean_part``). Parts whose counts differ on the two sides cannot be
    matched, so such a line gives []."""
    if not isinstance(line, str):
        raise TypeError(f"line must be a str, got {type(line).__name__}")
    line = line.rstrip("\r\n")
    if not line.strip() or line.startswith("#"):
        return []
    return [part[:3] for part in _parts(_clean_text(line.replace("\n", " ")))]


@functools.lru_cache(maxsize=2)
def _parse_file(path: str, mtime_ns: int, size: int) -> tuple[str, tuple, dict]:
    """(version, all parts as (de, en, clean) triples, counts): parsed once per file version
    (the cache key holds the file's modification time and size). The whole text is cleaned at
    once, then cut into lines and parts: the same steps as ``parse_line``, 10x faster."""
    start = time.perf_counter()
    with open(path, encoding="utf-8") as f:
        raw = f.read()
    version = ""
    for line in raw.splitlines()[:20]:
        if line.startswith("# Version :: "):
            version = line.split("::", 1)[1].strip()
    lines = _clean_text(raw).split("\n")
    counts = {"lines": len(lines), "entries": 0, "unmatched_lines": 0}
    parts = []
    for line in lines:
        if _SIDE not in line or line.startswith("#"):
            continue
        counts["entries"] += 1
        triples = _parts(line)
        if not triples:
            german, _, english = line.partition(_SIDE)
            counts["unmatched_lines"] += german.count(_PART) != english.count(_PART)
        parts.extend(triples)
    wanted = set().union(*(pairs for *_, pairs in parts))
    attested = _attested("\n".join(lines), wanted) if wanted else set()
    readable = [pairs <= attested for *_, pairs in parts]
    counts["slash_parts_unattested"] = readable.count(False)
    parts = [(de, en, clean and ok) for (de, en, clean, _), ok in zip(parts, readable)]
    counts["parts"] = len(parts)
    counts["parse_seconds"] = round(time.perf_counter() - start, 2)
    return version, tuple(parts), counts


def ding_version(path: str = DING_PATH) -> str:
    """The version string of the file (its first line "# Version :: devel 2023-01-30")."""
    with open(_check_path(path), encoding="utf-8") as f:
        for line in f:
            if line.startswith("# Version :: "):
                return line.split("::", 1)[1].strip()
            if not line.startswith("#"):
                break
    return ""


def _check_path(path) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or a path, got {type(path).__name__}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CorpusNotFoundError(f"the Ding dictionary is not at {path}: {INSTALL_HINT}")
    return path


def load_ding(path=DING_PATH, direction: str = "de-en", phrases: bool = False,
              min_words: int = 3, max_words: int = 12, fractions: dict | None = None) -> Corpus:
    """The Ding dictionary's sentence pairs, split with their near-duplicates (``split_pairs``).

    ``direction`` is "de-en" or "en-de". ``phrases=True`` adds every other part (words,
    phrases, sentences outside the length range) as ``extra_train``, except those whose source
    is, once normalised, a validation or test source. Exact repeats of a pair are dropped.
    """
    if direction not in ("de-en", "en-de"):
        raise ValueError(f"direction must be 'de-en' or 'en-de', got {direction!r}")
    check_bool("phrases", phrases)
    check_int("min_words", min_words, minimum=1)
    check_int("max_words", max_words, minimum=min_words)
    path = _check_path(path)
    stat = os.stat(path)
    version, parts, counts = _parse_file(path, stat.st_mtime_ns, stat.st_size)
    if not parts:
        raise ValueError(f"{path} holds no dictionary entries ('German :: English' lines)")
    flip = direction == "en-de"
    sentences, others = [], []
    for de, en, clean in parts:
        pair = (en, de) if flip else (de, en)
        if clean and is_sentence(de, min_words, max_words) and \
                is_sentence(en, min_words, max_words):
            sentences.append(pair)
        else:
            others.append(pair)
    splits = split_pairs(sentences, fractions)
    extra = []
    if phrases:
        held_out = {normalise_for_split(s) for name in ("valid", "test") for s, _ in splits[name]}
        seen = set(splits["train"])
        for pair in others:
            if pair not in seen and normalise_for_split(pair[0]) not in held_out:
                seen.add(pair)
                extra.append(pair)
    src, tgt = direction.split("-")
    info = {"source": path, "version": version, "direction": direction, "phrases": phrases,
            "min_words": min_words, "max_words": max_words,
            "fractions": dict(fractions or DEFAULT_FRACTIONS),
            "sentence_pairs": sum(len(v) for v in splits.values()),
            "licence": "GPL-2.0-or-later, (c) Frank Richter, TU Chemnitz", **counts}
    return Corpus("ding", src, tgt, splits["train"], splits["valid"], splits["test"],
                  extra_train=extra, info=info)


__all__ = ["DING_PATH", "clean_part", "ding_version", "is_sentence", "load_ding", "parse_line"]
