"""Evaluation: every process predicts its share of a split, the predictions are gathered and
each task's type scores them with its metrics.

Rows are sorted by length before batching (order does not matter for metrics, padding does)
and split between processes without padding, so every row counts exactly once.
"""

from __future__ import annotations

import numpy as np
import torch

from mtl.batching import to_device
from mtl.data import task_dataset
from mtl.errors import MtlError
from mtl.models.decoding import greedy


def eval_batches(
    lengths, batch_size: int, rank: int = 0, world: int = 1
) -> list[tuple[list[int], bool]]:
    """This process's batches of row indices, longest rows first, as (indices, counted).

    Every process gets the same number of batches (under FSDP each forward call waits for every
    process): the rows are cut into chunks of `batch_size * world`, each process takes its
    strided share of a chunk. Where a chunk's share is empty (its last rows are fewer than the
    processes) the process runs the chunk's first row again, with counted False: its prediction
    is not kept.
    """
    order = np.argsort(-np.asarray(lengths), kind="stable")
    chunk = batch_size * world
    batches = []
    for start in range(0, len(order), chunk):
        rows = order[start : start + chunk]
        share = rows[rank::world].tolist()
        batches.append((share, True) if share else (rows[:1].tolist(), False))
    return batches


@torch.no_grad()
def predict_split(model, task, accelerator, batch_size: int, split: str = "dev") -> list:
    """The prediction for every row of `split` of `task`, in row order (on every process)."""
    net = accelerator.unwrap_model(model)
    dataset, collate = task_dataset(task, split), task.collator()
    rows = []
    lengths = task.splits[split]["length"]
    for indices, counted in eval_batches(
        lengths, batch_size, accelerator.process_index, accelerator.num_processes
    ):
        batch = to_device(collate(dataset.__getitems__(indices)), accelerator.device)
        with accelerator.autocast():
            logits = net.logits(batch)[task.name]
        if counted:
            rows.extend(zip(indices, task.task_type.predict(logits, batch), strict=True))
    return gathered(rows, accelerator)


def gathered(rows: list[tuple[int, object]], accelerator) -> list:
    """Every process's (row, value) pairs, as the values in row order."""
    if accelerator.num_processes > 1:
        from accelerate.utils import gather_object

        rows = gather_object(rows)
    rows.sort(key=lambda row: row[0])
    return [value for _, value in rows]


@torch.no_grad()
def generate_split(model, task, accelerator, batch_size: int, tokenizer, data):
    """The text the model writes (greedily) after the prompt of each row of `data` (encoded rows
    of a generation task), in their order, on every process (each decodes its share)."""
    net = accelerator.unwrap_model(model)
    task_type = task.task_type
    ids, prompt_lengths = data["input_ids"], data["prompt_length"]
    prompts = [row[:n] for row, n in zip(ids, prompt_lengths, strict=True)]
    end = task_type.end_id(tokenizer, f"task {task.name!r}")
    world = accelerator.num_processes
    texts = []
    for indices, counted in eval_batches(
        prompt_lengths, batch_size, accelerator.process_index, world
    ):
        with accelerator.autocast():
            written = greedy(
                net,
                task.name,
                [prompts[i] for i in indices],
                max_new_tokens=task_type.config.max_new_tokens,
                end_id=end,
                pad_id=task.pad_token_id,
                device=accelerator.device,
                stop_early=world == 1,  # processes that shard the model call it alike
            )
        if counted:
            decoded = tokenizer.batch_decode(written, skip_special_tokens=True)
            texts.extend(zip(indices, decoded, strict=True))
    return gathered(texts, accelerator)


def evaluate(
    model,
    tasks: dict,
    accelerator,
    batch_size: int,
    split: str = "dev",
    prefix: str = "eval",
    *,
    tokenizer=None,
    evaluation: int | None = None,
) -> dict[str, float]:
    """`{"<prefix>/<task>/<metric>": value}` over the whole `split` of every task.

    A task's extra splits named `<split>_<suffix>` (from its source, e.g. MNLI's
    `dev_mismatched` next to `dev`) are scored too, as `<prefix>/<task>_<suffix>/<metric>`.
    A generation task's generated metrics are scored where its type says this evaluation
    (`evaluation`: the run's count so far; None: the last) generates, on its sample of rows,
    decoded with `tokenizer`.
    """
    net = accelerator.unwrap_model(model)
    was_training = net.training
    net.eval()
    results: dict[str, float] = {}
    for name, task in tasks.items():
        extra = [s for s in task.splits if s.startswith(f"{split}_")]
        for part in [split, *extra]:
            predictions = predict_split(model, task, accelerator, batch_size, part)
            scores = task.task_type.score(predictions, task.splits[part], task.label_names)
            if task.task_type.generates(evaluation):
                scores |= scored_text(model, task, accelerator, batch_size, tokenizer, part)
                scores = {m: scores[m] for m in task.task_type.metrics if m in scores}  # in order
            key = name + part.removeprefix(split)  # "mnli" or "mnli_mismatched"
            for metric, value in scores.items():
                results[f"{prefix}/{key}/{metric}"] = value
    net.train(was_training)
    return results


def scored_text(model, task, accelerator, batch_size: int, tokenizer, split: str) -> dict:
    """A generation task's generated metrics on its sample of `split`'s rows."""
    if tokenizer is None:
        raise MtlError(
            f"task {task.name!r}: its generated metrics need the tokenizer to read the text; "
            "pass evaluate(..., tokenizer=)"
        )
    data = task.splits[split]
    data = data.select(task.task_type.generation_rows(len(data)))
    texts = generate_split(model, task, accelerator, batch_size, tokenizer, data)
    return task.task_type.score_generated(texts, data["completion"])
