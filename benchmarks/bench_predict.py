"""Prediction speed of `mtl-predict`: length-sorted batches vs batches in input order.

Model: the packaged all-MiniLM-L6-v2 encoder with a fresh (untrained) pydoc_topic classification
head; weights do not change the speed. Data: 2,000 bundled pydoc paragraphs
(`mtl.data.bundled.pydoc_paragraphs`, 1,833 of them, the list repeated to 2,000), task config
`pydoc_topic` (max_length 256). Both rows run `mtl.inference.predict.predict_task` (encoding,
batching, model, readable predictions) on the same rows, batch 32, on the GPU when there is one;
each first runs one warm-up batch, then the best of `--rounds`. Prints one table and one JSON line.
`--quick`: 64 paragraphs, one round (a smoke run for tests).

    python benchmarks/bench_predict.py [--quick] [--rows 2000] [--rounds 2] [--batch-size 32]
"""

from __future__ import annotations

import time

import torch
from harness import emit, parser, quiet_transformers, table


def build(device):
    from mtl.config import TaskConfig
    from mtl.data.bundled import pydoc_paragraphs
    from mtl.data.tokenizer import load_tokenizer
    from mtl.inference.export import LoadedModel, TaskInfo
    from mtl.models import MultiTaskModel, load_encoder
    from mtl.task_types import SequenceClassification

    paragraphs = pydoc_paragraphs()
    labels = sorted({topic for topic, _ in paragraphs})
    config = TaskConfig(type="sequence_classification", source={"bundled": "pydoc_topic"})
    config.max_length = 256
    task_type = SequenceClassification("pydoc_topic", config)
    encoder = load_encoder(None)
    head = task_type.make_head(encoder.config.hidden_size, len(labels), 0.1)
    model = MultiTaskModel(encoder, {"pydoc_topic": head}).eval().to(device)
    loaded = LoadedModel(
        model, load_tokenizer(None), {"pydoc_topic": TaskInfo(task_type, labels, config)}
    )
    return loaded, [text for _, text in paragraphs]


def main() -> None:
    args = parser(__doc__, "64 rows, 1 round")
    args.add_argument("--rows", type=int, default=2000)
    args.add_argument("--rounds", type=int, default=2)
    args.add_argument("--batch-size", type=int, default=32)
    args = args.parse_args()
    from mtl.inference.predict import predict_task

    quiet_transformers()
    n, rounds = (64, 1) if args.quick else (args.rows, args.rounds)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loaded, texts = build(device)
    rows = [{"text": texts[i % len(texts)]} for i in range(n)]
    results, speed = {}, {}
    for name, sort in (("length_sorted", True), ("input_order", False)):
        predict_task(loaded, "pydoc_topic", rows[: args.batch_size], device=device)  # warm-up
        best = float("inf")
        for _ in range(rounds):
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            results[name] = predict_task(
                loaded, "pydoc_topic", rows, batch_size=args.batch_size, sort=sort, device=device
            )
            if device.type == "cuda":
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - start)
        speed[name] = n / best
    same = [r["prediction"] for r in results["length_sorted"]] == [
        r["prediction"] for r in results["input_order"]
    ]
    ratio = speed["length_sorted"] / speed["input_order"]
    print(f"{n} pydoc paragraphs, batch {args.batch_size}, {device.type}, best of {rounds}")
    table(["batching", "examples/s"], [[name, value] for name, value in speed.items()], 1)
    print(f"speed-up {ratio:.2f}x; same predictions: {same}")
    figures = {
        "bench": "predict",
        "peer": "batches in input order",
        "rows": n,
        "batch_size": args.batch_size,
        "device": device.type,
        "examples_per_s": {k: round(v, 1) for k, v in speed.items()},
        "speedup": round(ratio, 3),
        "same_predictions": same,
    }
    emit(figures, args.json)


if __name__ == "__main__":
    main()
