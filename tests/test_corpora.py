"""The real corpora: the Ding parser, the hash split, the TSV and Multi30k loaders, the registry.

The Ding dictionary (Debian's trans-de-en, GPL-2.0-or-later) is read from the system file; the
parser tests use lines written here, in its format, with made-up entries. Tests on the real file
skip where it is not installed (and fail under CI's TT_REQUIRE_ALL=1).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os

import pytest
from conftest import need

from transformer_lib.data import (
    CORPORA,
    DING_PATH,
    Corpus,
    CorpusNotFoundError,
    NumberWordsData,
    clean_part,
    content_hash,
    ding_version,
    find_leaks,
    is_sentence,
    load_corpus,
    load_ding,
    load_multi30k,
    load_tsv,
    normalise_for_split,
    parse_line,
    split_of,
    split_pairs,
    split_position,
)

# ------------------------------------------------------------------------------------------
# The Ding parser, on lines in the file's format (made-up entries)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("part, expected", [
    ("Haus {n}", "Haus"),                                      # grammar in braces
    ("Häuser {pl}", "Häuser"),
    ("etw. verstecken {vt} {versteckte; versteckt}", "etw. verstecken"),  # ';' inside braces
    ("Lift {m} [Br.] [ugs.]", "Lift"),                         # usage labels
    ("Zange {f} (Werkzeug)", "Zange"),                         # explanation
    ("mit den besten (guten) Absichten", "mit den besten Absichten"),
    ("Klammer (in (runden) Klammern) {f}", "Klammer"),         # nested brackets
    ("Tischlerei {f} <Schreinerei>", "Tischlerei"),            # keyword tags
    ("jdn. zurückhalten <> (von etw.)", "jdn. zurückhalten"),
    ("Minute {f} /Min./", "Minute"),                           # abbreviation
    ("Katze {f}; Mieze {f} [ugs.]; Stubentiger {m}", "Katze"),  # synonyms: the first
    ("er/sie sieht", "er sieht"),                              # slash alternatives: the first
    ("er/sie hat/hatte gesehen", "er hat gesehen"),
    ("von jdm./etw.", "von jdm."),
    ("Das ist mein/dein Buch.", "Das ist mein Buch."),
    ("Das gehört ihm/ihr.", "Das gehört ihm."),                # the last alternative's '.'
    ("I like the colour /color very much.", "I like the colour very much."),  # variant
    ("ein Verhältnis von 50/50", "ein Verhältnis von 50/50"),  # numbers are no alternatives
    ("  Es   regnet  heute  .  ", "Es regnet heute."),         # odd spacing
    ("Es geht ihm (finanziell) gut.", "Es geht ihm gut."),
    ("It’s late.", "It's late."),                              # one apostrophe
])
def test_clean_part_removes_every_annotation_kind(part, expected):
    assert clean_part(part)[0] == expected


@pytest.mark.parametrize("part", [
    "Das war schön / toll.",   # a spaced slash: where the alternative ends is unknown
    "Wie kommt es …?",          # an ellipsis: a template, not a sentence
    "'Gut.'/'Na gut.'",         # an alternative after punctuation
    "Das Haus {n",              # a bracket a typo left open
])
def test_parts_that_cannot_be_clean_sentences_are_marked(part):
    text, clean = clean_part(part)
    assert not clean
    assert not set(text) & set("{}[]<>")


def test_parse_line_matches_parts_by_position():
    line = ("Haus {n} [arch.] | Häuser {pl} | Das Haus ist sehr alt. :: "
            "house | houses | The house is very old.\n")
    assert parse_line(line) == [("Haus", "house", True), ("Häuser", "houses", True),
                                ("Das Haus ist sehr alt.", "The house is very old.", True)]


@pytest.mark.parametrize("line", [
    "# Version :: devel 2099-01-01", "# a comment :: with a separator", "", "   \n",
    "a line without the separator",
    "A | B :: only one part",          # part counts differ: cannot be matched
])
def test_parse_line_skips_what_is_no_entry(line):
    assert parse_line(line) == []


def test_an_empty_head_part_keeps_the_positions():
    line = " | rote Beete {f} | weiße Beete {f} ::  | red beet | white beet"
    assert parse_line(line) == [("rote Beete", "red beet", True),
                                ("weiße Beete", "white beet", True)]


@pytest.mark.parametrize("text, expected", [
    ("Das Haus ist alt.", True), ("Ist das Haus alt?", True), ("Komm sofort her!", True),
    ("„Komm sofort her!“", True), ("1984 war ein Jahr.", True),
    ("Pass auf!", False),                                 # 2 words < min_words
    ("das Haus ist alt.", False),                         # lower case: a phrase
    ("Das Haus ist alt", False),                          # no closing mark
    ("Er gibt jdm. etw. zurück.", False),                 # placeholders: a pattern
    ("Eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn.", False),
])
def test_is_sentence(text, expected):
    assert is_sentence(text) is expected


SYNTHETIC_DING = """\
# Version :: test 2099-12-31
# License :: none, written for this test

