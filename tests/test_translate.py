"""The translate command and its parts, on small corpora the tests write (no Ding here):
the command end to end, sacreBLEU's numbers, checkpoint averaging, a tiny model that
learns 50 pairs by heart, exact resume, and clear errors."""
from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys

import pytest
import torch

from transformer_lib.data import Corpus, SubwordTokenizer
from transformer_lib.stopping import StopFlag
from transformer_lib.translate import checkpoints
from transformer_lib.translate.__main__ import main
from transformer_lib.translate.evaluate import exact_matches, score, teacher_forced_loss
from transformer_lib.translate.pipeline import learning_curve, train_corpus
from transformer_lib.translate.presets import LONG_RECIPE, RECIPE
from transformer_lib.translate.search import translate_texts
from transformer_lib.translate.translator import build_translator

SUBJECTS = [("der Hund", "the dog"), ("die Katze", "the cat"), ("das Kind", "the child"),
            ("der Mann", "the man"), ("die Frau", "the woman")]
VERBS = [("sieht", "sees"), ("hört", "hears"), ("findet", "finds"), ("ruft", "calls"),
         ("mag", "likes")]
OBJECTS = [("den Ball", "the ball"), ("das Haus", "the house"), ("den Baum", "the tree"),
           ("die Tür", "the door"), ("das Auto", "the car")]


def sentences(n: int) -> list[tuple[str, str]]:
    """``n`` distinct German -> English pairs of a little grammar ("Der Hund sieht den Ball.")."""
    pairs = []
    for (s_de, s_en), (v_de, v_en), (o_de, o_en) in itertools.product(SUBJECTS, VERBS, OBJECTS):
        pairs.append((f"{s_de} {v_de} {o_de}.".capitalize(), f"{s_en} {v_en} {o_en}.".capitalize()))
    return pairs[:n]


