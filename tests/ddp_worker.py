"""One rank of the multi-process tests (tests/test_distributed.py starts W of them, with the
environment variables torchrun would set, and compares what rank 0 saves with one process).

    RANK=r WORLD_SIZE=W LOCAL_RANK=r MASTER_ADDR=127.0.0.1 MASTER_PORT=p \\
        python tests/ddp_worker.py OUT_DIR

Rank 0 writes OUT_DIR/results.pt:
- "grads": for K = 1, 2, 3 micro-batches per rank, the gradients of one DDP step in float64
  on a padded batch (and the batch and initial weights, for the reference);
- "steps": for K = 1, 2, the float64 weights after STEPS Adam steps on GLOBAL_BATCHES;
- "resume": the capstone trained by ``train_number_words`` for RESUME_STEPS steps, never
  stopped, and stopped after s steps, saved, loaded and resumed (K = 1 and 2);
- "rank_spread": the largest difference between the ranks' gradients (must be 0).
"""
from __future__ import annotations

import os
import sys

import torch

import transformer_lib as tl
from transformer_lib import distributed
from transformer_lib.stopping import StopFlag

VOCAB, PAD, BOS, EOS = 11, 0, 1, 2
STEPS = 5
RESUME_STEPS = 8
RESUME_STOPS = {1: (3, 6), 2: (5,)}  # accumulate -> steps after which a run is stopped
TINY = dict(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
            dropout=0.0)


def tiny_model() -> tl.Transformer:
    """The same float64 model in every process (fixed seed)."""
    torch.manual_seed(0)
    model = tl.Transformer(VOCAB, VOCAB, d_model=16, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1, d_ff=32, dropout=0.0, max_len=32, pad_id=PAD)
    return model.double()


def padded_batch(seed: int, rows: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """src (rows, 7), tgt (rows, 8) = [BOS, y..., EOS, PAD...], lengths drawn per row, so any
    part of the batch holds padding and a different number of target tokens."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, VOCAB, (rows, 7), generator=g)
    src_len = torch.randint(1, 8, (rows,), generator=g)
    src[torch.arange(7) >= src_len[:, None]] = PAD
    body = torch.randint(3, VOCAB, (rows, 8), generator=g)
    tgt_len = torch.randint(1, 7, (rows,), generator=g)  # 1..6 target words
    position = torch.arange(8)
    tgt = torch.where(position < tgt_len[:, None] + 1, body, torch.full_like(body, PAD))
    tgt[:, 0] = BOS
    tgt[position[None, :] == tgt_len[:, None] + 1] = EOS
    return src, tgt


GRAD_BATCH = padded_batch(0)
GLOBAL_BATCHES = [padded_batch(100 + i) for i in range(STEPS)]


def gradient_check(world: distributed.World, accumulate: int) -> dict:
    model = tiny_model()
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    ddp = distributed.wrap(model, world)
    pieces = distributed.split_batch(*GRAD_BATCH, world.size * accumulate, PAD)
    mine = pieces[world.rank * accumulate:(world.rank + 1) * accumulate]
    tl.training.accumulate_gradients(ddp, mine)
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    flat = torch.cat([g.flatten() for g in grads.values()])
    spread = max((flat - other).abs().max().item()
                 for other in distributed.gather_objects(flat))
    return {"grads": grads, "initial": initial, "spread": spread}


def steps_check(world: distributed.World, accumulate: int) -> dict:
    model = tiny_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    batches = distributed.micro_batches(GLOBAL_BATCHES, world, accumulate, PAD)
    tl.train(distributed.wrap(model, world), batches, optimizer, max_steps=STEPS,
             accumulate=accumulate, progress=False)
    return {k: v.clone() for k, v in model.state_dict().items()}


def resume_check(world: distributed.World, accumulate: int, folder: str) -> dict:
    from transformer_lib.data import NumberWordsData
    from transformer_lib.examples import number_words as nw

    data = NumberWordsData("de", train_size=64, n_test=20, n_valid=5, seed=0)
    settings = dict(steps=RESUME_STEPS, data=data, batch_size=12, model_config=TINY,
                    device="cpu", progress=False, evaluate_test=False, world=world,
                    accumulate=accumulate, log_every=2)
    whole = nw.train_number_words("de", **settings)
    out = {"whole": whole.model.state_dict(), "history": whole.history}
    for stop_after in RESUME_STOPS[accumulate]:
        first = nw.train_number_words("de", stop=StopFlag(after=stop_after), **settings)
        assert first.stopped and first.metrics["steps"] == stop_after, first.metrics
        path = os.path.join(folder, f"stopped_{accumulate}_{stop_after}.pt")
        if world.is_main:
            nw.save_checkpoint(first.model, path, first.metrics, training=first.training)
        distributed.barrier()
        resumed = nw.train_number_words("de", resume=nw.load_resumable(path), **settings)
        out[f"resumed_{stop_after}"] = resumed.model.state_dict()
        out[f"steps_{stop_after}"] = resumed.metrics["steps"]
    return out


def main(folder: str) -> None:
    torch.set_num_threads(1)
    world = distributed.setup("cpu")
    try:
        results = {"world_size": world.size, "grads": {}, "steps": {}, "resume": {}}
        for k in (1, 2, 3):
            results["grads"][k] = gradient_check(world, k)
        for k in (1, 2):
            results["steps"][k] = steps_check(world, k)
        for k in (1, 2):
            results["resume"][k] = resume_check(world, k, folder)
        if world.is_main:
            torch.save(results, os.path.join(folder, "results.pt"))
    finally:
        distributed.teardown()


if __name__ == "__main__":
    main(sys.argv[1])
