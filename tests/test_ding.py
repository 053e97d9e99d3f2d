"""ding.py: slash alternatives of unknown extent, and several translations of one sentence.

Every line here is made up, in the Ding dictionary's format (``German | ... :: English | ...``);
the real file is read only by the tests that say so (test_corpora.py)."""
from __future__ import annotations

import pytest

from transformer_lib.data import clean_part, load_ding, parse_line


@pytest.mark.parametrize("part, expected", [
    # single-word alternatives: the first is a sentence
    ("Er/Sie kommt morgen.", ("Er kommt morgen.", True)),
    ("Das ist mein/dein Buch.", ("Das ist mein Buch.", True)),
    ("Er hat/hatte keine Zeit.", ("Er hat keine Zeit.", True)),
    ("Gib das her, das ist meine/r/s.", ("Gib das her, das ist meine.", True)),  # endings
    ("Wir feiern 2009/10 Jubiläum.", ("Wir feiern 2009/10 Jubiläum.", True)),  # a number
    # alternatives of several words: no sentence
    ("Er hat keine Ahnung/keinen Dunst.", ("Er hat keine Ahnung Dunst.", False)),  # function word
    ("Der Verletzte ist/befindet sich außer Gefahr.", ("Der Verletzte ist sich außer Gefahr.", False)),
    ("She earns good money/a good salary.", ("She earns good money good salary.", False)),
    ("The fault is on the side of/lies with the seller.",
     ("The fault is on the side of with the seller.", False)),
    ("Freut mich/Ich freue mich, Sie zu sehen.", ("Freut mich freue mich, Sie zu sehen.", False)),  # case
    ("Es blieb unter null/unter dem Gefrierpunkt.", ("Es blieb unter null dem Gefrierpunkt.", False)),
    ("Ich brauche es noch einmal/irgendwann einmal.", ("Ich brauche es noch einmal einmal.", False)),
    ("The curtain has fallen/come down on/for us.", ("The curtain has fallen down on us.", False)),
])
def test_slash_alternatives_of_unknown_extent_are_no_sentence(part, expected):
    assert clean_part(part) == expected


SLASHES = """\
# Version :: test slashes
Hund {m} | Der Hund schläft im Garten. | Der Hund/Kater schläft im Garten. :: dog | The dog sleeps in the garden. | The dog/tomcat sleeps in the garden.
Kater {m} | Der Kater schläft im Haus. :: tomcat | The tomcat sleeps in the house.
ausstehen {vi} | Eine Antwort steht noch aus. | Die Entscheidung ist noch offen/noch nicht gefallen. :: to be outstanding | An answer is still outstanding. | The decision is still outstanding/currently pending.
schlafen {vi} | Die Katze schläft/ruht auf dem Sofa. :: to sleep | The cat sleeps/rests on the sofa.
"""


def test_load_ding_keeps_alternatives_only_where_the_file_writes_them_elsewhere(tmp_path):
    path = tmp_path / "de-en"
    path.write_text(SLASHES, encoding="utf-8")
    corpus = load_ding(path, phrases=True)
    sentences = set(corpus.train + corpus.valid + corpus.test)
    # "Kater schläft" and "tomcat sleeps" are written elsewhere without a slash: expanded
    assert ("Der Hund schläft im Garten.", "The dog sleeps in the garden.") in sentences
    # "ruht auf", "rests on" are written nowhere else: the extent is not certain, dropped
    assert ("Die Katze schläft auf dem Sofa.", "The cat sleeps on the sofa.") not in sentences
    assert ("Die Katze schläft auf dem Sofa.", "The cat sleeps on the sofa.") in corpus.extra_train
    # several words ("noch nicht gefallen", "currently pending"): never a sentence
    assert not any("offen" in de for de, _ in sentences)
    assert corpus.info["slash_parts_unattested"] == 1  # the cat's
    # parse_line applies the checks a single line allows, not the file's
    assert parse_line(SLASHES.splitlines()[4])[1][2] is True
    assert parse_line(SLASHES.splitlines()[3])[2][2] is False


TRANSLATIONS = """\
# Version :: test translations
Regen {m} | Es regnet schon wieder. :: rain | It is raining again.; It's raining again.
regnen {vi} | Es regnet schon wieder. :: to rain | Here comes the rain again.
Sonne {f} | Die Sonne scheint heute hell. :: sun | The sun is shining brightly today.
"""


def test_several_translations_of_one_sentence_stay_separate_pairs_in_one_split(tmp_path):
    # the module's decision: one reference per pair (the first synonym), each entry its own
    # pair, and all pairs of one source in one split: no extra reference streams
    path = tmp_path / "de-en"
    path.write_text(TRANSLATIONS, encoding="utf-8")
    for fractions in ({"test": 0.5}, {"valid": 0.5}, {"valid": 0.3, "test": 0.3}):
        corpus = load_ding(path, fractions=fractions)
        rain = [(name, pair) for name in ("train", "valid", "test")
                for pair in corpus.split(name) if pair[0] == "Es regnet schon wieder."]
        assert sorted(pair[1] for _, pair in rain) == ["Here comes the rain again.",
                                                       "It is raining again."]
        assert len({name for name, _ in rain}) == 1
