"""The copy and retrieval baselines (``transformer_lib.translate.baselines``), on a small
invented corpus."""
from __future__ import annotations

import time

import pytest

from transformer_lib.translate.baselines import Retrieval, copy_source, retrieve, words

TRAIN = [
    ("Der Hund schläft.", "The dog is sleeping."),
    ("Die Katze schläft im Garten.", "The cat is sleeping in the garden."),
    ("Der Hund spielt im Garten.", "The dog is playing in the garden."),
    ("Ich trinke Tee.", "I drink tea."),
    ("Ich trinke Kaffee.", "I drink coffee."),
    ("Ich trinke Tee.", "I am drinking tea."),  # the same source again: the first wins
]


def test_copy_returns_the_sources():
    assert copy_source(["Guten Morgen.", "Hallo"]) == ["Guten Morgen.", "Hallo"]
    with pytest.raises(TypeError):
        copy_source("Hallo")


def test_words_are_lower_cased_word_tokens():
    assert words("Der Hund, der HUND!") == {"der", "hund"}


def test_an_exact_hit_returns_its_reference_and_the_first_of_repeats():
    memory = Retrieval(TRAIN)
    assert memory.translate(["Der Hund schläft.", " Ich trinke Tee. "]) == \
        ["The dog is sleeping.", "I drink tea."]


def test_most_shared_words_then_fewest_words_then_first():
    memory = Retrieval(TRAIN)
    # shares {hund, schläft, der} with pair 0, {der, hund, garten, im} with pair 2
    assert memory.translate(["Der alte Hund schläft im Garten"]) == \
        ["The dog is playing in the garden."]
    # "ich trinke" ties pairs 3, 4, 5 (two words each, three words each): the first
    assert memory.translate(["Ich trinke Wasser."]) == ["I drink tea."]
    # "hund" alone: pairs 0 and 2 share one word; pair 0 has fewer words (3 < 5)
    assert memory.translate(["Hund"]) == ["The dog is sleeping."]
    # "garten" alone: pairs 1 and 2 share one word and have five each: the first
    assert memory.translate(["Garten"]) == ["The cat is sleeping in the garden."]


def test_ties_are_stable_under_reordering_the_queries():
    queries = ["Ich trinke Wasser.", "Garten", "Der Hund", "Katze"]
    forward = retrieve(TRAIN, queries)
    backward = retrieve(TRAIN, queries[::-1])
    assert forward == backward[::-1]


def test_no_shared_word_gives_the_empty_string():
    assert retrieve(TRAIN, ["Zebra!", ""]) == ["", ""]


def test_it_only_ever_answers_with_training_targets():
    """It is given training pairs and bare sources: a held-out reference cannot leak."""
    held_out = [("Die Katze spielt.", "The cat is playing."),
                ("Ich trinke Kaffee im Garten.", "I drink coffee in the garden.")]
    answers = Retrieval(TRAIN).translate([s for s, _ in held_out])
    assert set(answers) <= {t for _, t in TRAIN}
    assert not set(answers) & {t for _, t in held_out}


def test_a_thousand_queries_over_fifteen_thousand_pairs_are_fast():
    vocab = [f"w{i}" for i in range(3000)]
    train = [(" ".join(vocab[(i * 7 + k * 13) % 3000] for k in range(8)) + " und der",
              f"t{i}") for i in range(15_000)]
    queries = [" ".join(vocab[(i * 11 + k * 17) % 3000] for k in range(8)) + " der"
               for i in range(1000)]
    start = time.perf_counter()
    memory = Retrieval(train)
    answers = memory.translate(queries)
    assert len(answers) == 1000 and time.perf_counter() - start < 10
