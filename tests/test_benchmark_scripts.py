"""benchmarks/decoding.py and attention.py on the CPU, tiny: every decoding contender gives
the cached loop's tokens, and a contender that fails (as a CUDA graph or a compiled step
could on a GPU this was not written on) is named, left out, and turns the exit code to 1
while the others are still timed."""
from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import transformer_lib as tl

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--model", "small", "--batch", "4", "--src-len", "6", "--new-tokens", "3",
        "--repeats", "1", "--threads", "1", "--deterministic", "on"]


def _load(name, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(f"{name}_bench",
                                                  ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def restored(monkeypatch):
    """The scripts set threads, seeds, deterministic algorithms and (deterministic on
    CUDA) CUBLAS_WORKSPACE_CONFIG for the whole process: put them back for later tests."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", os.environ.get("CUBLAS_WORKSPACE_CONFIG", ""))
    if not os.environ["CUBLAS_WORKSPACE_CONFIG"]:
        monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    threads = torch.get_num_threads()
    deterministic = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
    rng = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
    random.setstate(rng[0])
    np.random.set_state(rng[1])
    torch.set_rng_state(rng[2])


@pytest.fixture
def decoding(monkeypatch, restored):
    return _load("decoding", monkeypatch)


@pytest.fixture
def attention(monkeypatch, restored):
    return _load("attention", monkeypatch)


def test_every_contender_gives_the_cached_tokens(decoding, capsys, tmp_path):
    assert decoding.main([*TINY, "--json", str(tmp_path / "out.json")]) == 0
    out = capsys.readouterr().out
    assert "rows with the cached loop's tokens: uncached 4/4, cached 4/4, static 4/4" in out
    assert "Target (cpu): cached greedy <= 0.8x generate's time" in out
    results = json.loads((tmp_path / "out.json").read_text())
    assert results["failed"] == {}
    assert set(results["same_rows"].values()) == {4}


def test_a_failing_contender_is_named_and_the_others_still_timed(decoding, capsys,
                                                                 monkeypatch, tmp_path):
    def broken(self, *args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing\nmore")
    monkeypatch.setattr(tl.FastDecoder, "greedy", broken)
    assert decoding.main([*TINY, "--json", str(tmp_path / "out.json")]) == 1
    out = capsys.readouterr().out
    assert "FAILED: static: RuntimeError: operation not permitted when stream is capturing" in out
    assert "static" not in out.split("rows with the cached loop's tokens:")[1].splitlines()[0]
    assert "Target (cpu)" in out  # the comparison with generate still ran
    results = json.loads((tmp_path / "out.json").read_text())
    assert results["failed"] == {
        "static": "RuntimeError: operation not permitted when stream is capturing"}
    assert "static" not in results["greedy_ms"] and "cached" in results["greedy_ms"]


def test_the_cached_loop_failing_is_not_hidden(decoding, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the reference itself")
    monkeypatch.setattr(tl, "greedy_decode", broken)
    with pytest.raises(RuntimeError, match="the reference itself"):
        decoding.main(TINY)


def test_a_deterministic_rerun_that_reports_failures_is_still_read(tmp_path):
    """run_deterministic: a rerun that wrote its results and exits 1 (contenders failed)
    is read; one that wrote nothing stops the caller."""
    script = tmp_path / "bench.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(ROOT / 'benchmarks')!r})
        from _timing import run_deterministic
        args = sys.argv[1:]
        if "--deterministic" in args:  # the rerun
            if "--crash" in args:
                raise SystemExit(2)
            path = args[args.index("--json") + 1]
            json.dump({{"failed": {{"graphed": "RuntimeError: x"}}}}, open(path, "w"))
            raise SystemExit(1)
        print(json.dumps(run_deterministic(args)))
    """))
    ok = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                        timeout=300)  # two fresh imports of torch: slow under load
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout.splitlines()[-1]) == {"failed": {"graphed": "RuntimeError: x"}}
    crash = subprocess.run([sys.executable, str(script), "--crash"], capture_output=True,
                           text=True, timeout=300)
    assert crash.returncode != 0
    assert "the deterministic run failed (exit 2)" in crash.stderr


def test_a_training_step_that_fails_to_compile_is_named(attention, capsys, monkeypatch,
                                                        tmp_path):
    def compile_that_fails(fn, **options):
        def call(*args, **kwargs):
            raise RuntimeError("triton: no kernel for this device\ndetails")
        return call
    monkeypatch.setattr(torch, "compile", compile_that_fails)
    argv = ["--skip", "attention", "--quick", "--step-batch", "2", "--step-length", "4",
            "--threads", "1", "--deterministic", "on", "--compile",
            "--json", str(tmp_path / "out.json")]
    assert attention.main(argv) == 1
    out = capsys.readouterr().out
    assert "FAILED: compiled: RuntimeError: triton: no kernel for this device" in out
    assert "Target (cpu): base-model training step <= 1.00x nn.Transformer" in out
    step = json.loads((tmp_path / "out.json").read_text())["train_step"]
    assert step["failed"] == "compiled: RuntimeError: triton: no kernel for this device"
    assert "compiled_ms" not in step and step["ours_ms"] > 0


# ------------------------------------------------------------------------------------
# benchmarks/real_corpus.py: validation for every run, test only for the chosen recipe


@pytest.fixture
def real_corpus(monkeypatch, restored):
    return _load("real_corpus", monkeypatch)


def _invented_corpus():
    from transformer_lib.data.corpus import Corpus

    nouns = [("Hund", "dog"), ("Katze", "cat"), ("Vogel", "bird"), ("Fisch", "fish"),
             ("Pferd", "horse"), ("Maus", "mouse")]
    verbs = [("schläft", "sleeps"), ("spielt", "plays"), ("isst", "eats"),
             ("läuft", "runs"), ("wartet", "waits")]
    pairs = [(f"Der {n} {v} heute.", f"The {m} {w} today.") for n, m in nouns
             for v, w in verbs]
    return Corpus("invented", "de", "en", train=pairs[:22], valid=pairs[22:26],
                  test=pairs[26:])


