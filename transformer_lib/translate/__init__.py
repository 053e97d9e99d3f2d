"""One trainer and one command for every corpus: ``python -m transformer_lib.translate
train|translate|evaluate``.

- ``trainer``: the training loop every corpus shares (``fit``), budgets on the wall or
  CPU clock, torchrun, resume and stop;
- ``presets``: model sizes from ``tiny`` to the paper's ``base``, and the recipe;
- ``translator``: a ``Transformer`` that carries its subword tokenizer, built for a corpus;
- ``search``: sentences in, sentences out, through ``greedy_decode`` / ``beam_search``;
- ``evaluate``: sacreBLEU's BLEU and chrF on a split, with their signatures;
- ``checkpoints``: safe reading, and the average of the last K checkpoints (paper 6.1).
"""
