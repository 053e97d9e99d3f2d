"""splits.py: near-duplicates are grouped into one split, and find_leaks finds them without
the groups. Synthetic corpora only (the real Ding split is checked in test_corpora.py)."""
from __future__ import annotations

import hashlib
import random
import time

import pytest

from transformer_lib.data.splits import (
    find_leaks,
    group_pairs,
    normalise_for_split,
    similarity,
    split_of,
    split_pairs,
)


def _word(i: int, salt: str = "") -> str:
    return hashlib.sha256(f"{salt}{i}".encode()).hexdigest()[:8]


def _filler(n: int) -> list[tuple[str, str]]:
    """n pairs unlike each other and unlike the planted ones."""
    return [(f"Das {_word(i)} liegt {_word(i, 'b')}.", f"The {_word(i, 'c')} lies {_word(i, 'd')}.")
            for i in range(n)]


# Each group: pairs that must end up in one split, and why.
PLANTED = {
    "containment": [("Woher kommst du?", "Where are you from?"),
                    ("Woher kommst du? Woher bist du?", "Where do you come from?")],
    "containment at the end": [("Das hört sich gut an.", "That sounds good."),
                               ("Hört sich gut an.", "Sounds good to me.")],
    "one edit": [("Mir ist schwindelig.", "I feel dizzy."),
                 ("Mir ist schwindlig.", "I am feeling dizzy.")],
    "two endings": [("Er reißt sich kein Bein aus.", "He doesn't overexert himself."),
                    ("Er reisst sich keine Beine aus.", "He won't break a leg.")],
    "same target": [("Sie ist klug.", "She is clever."),
                    ("Die Frau ist gescheit.", "She is clever!")],
    "a chain": [("Ich weiß es nicht.", "I don't know."),
                ("Keine Ahnung hab ich.", "I don't know!"),
                ("Keine Ahnung hab ich, wirklich nicht.", "No idea, really.")],
    "same source": [("Das ist mein Haus.", "This is my house."),
                    ("das ist mein Haus", "That is my home.")],
}


def test_planted_near_duplicates_land_in_one_split():
    pairs = _filler(400)
    for group in PLANTED.values():
        pairs += group
    random.Random(0).shuffle(pairs)
    for fractions in ({"valid": 0.3, "test": 0.3}, {"test": 0.5}, {"valid": 0.45, "test": 0.45}):
        splits = split_pairs(pairs, fractions)
        home = {pair: name for name, members in splits.items() for pair in members}
        for why, group in PLANTED.items():
            assert len({home[pair] for pair in group}) == 1, (why, fractions)
        # the independent check agrees: nothing held out has a near-duplicate in training
        for held in ("valid", "test"):
            assert find_leaks(splits["train"], splits[held]) == []
        assert all(splits[name] for name in ("train", "test"))  # the filler spreads


def test_the_split_does_not_depend_on_the_order():
    pairs = _filler(200) + [pair for group in PLANTED.values() for pair in group]
    shuffled = pairs[:]
    random.Random(1).shuffle(shuffled)
    a, b = split_pairs(pairs), split_pairs(shuffled)
    assert {k: sorted(v) for k, v in a.items()} == {k: sorted(v) for k, v in b.items()}


def test_a_group_goes_where_its_smallest_source_goes():
    group = PLANTED["a chain"]
    fractions = {"valid": 0.3, "test": 0.3}
    smallest = min(normalise_for_split(s) for s, _ in group)
    splits = split_pairs(group, fractions)
    assert sorted(splits[split_of(smallest, fractions)]) == sorted(group)


def test_unlike_pairs_stay_apart():
    pairs = _filler(50) + [("Ich habe Hunger.", "I am hungry."), ("Ich habe Durst.", "I am thirsty."),
                           ("Das ist gut.", "That is good."), ("Das ist", "That is")]
    roots = group_pairs(pairs)
    assert len(set(roots)) == len(pairs)  # "das ist" has two words: too short to contain


def test_find_leaks_reports_each_kind():
    train = [("Woher kommst du?", "x"), ("Mir ist schwindelig.", "y"),
             ("Ich glaube, das ist ein guter Plan.", "z"), ("Ganz anders hier.", "w")]
    held = [("Woher kommst du? Woher bist du?", "a"), ("Mir ist schwindlig.", "b"),
            ("Das ist ein guter Plan.", "c"), ("Etwas völlig Neues.", "d")]
    leaks = find_leaks(train, held)
    assert sorted(leaks) == sorted([
        ("woher kommst du woher bist du", "woher kommst du", "contains"),
        ("mir ist schwindlig", "mir ist schwindelig", "similar"),
        ("das ist ein guter plan", "ich glaube das ist ein guter plan", "contains")])
    assert similarity("Mir ist schwindlig.", "mir ist schwindelig") >= 0.9
    assert find_leaks(train, []) == [] and find_leaks([], held) == []
    with pytest.raises(ValueError):
        find_leaks(train, held, threshold=1.5)


def test_grouping_is_fast_on_a_corpus_the_size_of_ding():
    rng = random.Random(0)
    vocabulary = [_word(i) for i in range(3000)]
    pairs = [(" ".join(rng.choices(vocabulary, k=rng.randint(3, 12))) + ".",
              " ".join(rng.choices(vocabulary, k=rng.randint(3, 12))) + ".")
             for _ in range(17_000)]
    start = time.process_time()
    splits = split_pairs(pairs)
    assert time.process_time() - start < 20  # about 2 s on one core
    assert sum(len(v) for v in splits.values()) == len(set(pairs))