def little_corpus(n: int = 50, name: str = "little") -> Corpus:
    pairs = sentences(n)
    return Corpus(name, "de", "en", train=pairs, valid=pairs[:5], test=pairs[:10])


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: one thread is faster than two, above all on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tsv(tmp_path_factory):
    path = tmp_path_factory.mktemp("tsv") / "pairs.tsv"
    path.write_text("".join(f"{de}\t{en}\n" for de, en in sentences(125)), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------
# Scores


def test_bleu_and_chrf_equal_the_sacrebleu_command(tmp_path):
    refs = ["The dog sees the ball.", "A cat hears the door!", "Is the man here?",
            "The woman likes the house very much."]
    hyps = ["The dog sees a ball.", "A cat hears the door!", "The man is here?",
            "The woman likes the house."]
    (tmp_path / "hyp.txt").write_text("\n".join(hyps) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    out = subprocess.run([sys.executable, "-m", "sacrebleu", str(tmp_path / "ref.txt"),
                          "-i", str(tmp_path / "hyp.txt"), "-m", "bleu", "chrf", "-w", "4"],
                         capture_output=True, text=True, check=True).stdout
    bleu, chrf = json.loads(out)
    ours = score(hyps, refs)
    assert ours["bleu"] == pytest.approx(bleu["score"], abs=1e-4)
    assert ours["chrf"] == pytest.approx(chrf["score"], abs=1e-4)
    assert (ours["bleu_signature"], ours["chrf_signature"]) == (bleu["signature"],
                                                                chrf["signature"])
    assert 0 < ours["bleu"] < 100 and ours["bleu_signature"].startswith("nrefs:1|case:mixed")
    assert "tok:13a" in ours["bleu_signature"] and "nc:6" in ours["chrf_signature"]


def test_score_refuses_mismatched_lists():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        score(["a", "b"], ["a"])
    with pytest.raises(TypeError, match="lists of str"):
        score("a b", "a b")


def test_exact_matches_count_sentences_of_three_to_six_words():
    found = exact_matches(["1", "2", "3", "4"], ["a b c", "a b", "a b c d e f g", "x y z"],
                          ["a b c", "a b", "a b c d e f g", "x y w"])
    assert (found["count"], found["total"]) == (1, 2)  # "a b" is too short, 7 words too long


# ------------------------------------------------------------------------------------
# Checkpoint averaging (paper 6.1)


def test_average_of_k_checkpoints_is_their_mean(tmp_path):
    tokenizer = SubwordTokenizer.train([t for pair in sentences(20) for t in pair], vocab_size=60)
    paths, states = [], []
    for seed in range(3):
        torch.manual_seed(seed)
        model = build_translator(tokenizer, "tiny", {"name": "little"})
        states.append(model.state_dict())
        paths.append(checkpoints.save_translator(model, tmp_path / f"m{seed}.pt"))
    mean = checkpoints.average_checkpoints(paths)
    for key, value in states[0].items():
        expected = sum(state[key] for state in states) / 3
        torch.testing.assert_close(mean[key], expected, rtol=0, atol=1e-7)
    code = main(["average", str(tmp_path / "avg.pt"), *map(str, paths)])
    averaged = checkpoints.load_translator(tmp_path / "avg.pt")
    assert code == 0 and averaged.metrics["averaged"] == 3
    for key, value in averaged.state_dict().items():
        torch.testing.assert_close(value, mean[key], rtol=0, atol=0)


def test_average_refuses_checkpoints_of_different_models():
    a = {"w": torch.zeros(2, 3)}
    with pytest.raises(ValueError, match="different shapes"):
        checkpoints.average_state_dicts([a, {"w": torch.zeros(3, 2)}])
    with pytest.raises(ValueError, match="other keys"):
        checkpoints.average_state_dicts([a, {"v": torch.zeros(2, 3)}])
    with pytest.raises(ValueError, match="non-empty"):
        checkpoints.average_state_dicts([])


# ------------------------------------------------------------------------------------
# The whole pipeline learns


def test_a_tiny_model_learns_50_pairs_by_heart():
    """Train and test on the same 50 pairs: if tokenizer, batching, model, loss, decoding
    or detokenisation were broken, the translations would not come back exactly."""
    corpus = little_corpus(50)
    corpus.test = list(corpus.train)
    result = train_corpus(corpus, steps=300, preset="tiny", vocab_size=120, batch_size=50,
                          dropout=0.0, label_smoothing=0.0, word_dropout=0.0, lr_factor=1.0,
                          warmup=30, device="cpu", progress=False, seed=0)
    hypotheses = translate_texts(result.model, [s for s, _ in corpus.test])
    scores = score(hypotheses, [t for _, t in corpus.test])
    assert scores["bleu"] >= 90, (scores, hypotheses[:5])


def test_teacher_forced_loss_is_the_cross_entropy_of_the_references():
    """Nats per target token, padding left out, dropout off, any batch size; the model's
    mode is put back; a model trained on the pairs scores them far lower."""
    corpus = little_corpus(20)
    tokenizer = SubwordTokenizer.train([t for p in corpus.train for t in p], vocab_size=80)
    torch.manual_seed(0)
    model = build_translator(tokenizer, "tiny", dropout=0.3).train()
    pairs = corpus.train[:7]
    # by hand, one pair at a time: the sum of -log p over each target's tokens after BOS
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for source, target in pairs:
            src = torch.tensor([model.encode_source(source)])
            tgt = torch.tensor([[tokenizer.bos_id] + tokenizer.encode(target)
                                + [tokenizer.eos_id]])
            logp = model(src, tgt[:, :-1]).log_softmax(-1)  # (1, Lt - 1, V)
            total -= logp.gather(-1, tgt[:, 1:, None]).sum().item()
            count += tgt.size(1) - 1
    model.train()
    for batch_size in (1, 3, 64):
        found = teacher_forced_loss(model, pairs, batch_size=batch_size)
        assert found == pytest.approx(total / count, rel=1e-5), batch_size
    assert model.training
    trained = train_corpus(corpus, steps=150, preset="tiny", tokenizer=tokenizer,
                           batch_size=20, dropout=0.0, label_smoothing=0.0, warmup=20,
                           device="cpu", progress=False, seed=0, valid_every=50)
    assert teacher_forced_loss(trained.model, pairs) < 0.5 * total / count
    # the curve of the run: one loss per validation, falling
    losses = trained.history["valid_loss"]
    assert len(losses) == len(trained.history["valid_step"]) == 3, trained.history
    assert losses[-1] < losses[0]
    # the curve the benchmark stores and the chapter plots: one entry per validation, the
    # training loss the mean of the logged losses since the previous validation
    curve = learning_curve(trained.history)
    assert curve["step"] == trained.history["valid_step"]
    assert curve["loss"] == [round(x, 4) for x in losses]
    h = trained.history
    first = [loss for s, loss in zip(h["step"], h["loss"]) if s <= curve["step"][0]]
    assert curve["train_loss"][0] == pytest.approx(sum(first) / len(first), abs=1e-4)
    with pytest.raises(ValueError, match="at least one pair"):
        teacher_forced_loss(model, [])


# ------------------------------------------------------------------------------------
# Resume


def test_a_stopped_and_resumed_run_equals_the_whole_run(tsv, tmp_path):
    from transformer_lib.data import load_corpus

    corpus = load_corpus("tsv", path=str(tsv))
    settings = dict(steps=6, preset="tiny", vocab_size=80, batch_size=16, device="cpu",
                    progress=False, seed=3, log_every=2)
    whole = train_corpus(corpus, **settings)
    first = train_corpus(corpus, stop=StopFlag(after=3), **settings)
    assert first.stopped and first.metrics["steps"] == 3
    path = checkpoints.save_translator(first.model, tmp_path / "run.pt", first.metrics,
                                       training=first.training)
    resumed = train_corpus(corpus, resume=checkpoints.load_resumable(path), **settings)
    assert resumed.metrics["steps"] == 6
    for key, value in whole.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[key]), key
    assert resumed.history["step"][-1] == whole.history["step"][-1] == 6
    assert resumed.history["loss"][-1] == whole.history["loss"][-1]  # steps 5-6, both runs


# ------------------------------------------------------------------------------------
# The command


def test_command_trains_translates_and_evaluates(tsv, tmp_path, capsys, monkeypatch):
    out = str(tmp_path / "m.pt")
    code = main(["train", "--corpus", "tsv", "--path", str(tsv), "--steps", "3",
                 "--preset", "tiny", "--vocab-size", "80", "--batch-size", "16",
                 "--out", out, "--no-progress", "--threads", "1"])
    printed = capsys.readouterr().out
    assert code == 0 and os.path.exists(out)
    assert "trained 3 steps" in printed and "nrefs:1|case:mixed" in printed
    assert "exact matches on sentences of 3-6 words" in printed

    assert main(["translate", out, "Der Hund sieht den Ball.", "Die Katze mag das Auto."]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2

    monkeypatch.setattr(sys, "stdin", io.StringIO("Der Mann ruft die Tür.\n\nDas Kind hört.\n"))
    assert main(["translate", out, "--beam", "3"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2  # the empty line is skipped

    assert main(["evaluate", out]) == 0
    printed = capsys.readouterr().out
    assert "BLEU" in printed and "chrF" in printed and "tok:13a" in printed
    assert "version:2." in printed and "test split:" in printed

    model = checkpoints.load_translator(out)
    assert model.corpus["options"]["path"] == str(tsv) and model.preset == "tiny"


def test_command_runs_as_a_module(tmp_path):
    run = subprocess.run([sys.executable, "-m", "transformer_lib.translate", "train", "--help"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "--corpus" in run.stdout and "--minutes" in run.stdout


@pytest.mark.parametrize("args, message", [
    (["train", "--steps", "0"], "argument --steps: must be >= 1, got 0"),
    (["train", "--minutes", "-1"], "argument --minutes: must be a finite number > 0"),
    (["train", "--dropout", "1.5"], "argument --dropout: must be at least 0 and below 1"),
    (["train", "--corpus", "tsv", "--steps", "1"], "--corpus tsv needs --path"),
    (["train", "--corpus", "nope"], "argument --corpus: invalid choice"),
    (["train", "--preset", "huge"], "argument --preset: invalid choice"),
    (["train", "--device", "cpux"], "argument --device"),
    (["translate", "/nonexistent/m.pt", "Hallo"], "no checkpoint at '/nonexistent/m.pt'"),
])
def test_bad_arguments_say_what_is_wrong(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_paths_say_what_is_wrong(tmp_path, tsv, capsys):
    with pytest.raises(SystemExit):
        main(["train", "--corpus", "tsv", "--path", str(tmp_path / "none.tsv"), "--steps", "1",
              "--out", str(tmp_path / "m.pt")])
    assert "no TSV file at" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--corpus", "tsv", "--path", str(tsv), "--steps", "1",
              "--out", str(tmp_path / "no-folder" / "m.pt")])
    assert "argument --out: the folder" in capsys.readouterr().err
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit):
        main(["translate", str(tmp_path / "junk.pt"), "Hallo"])
    assert "is not a readable checkpoint" in capsys.readouterr().err


def test_stop_writes_a_resumable_checkpoint_and_exits_75(tsv, tmp_path, capsys):
    out = str(tmp_path / "m.pt")
    common = ["train", "--corpus", "tsv", "--path", str(tsv), "--steps", "4", "--preset",
              "tiny", "--vocab-size", "80", "--batch-size", "16", "--out", out,
              "--no-progress", "--threads", "1"]
    assert main(common + ["--stop-after", "2"]) == 75
    assert "--resume" in capsys.readouterr().out
    assert checkpoints.load_resumable(out)["training"]["step"] == 2
    assert main(common + ["--resume", out]) == 0
    assert "trained 4 steps" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(common[:-2] + ["--seed", "5", "--resume", out])
    assert "argument --resume" in capsys.readouterr().err


# ------------------------------------------------------------------------------------
# number_words runs on the same trainer


def test_number_words_shares_the_trainer():
    from transformer_lib.examples import number_words as nw
    from transformer_lib.translate import trainer

    assert nw.LinearDecay is trainer.LinearDecay and nw.make_optimizer is trainer.make_optimizer
    assert nw.EXIT_STOPPED == trainer.EXIT_STOPPED == 75


# ------------------------------------------------------------------------------------
# The committed measurements


REAL_CORPUS_RESULTS = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results",
                                   "real_corpus_cpu.json")
BLEU_SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a"


def check_real_corpus_results(results: dict) -> None:
    """What a results file of benchmarks/real_corpus.py (schema 2) must say: the corpus
    and its split sizes; copy and retrieval scored on validation and test; for every run
    its recipe, a budget of M minutes on N cores = M x 60 x N CPU seconds (really spent),
    validation scores with signatures; test scores only on final runs, with the paired
    bootstraps; a final summary whose means are the runs' means over >= 3 seeds."""
    def in_range(scores):
        assert 0 <= scores["bleu"] <= 100 and 0 <= scores["chrf"] <= 100, scores

    assert results["kind"] == "real_corpus" and results["schema"] == 2
    corpus = results["corpus"]
    assert corpus["name"] == "ding" and corpus["version"]
    assert all(corpus[split] > 0 for split in ("train", "valid", "test")), corpus
    for name in ("copy", "retrieval"):
        for split in ("valid", "test"):
            in_range(results["baselines"][name][split])
    for row in results["results"]:
        assert set(RECIPE) <= set(row["recipe"]), sorted(set(RECIPE) - set(row["recipe"]))
        if row["device"] == "cpu":
            assert row["budget_s"] == row["minutes"] * 60 * row["cores"], row["budget_s"]
            assert row["train_cpu_s"] >= row["budget_s"] or row.get("step_cap"), row["train_cpu_s"]
        for split in ("valid", "test") if "test" in row else ("valid",):
            for search in ("greedy", "beam4"):
                in_range(row[split][search])
            assert row[split]["signatures"]["bleu"].startswith(BLEU_SIGNATURE)
        if "test" in row:
            for compared in row["test"]["paired_bootstrap"].values():
                assert 0 <= compared["bleu"]["p_value"] <= 1, compared
    finals = [row for row in results["results"] if "test" in row]
    assert bool(finals) == bool(results.get("final")), "test scores need the final summary"
    for entry in results.get("final", []):
        assert len(entry["seeds"]) >= 3, entry["seeds"]
        rows = [row for row in finals if row["minutes"] == entry["minutes"]
                and row["average"] == entry["average"] and row["recipe"] == entry["recipe"]]
        assert sorted(entry["seeds"]) == sorted(row["seed"] for row in rows), entry["seeds"]
        for search in ("greedy", "beam4"):
            for metric in ("bleu", "chrf"):
                values = [row["test"][search][metric] for row in rows]
                mean = entry[f"{search}_{metric}"]["mean"]
                assert abs(mean - sum(values) / len(values)) < 0.006, (search, metric, mean)


def _small_results_file() -> dict:
    """Invented numbers in the layout benchmarks/real_corpus.py writes: one search run on
    validation, three final runs of one budget."""
    signatures = dict(bleu=BLEU_SIGNATURE + "|smooth:exp|version:2.6.0", chrf="nrefs:1")
    recipe = dict(RECIPE, bpe_dropout=0.0)

    def split(bleu):
        return dict(greedy=dict(bleu=bleu, chrf=20.0), beam4=dict(bleu=bleu + 1, chrf=21.0),
                    signatures=signatures)

    def row(seed, final):
        out = dict(minutes=3.0, cores=2, seed=seed, device="cpu", budget_s=360.0,
                   step_cap=None, recipe=recipe, average=1, train_cpu_s=361.5,
                   valid=split(4.0))
        if final:
            test = split(3.0 + seed)
            test["paired_bootstrap"] = {"beam4_vs_greedy": dict(
                bleu=dict(difference=1.0, p_value=0.01), chrf=dict(difference=1.0, p_value=0.2))}
            out["test"] = test
        return out

    rows = [row(0, False)] + [row(seed, True) for seed in (0, 1, 2)]
    final = dict(minutes=3.0, average=1, recipe=recipe, seeds=[0, 1, 2])
    for search, plus in (("greedy", 0), ("beam4", 1)):
        final[f"{search}_bleu"] = dict(mean=4.0 + plus)
        final[f"{search}_chrf"] = dict(mean=20.0 + plus)
    score = dict(bleu=1.0, chrf=15.0)
    return dict(kind="real_corpus", schema=2,
                corpus=dict(name="ding", version="v", train=100, valid=10, test=10),
                baselines=dict(copy=dict(valid=score, test=score),
                               retrieval=dict(valid=score, test=score)),
                results=rows, final=[final])


def test_the_results_check_passes_a_good_file_and_fails_bad_ones():
    good = _small_results_file()
    check_real_corpus_results(good)
    bad = json.loads(json.dumps(good))
    bad["results"][1]["budget_s"] = 180.0  # 3 minutes on 1 core, said to be on 2
    with pytest.raises(AssertionError):
        check_real_corpus_results(bad)
    bad = json.loads(json.dumps(good))
    bad["final"][0]["beam4_bleu"]["mean"] = 9.0  # not the mean of the runs
    with pytest.raises(AssertionError):
        check_real_corpus_results(bad)
    bad = json.loads(json.dumps(good))
    bad["final"][0]["seeds"] = [0]  # one seed is not a reported point
    with pytest.raises(AssertionError):
        check_real_corpus_results(bad)


def test_real_corpus_results_file_says_what_it_measured():
    with open(REAL_CORPUS_RESULTS) as f:
        results = json.load(f)
    assert results.get("schema") == 2, (
        f"real_corpus_cpu.json is schema {results.get('schema')}: benchmarks/real_corpus.py "
        "writes schema 2 (the rows of schema 1 were measured on the old split)")
    check_real_corpus_results(results)
    # the recipes the library ships are the ones the file's final runs measured on test:
    # RECIPE at any budget, LONG_RECIPE at 30 minutes and more; and each was measured
    shipped = []
    for entry in results.get("final", []):
        recipe = {k: entry["recipe"][k] for k in RECIPE}
        assert recipe == RECIPE or (recipe == LONG_RECIPE and entry["minutes"] >= 30), (
            entry["minutes"], entry["recipe"])
        shipped.append(recipe)
    if results.get("final"):
        assert {k: results["recipe"][k] for k in RECIPE} == RECIPE, results["recipe"]
        assert RECIPE in shipped and LONG_RECIPE in shipped, "a shipped recipe unmeasured"


def test_long_recipe_is_the_recipe_with_more_dropout():
    """LONG_RECIPE changes one thing, as the search that chose it did."""
    from transformer_lib.translate import LONG_RECIPE as exported

    assert exported is LONG_RECIPE and set(LONG_RECIPE) == set(RECIPE)
    assert {k for k in RECIPE if LONG_RECIPE[k] != RECIPE[k]} == {"dropout"}
    assert LONG_RECIPE["dropout"] > RECIPE["dropout"]


@pytest.mark.parametrize("words, expected", [
    ([], None), (["--deterministic"], True), (["--deterministic", "true"], True),
    (["--deterministic", "off"], False)])
def test_deterministic_is_a_flag_with_an_optional_value_in_both_command_lines(words, expected):
    """Unset, tl.set_seed chooses (deterministic on the CPU only); --deterministic alone
    asks for it on CUDA too, as the resume contract needs."""
    from transformer_lib.examples import number_words
    from transformer_lib.translate.__main__ import _parser

    args = _parser().parse_args(["train", "--corpus", "tsv", *words])
    assert args.deterministic is expected
    assert number_words._parser().parse_args(words).deterministic is expected