Haus {n} [arch.] | Häuser {pl} | Das Haus ist sehr alt. :: house | houses | The house is very old.
Katze {f}; Mieze {f} [ugs.] | Die Katze schläft auf dem Sofa. :: cat; pussy [coll.] | The cat is sleeping on the sofa.
etw. sehen {vt} | er/sie sieht | Ich sehe den Hund (im Garten). :: to see sth. | he/she sees | I see the dog.
Wir  kommen morgen   wieder. <Wiederkehr> :: We will come back tomorrow.
Bitte! :: Please!
Er kam und sah und siegte und ging dann sehr froh nach Hause zurück. :: He came, saw, won and went home.
das Haus ist sehr alt :: the house is very old
Das war schön / toll. :: That was nice / great.
A | B :: only one part
"""


@pytest.fixture
def ding_file(tmp_path):
    path = tmp_path / "de-en"
    path.write_text(SYNTHETIC_DING, encoding="utf-8")
    return path


def test_load_ding_sentences_and_phrases(ding_file):
    corpus = load_ding(ding_file, phrases=True)
    sentences = corpus.train + corpus.valid + corpus.test
    assert sorted(sentences) == sorted([
        ("Das Haus ist sehr alt.", "The house is very old."),
        ("Die Katze schläft auf dem Sofa.", "The cat is sleeping on the sofa."),
        ("Ich sehe den Hund.", "I see the dog."),
        ("Wir kommen morgen wieder.", "We will come back tomorrow.")])
    assert ("Bitte!", "Please!") in corpus.extra_train          # too short for a sentence
    assert ("er sieht", "he sees") in corpus.extra_train
    assert ("Das war schön.", "That was nice.") in corpus.extra_train
    assert not set(corpus.extra_train) & set(sentences)
    assert corpus.info["version"] == "test 2099-12-31"
    assert corpus.info["unmatched_lines"] == 1
    assert corpus.info["sentence_pairs"] == 4
    assert (corpus.name, corpus.src_lang, corpus.tgt_lang) == ("ding", "de", "en")
    assert load_ding(ding_file).extra_train == []            # phrases only when asked
    json.dumps(corpus.info)  # plain data: a checkpoint or a results file can keep it
    assert corpus.summary().startswith("ding (test 2099-12-31) de->en: train ")
    assert load_corpus("ding", path=ding_file).train == load_ding(ding_file).train


def test_load_ding_phrases_never_repeat_a_held_out_source(ding_file):
    # Nearly everything in test: the phrase "das Haus ist sehr alt" is, once normalised, the test
    # sentence "Das Haus ist sehr alt.", so it must not be training material.
    corpus = load_ding(ding_file, phrases=True, fractions={"test": 0.999999})
    assert ("Das Haus ist sehr alt.", "The house is very old.") in corpus.test
    assert ("das Haus ist sehr alt", "the house is very old") not in corpus.extra_train
    held_out = {normalise_for_split(s) for s, _ in corpus.valid + corpus.test}
    assert not {normalise_for_split(s) for s, _ in corpus.extra_train} & held_out


def test_load_ding_direction_and_options(ding_file):
    de_en, en_de = load_ding(ding_file), load_ding(ding_file, direction="en-de")
    assert (en_de.src_lang, en_de.tgt_lang) == ("en", "de")
    assert sorted((t, s) for s, t in en_de.train + en_de.valid + en_de.test) == \
        sorted(de_en.train + de_en.valid + de_en.test)
    with pytest.raises(ValueError, match="direction"):
        load_ding(ding_file, direction="de-fr")
    with pytest.raises(ValueError, match="max_words"):
        load_ding(ding_file, min_words=5, max_words=4)
    assert load_ding(ding_file, max_words=4).info["sentence_pairs"] == 1  # "Ich sehe den Hund."


def test_load_ding_missing_file_says_how_to_install(tmp_path):
    with pytest.raises(CorpusNotFoundError, match="apt-get install trans-de-en") as error:
        load_ding(tmp_path / "nowhere")
    assert isinstance(error.value, FileNotFoundError)
    assert "!apt-get install -y trans-de-en" in str(error.value)  # the Colab cell


def test_load_ding_empty_file(tmp_path):
    path = tmp_path / "de-en"
    path.write_text("# Version :: empty\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no dictionary entries"):
        load_ding(path)
    assert ding_version(path) == "empty"


def test_load_ding_reparses_a_changed_file(ding_file):
    first = load_ding(ding_file).info["sentence_pairs"]
    ding_file.write_text(SYNTHETIC_DING + "Wir essen heute Fisch. :: We eat fish today.\n",
                         encoding="utf-8")
    os.utime(ding_file, ns=(1, 10**18))  # a new modification time for the parse cache
    assert load_ding(ding_file).info["sentence_pairs"] == first + 1


# ------------------------------------------------------------------------------------------
# The hash split
# ------------------------------------------------------------------------------------------


def test_normalise_for_split():
    assert normalise_for_split("  Wie GEHT'S, Straßen-Bahn?  ") == "wie gehts strassen bahn"
    assert normalise_for_split("ﬁne") == "fine"  # NFKC
    with pytest.raises(TypeError):
        normalise_for_split(3)


def test_split_is_stable_across_processes():
    # Pinned: a SHA-256, not Python's per-process hash(), so these never change.
    assert split_position("Das Haus ist alt.") == pytest.approx(0.0307578, abs=1e-7)
    assert [split_of(f"Satz {i}.") for i in (4, 5, 20)] == ["train", "test", "valid"]


def test_near_duplicates_share_a_split():
    variants = ["Wie geht's?", "wie gehts", "WIE GEHT'S!", "  Wie  geht’s  ? "]
    for fractions in ({"valid": 0.3, "test": 0.3}, {"test": 0.5}, {"valid": 0.9}):
        assert len({split_of(v, fractions) for v in variants}) == 1


def _word(i: int) -> str:
    """A made-up word per number, unlike every other one ("Satz 7." and "Satz 17." would be
    near-duplicates, 0.9 alike, and share a split)."""
    return hashlib.sha256(str(i).encode()).hexdigest()[:10]


def test_split_pairs_keeps_one_source_together_and_drops_repeats():
    pairs = [(f"Satz {_word(i)}.", f"Sentence {_word(i)}.") for i in range(300)]
    pairs += [(f"satz {_word(7)}", "another translation"), pairs[0]]
    splits = split_pairs(pairs, {"valid": 0.2, "test": 0.2})
    assert sum(len(v) for v in splits.values()) == 301  # the repeat of pairs[0] is dropped
    home = [name for name, v in splits.items() if pairs[7] in v]
    assert (f"satz {_word(7)}", "another translation") in splits[home[0]]
    assert all(40 <= len(splits[name]) <= 80 for name in ("valid", "test"))  # about 60 each


@pytest.mark.parametrize("fractions, error", [
    ({"train": 0.5}, ValueError), ({"test": 1.2}, ValueError), ({"valid": 0.5, "test": 0.5}, ValueError),
    ([0.1, 0.1], TypeError), ({"test": "0.1"}, TypeError)])
def test_split_fractions_are_checked(fractions, error):
    with pytest.raises(error):
        split_of("Hallo.", fractions)


# ------------------------------------------------------------------------------------------
# The real Ding file
# ------------------------------------------------------------------------------------------

PINNED_VERSION = "devel 2023-01-30"  # Debian 12 / Ubuntu 24.04's trans-de-en
PINNED = {"train": 13782, "valid": 919, "test": 917, "test_hash": "53133e94820c15d0",
          "sorted_test_hash": "74ba5216ee9e9911"}


@pytest.fixture(scope="module")
def ding():
    need(os.path.isfile(DING_PATH), f"the Ding dictionary is not installed at {DING_PATH} "
                                    "(apt-get install trans-de-en)")
    return load_ding(phrases=True)


def test_real_ding_sizes(ding):
    # Any version: about 17,000 sentence pairs, about 1,000 each for validation and test, and
    # several hundred thousand word and phrase pairs.
    assert 14_000 <= ding.info["sentence_pairs"] <= 20_000
    assert 700 <= len(ding.valid) <= 1_300 and 700 <= len(ding.test) <= 1_300
    assert 300_000 <= len(ding.extra_train) <= 450_000
    assert ding.info["unmatched_lines"] < 100


def test_real_ding_test_split_is_pinned(ding):
    if ding.info["version"] != PINNED_VERSION:
        pytest.skip(f"the exact sizes are pinned for the Ding version {PINNED_VERSION!r}; "
                    f"this machine has {ding.info['version']!r} (the margins above still hold)")
    sizes = {name: len(ding.split(name)) for name in ("train", "valid", "test")}
    assert sizes == {k: PINNED[k] for k in ("train", "valid", "test")}
    assert content_hash(ding.test) == PINNED["test_hash"]
    assert content_hash(sorted(ding.test)) == PINNED["sorted_test_hash"]  # whatever the order


def test_real_ding_has_no_leakage(ding):
    keys = {name: {normalise_for_split(s) for s, _ in ding.split(name)}
            for name in ("train", "valid", "test")}
    assert not keys["train"] & keys["valid"]
    assert not keys["train"] & keys["test"]
    assert not keys["valid"] & keys["test"]
    extra = {normalise_for_split(s) for s, _ in ding.extra_train}
    assert not extra & (keys["valid"] | keys["test"])
    # and by the check that does not use the split's groups: no held-out source is 0.9 alike
    # to, inside, or holding a training source (the old split by source alone had 18 in test)
    assert find_leaks(ding.train, ding.test) == []
    assert find_leaks(ding.train, ding.valid) == []
    assert find_leaks(ding.valid, ding.test) == []


def test_real_ding_sentences_are_clean(ding):
    for source, target in ding.train + ding.valid + ding.test:
        for text in (source, target):
            assert not set(text) & set("{}[]<>|;…"), text
            assert text == " ".join(text.split()) and is_sentence(text), text


# ------------------------------------------------------------------------------------------
# TSV files
# ------------------------------------------------------------------------------------------

TSV = ("Go.\tGeh.\tCC-BY 2.0 (France) Attribution: example #1\n"
       "I won!\tIch habe gewonnen!\tCC-BY 2.0 (France) Attribution: example #2\n"
       "\n"
       "Thanks.\t\tno German here\n"
       "Go.\tGeh.\tCC-BY 2.0 (France) Attribution: example #1\n")


def test_load_tsv_columns(tmp_path):
    path = tmp_path / "deu.txt"
    path.write_text(TSV, encoding="utf-8")
    corpus = load_tsv(path)
    assert sorted(corpus.train + corpus.valid + corpus.test) == [
        ("Go.", "Geh."), ("I won!", "Ich habe gewonnen!")]  # repeat and empty target dropped
    assert corpus.info["skipped_lines"] == 1 and corpus.name == "deu"
    flipped = load_tsv(path, src_col=1, tgt_col=0, src_lang="de", tgt_lang="en")
    assert ("Geh.", "Go.") in flipped.train + flipped.valid + flipped.test
    assert (flipped.src_lang, flipped.tgt_lang) == ("de", "en")
    attribution = load_tsv(path, src_col=0, tgt_col=2)
    assert attribution.info["lines_with_pairs"] == 4
    assert load_corpus("tsv", path=str(path), name="anki").name == "anki"
    json.dumps(corpus.info)


def test_load_tsv_errors(tmp_path):
    with pytest.raises(CorpusNotFoundError, match="no TSV file"):
        load_tsv(tmp_path / "missing.txt")
    path = tmp_path / "pairs.tsv"
    path.write_text("one\ttwo\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 1 has 2 tab-separated column\(s\), but "
                                         r"src_col=0 and tgt_col=3 need 4"):
        load_tsv(path, tgt_col=3)
    with pytest.raises(ValueError, match="must differ"):
        load_tsv(path, src_col=1, tgt_col=1)
    with pytest.raises(ValueError, match="src_col must be >= 0"):
        load_tsv(path, src_col=-1)
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="holds no pairs"):
        load_tsv(path)


# ------------------------------------------------------------------------------------------
# Multi30k
# ------------------------------------------------------------------------------------------


def _write_multi30k(folder, gz: bool, test_stem: str = "test_2016_flickr"):
    lines = {"train": 5, "val": 2, test_stem: 3}
    for stem, count in lines.items():
        for lang, word in (("de", "Ein Hund läuft"), ("en", "A dog runs")):
            text = "".join(f"{word} {i}.\n" for i in range(count))
            if gz:
                with gzip.open(folder / f"{stem}.{lang}.gz", "wt", encoding="utf-8") as f:
                    f.write(text)
            else:
                (folder / f"{stem}.{lang}").write_text(text, encoding="utf-8")


@pytest.mark.parametrize("gz, test_stem", [(False, "test_2016_flickr"), (True, "test_2016_flickr"),
                                          (False, "test2016")])
def test_load_multi30k(tmp_path, gz, test_stem):
    _write_multi30k(tmp_path, gz, test_stem)
    corpus = load_multi30k(tmp_path)
    assert [len(corpus.split(n)) for n in ("train", "valid", "test")] == [5, 2, 3]
    assert corpus.test[2] == ("Ein Hund läuft 2.", "A dog runs 2.")
    reverse = load_corpus("multi30k", folder=tmp_path, src_lang="en", tgt_lang="de")
    assert reverse.train[0] == ("A dog runs 0.", "Ein Hund läuft 0.")
    json.dumps(corpus.info)


def test_load_multi30k_names_missing_files(tmp_path):
    _write_multi30k(tmp_path, gz=False)
    os.remove(tmp_path / "val.en")
    os.remove(tmp_path / "test_2016_flickr.de")
    with pytest.raises(CorpusNotFoundError) as error:
        load_multi30k(path=tmp_path)  # path= is another name for the folder
    message = str(error.value)
    assert "val.en(.gz)" in message and "test_2016_flickr.de(.gz)" in message
    assert "train" not in message.split("missing")[1].split(".")[0]
    assert "github.com/multi30k/dataset" in message


def test_load_multi30k_missing_folder(tmp_path):
    with pytest.raises(CorpusNotFoundError, match="no Multi30k folder at .*github.com/multi30k"):
        load_multi30k(tmp_path / "nowhere")
    with pytest.raises(TypeError, match="once"):
        load_multi30k(tmp_path, path=tmp_path)


def test_load_multi30k_checks_line_counts(tmp_path):
    _write_multi30k(tmp_path, gz=False)
    (tmp_path / "val.de").write_text("Nur eine Zeile.\n", encoding="utf-8")
    with pytest.raises(ValueError, match="valid: .* has 1 lines but .* has 2"):
        load_multi30k(tmp_path)


# ------------------------------------------------------------------------------------------
# The registry and the number words
# ------------------------------------------------------------------------------------------


def test_registry_names():
    assert set(CORPORA) == {"ding", "tsv", "multi30k", "number-words"}
    with pytest.raises(ValueError, match="unknown corpus 'wmt'"):
        load_corpus("wmt")
    with pytest.raises(ValueError, match="corpus 'ding' has no option pth; its options are path"):
        load_corpus("ding", pth="/usr/share/trans/de-en")
    with pytest.raises(ValueError, match="corpus 'tsv' needs path="):
        load_corpus("tsv", src_col=1)
    with pytest.raises(ValueError, match="corpus 'multi30k' needs folder="):
        load_corpus("multi30k")


def test_number_words_corpus_is_the_capstone_data():
    pytest.importorskip("num2words")
    corpus = load_corpus("number-words", lang="de", train_size=300, n_test=40, n_valid=20)
    data = NumberWordsData("de", train_size=300, n_test=40, n_valid=20)
    assert isinstance(corpus.dataset, NumberWordsData)
    for name in ("train", "valid", "test"):
        assert corpus.split(name) == [data.pair(int(n)) for n in data.numbers[name]]
    assert (corpus.src_lang, corpus.tgt_lang) == ("en", "de")
    assert corpus.summary() == "number-words en->de: train 300, valid 20, test 40 pairs"


def test_corpus_split_and_texts():
    corpus = Corpus("toy", "de", "en", [("a", "b")], [("c", "d")], [("e", "f")])
    assert corpus.split("valid") == [("c", "d")] and corpus.extra_train == []
    assert corpus.texts("train") == ["a", "b"] and corpus.texts("test", "tgt") == ["f"]
    with pytest.raises(ValueError, match="split must be one of"):
        corpus.split("dev")
    with pytest.raises(ValueError, match="side"):
        corpus.texts("train", "left")