TINY_RUN = ["--minutes", "1", "--steps", "3", "--cores", "1", "--bootstrap-samples", "20",
            "--set", "preset=tiny", "vocab_size=120", "batch_size=8", "warmup=2"]


def _evaluated_splits(real_corpus, monkeypatch, corpus):
    """Which splits the script translates: evaluate() is watched."""
    seen = []
    evaluate = real_corpus.evaluate

    def watched(model, pairs, **kwargs):
        seen.append(next(name for name in ("valid", "test")
                         if pairs == corpus.split(name)))
        return evaluate(model, pairs, **kwargs)
    monkeypatch.setattr(real_corpus, "evaluate", watched)
    return seen


def test_real_corpus_scores_validation_and_never_test_unless_final(real_corpus, monkeypatch,
                                                                   tmp_path):
    corpus = _invented_corpus()
    seen = _evaluated_splits(real_corpus, monkeypatch, corpus)
    out = tmp_path / "search.json"
    assert real_corpus.main([*TINY_RUN, "dropout=0.2", "--out", str(out)], corpus=corpus) == 0
    results = json.loads(out.read_text())
    assert seen == ["valid", "valid"]  # greedy and beam 4, validation only
    assert results["schema"] == 2 and "final" not in results
    (row,) = results["results"]
    assert "test" not in row and row["recipe"]["dropout"] == 0.2 and row["seed"] == 0
    assert row["budget_s"] == 60 and row["steps"] == 3 and row["average"] == 1
    assert row["train_cpu_s"] > 0 and row["train_wall_s"] > 0 and "valid_curve" in row
    for search in ("greedy", "beam4"):
        assert 0 <= row["valid"][search]["bleu"] <= 100
        assert row["everyday"][search]["total"] == 30
        translations = row["everyday"][search]["translations"]
        assert len(translations) == 30 and all(isinstance(t, str) for t in translations)
    assert row["valid"]["signatures"]["bleu"].startswith("nrefs:1|case:mixed")
    # the baselines, once per file, on both splits (they choose nothing)
    for name in ("copy", "retrieval"):
        for split in ("valid", "test"):
            assert 0 <= results["baselines"][name][split]["chrf"] <= 100
    assert results["everyday"]["sentences"] == 30 and results["everyday"]["in_training"] == []


def test_real_corpus_final_scores_test_over_seeds_with_paired_bootstrap(real_corpus,
                                                                        monkeypatch,
                                                                        tmp_path):
    corpus = _invented_corpus()
    seen = _evaluated_splits(real_corpus, monkeypatch, corpus)
    out = tmp_path / "final.json"
    assert real_corpus.main([*TINY_RUN, "--final", "--seeds", "0", "1", "--out", str(out)],
                            corpus=corpus) == 0
    results = json.loads(out.read_text())
    assert seen == ["valid", "valid", "test", "test"] * 2
    assert [row["seed"] for row in results["results"]] == [0, 1]
    for row in results["results"]:
        paired = row["test"]["paired_bootstrap"]
        assert set(paired) == {"beam4_vs_greedy", "greedy_vs_retrieval", "beam4_vs_retrieval"}
        assert 0 < paired["beam4_vs_retrieval"]["bleu"]["p_value"] <= 1
    (summary,) = results["final"]
    assert summary["seeds"] == [0, 1] and summary["beam4_bleu"]["sd"] is not None
    merged = tmp_path / "merged.json"
    assert real_corpus.main(["--merge", str(out), str(out), "--out", str(merged)]) == 0
    assert json.loads(merged.read_text())["final"][0]["seeds"] == [0, 0, 1, 1]


def test_everyday_sentences_are_thirty_and_not_from_the_dictionary(real_corpus):
    pairs = real_corpus.load_everyday()
    assert len(pairs) == 30 and all(1 <= len(refs) <= 2 for _, refs in pairs)
    assert all(2 <= len(s.split()) <= 8 for s, _ in pairs)
    header = (ROOT / "benchmarks" / "data" / "everyday_de_en.tsv").read_text().split("\n")[0]
    assert "written for The Tested Transformer" in header


def test_everyday_file_is_read_by_the_library_and_bad_lines_name_their_place(tmp_path):
    from transformer_lib.translate import load_everyday, parse_everyday

    text = "# ours\n\nIch bin müde.\tI am tired.\tI'm tired.\nDanke.\tThanks.\n"
    assert parse_everyday(text) == [("Ich bin müde.", ["I am tired.", "I'm tired."]),
                                    ("Danke.", ["Thanks."])]
    for bad, line in (("Danke.\n", 1), ("# c\nDanke.\t\n", 2), ("\tThanks.\n", 1),
                      ("Ja.\tYes.\tYes.\nNein.\tNo.\t \n", 2)):
        with pytest.raises(ValueError, match=f"everyday sentences:{line}: expected"):
            parse_everyday(bad)
    with pytest.raises(TypeError, match="file's content"):
        parse_everyday(b"Danke.\tThanks.")
    path = tmp_path / "mine.tsv"
    path.write_text("Danke.\n", encoding="utf-8")
    with pytest.raises(ValueError, match="mine.tsv:1"):
        load_everyday(path)
    # the benchmark, the chapter and the tests read the project's file through it
    shipped = ROOT / "benchmarks" / "data" / "everyday_de_en.tsv"
    assert load_everyday(shipped) == parse_everyday(shipped.read_text(encoding="utf-8"))
