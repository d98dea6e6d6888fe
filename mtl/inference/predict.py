"""A trained model's predictions for the rows of a file (`predict_file`, the command
`mtl-predict`: `mtl.cli.predict`), for rows in memory (`predict_rows`, `predict_task`) and for
a run's test splits without labels (`predict_unlabeled`).

    mtl-predict model=<run or export folder> task=<name or [a,b]> input=<file or -> \\
        output=<file or -> [batch_size=32] [overwrite=false] [trust_custom_code=false] \\
        [max_new_tokens=<the task's>]

Input is any file training reads (`mtl.data.sources.FORMATS`: jsonl, json, csv, tsv, parquet,
txt, optionally compressed); output is jsonl (`.jsonl`/`.json`), csv or tsv by extension; `-`
is jsonl on stdin/stdout. The output is written whole or not at all, and an existing file only
with `overwrite=true` (`mtl.artifacts`). A model whose task types or heads are not mtl's own
loads only with `trust_custom_code=true` (`mtl.inference.trust`). Each output row is the input
row (its fields kept, in input order) plus `prediction` and `score` (with several tasks
`<task>.prediction` and `<task>.score`): see the task types' `readable`; a generation task's
`prediction` is the text its decoder writes greedily after the row's prompt (at most
`max_new_tokens` tokens, default the task's). Rows are batched by
length (fewer pad tokens), the order restored.
Bad input is one line `mtl: error: ...` (status 2) and writes no output file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from mtl.artifacts import RunLayout, check_target, is_export
from mtl.batching import to_device
from mtl.errors import MtlError
from mtl.inference.export import LoadedModel, TaskInfo, load_model, run_folder
from mtl.inference.rows import cell, output_kind, read_rows, render, write_output
from mtl.models.decoding import greedy

CHUNK = 1000  # source rows encoded at a time


# -- prediction -----------------------------------------------------------------------------------


def predict_task(
    loaded,
    name: str,
    rows: list[dict],
    *,
    batch_size: int = 32,
    sort: bool = True,
    device=None,
    from_csv: bool = False,
    progress: bool = False,
    max_new_tokens: int | None = None,
) -> list[dict]:
    """{"prediction", ("score")} of every row for task `name`, in row order (a generation
    task's: {"prediction": the text written, at most `max_new_tokens` tokens, default the
    task's}).

    `sort`: batches of rows of similar length (longest first), else in input order."""
    if name not in loaded.tasks:
        raise MtlError(
            f"task={name}: the model was not trained on it; choose from {', '.join(loaded.tasks)}"
        )
    info = loaded.tasks[name]
    columns = info.task_type.input_columns()
    for number, row in enumerate(rows, 1):
        missing = [c for c in columns if c not in row]
        if missing:
            raise MtlError(
                f"task={name}: input row {number} has no column {missing[0]!r}; the task reads "
                f"{', '.join(columns)}"
            )
    if not rows:
        return []
    encoded = _encode(loaded, name, rows, from_csv)
    lengths = np.asarray(encoded["length"])
    order = np.argsort(-lengths, kind="stable") if sort else np.arange(len(lengths))
    batches = [order[i : i + batch_size].tolist() for i in range(0, len(order), batch_size)]
    if info.task_type.writes_text:
        outputs = _written(loaded, name, encoded, batches, device, progress, max_new_tokens)
    else:
        outputs = _model_outputs(loaded, name, encoded, batches, device, progress)
    windows: dict[int, list[int]] = {}  # source row -> its model rows
    for index, example in enumerate(encoded["example_id"]):
        windows.setdefault(example, []).append(index)
    keys = list(encoded)
    results = []
    for number, row in enumerate(rows):
        model_rows = windows.get(number, [])
        results.append(
            info.task_type.readable(
                [outputs[i] for i in model_rows],
                info.label_names,
                {c: cell(row[c]) if from_csv else row[c] for c in row},
                [{k: encoded[k][i] for k in keys} for i in model_rows],
            )
        )
    return results


def _encode(loaded, name: str, rows: list[dict], from_csv: bool) -> dict[str, list]:
    """The model rows (columns -> values) of `rows` for task `name`, encoded `CHUNK` at a time;
    `example_id` is each model row's source row."""
    info = loaded.tasks[name]
    columns = info.task_type.input_columns()
    where = f"task {name!r}, input"
    encoded: dict[str, list] = {}
    for start in range(0, len(rows), CHUNK):
        part = rows[start : start + CHUNK]
        values = {c: [cell(r[c]) if from_csv else r[c] for r in part] for c in columns}
        out = info.task_type.encode_inputs(values, loaded.tokenizer, info.label_names, where)
        ids = out.get("example_id", range(len(part)))
        out["example_id"] = [start + int(i) for i in ids]
        for key, value in out.items():
            encoded.setdefault(key, []).extend(value)
    return encoded


def _model_outputs(
    loaded, name: str, encoded: dict[str, list], batches: list[list[int]], device, progress: bool
) -> list[Any]:
    """The task type's output for every model row, run through the model in `batches`."""
    import torch
    from datasets import Dataset

    task_type = loaded.tasks[name].task_type
    data = task_type.dataset(Dataset.from_dict(encoded))
    collate = task_type.collator(loaded.tokenizer.pad_token_id)
    device = device or next(loaded.model.parameters()).device
    outputs: list[Any] = [None] * len(encoded["length"])
    with torch.inference_mode():
        for indices in _progress(batches, len(outputs), name, progress):
            batch = to_device(collate(data.__getitems__(indices)), device)
            batch["task"] = name
            logits = loaded.model.logits(batch)[name]
            for index, value in zip(indices, task_type.outputs(logits, batch), strict=True):
                outputs[index] = value
    return outputs


def _progress(batches: list[list[int]], rows: int, name: str, shown: bool):
    """The batches, with a progress bar of their rows on stderr where `shown`."""
    if not shown:
        yield from batches
        return
    from tqdm import tqdm

    with tqdm(total=rows, desc=f"predict {name}", unit="row", file=sys.stderr) as bar:
        for indices in batches:
            yield indices
            bar.update(len(indices))


def _written(
    loaded,
    name: str,
    encoded: dict[str, list],
    batches: list[list[int]],
    device,
    progress: bool,
    max_new_tokens: int | None,
) -> list[str]:
    """The text the model writes after every model row's ids (a generation task's prompt),
    greedily (`mtl.models.decoding`), at most `max_new_tokens` (None: the task's)."""
    import torch

    task_type, tokenizer = loaded.tasks[name].task_type, loaded.tokenizer
    end = task_type.end_id(tokenizer, f"task {name!r}")
    device = device or next(loaded.model.parameters()).device
    outputs: list[str] = [""] * len(encoded["length"])
    with torch.inference_mode():
        for indices in _progress(batches, len(outputs), name, progress):
            written = greedy(
                loaded.model,
                name,
                [encoded["input_ids"][i] for i in indices],
                max_new_tokens=max_new_tokens or task_type.config.max_new_tokens,
                end_id=end,
                pad_id=tokenizer.pad_token_id,
                device=device,
            )
            texts = tokenizer.batch_decode(written, skip_special_tokens=True)
            for index, text in zip(indices, texts, strict=True):
                outputs[index] = text
    return outputs


def predict_rows(loaded, tasks: list[str], rows: list[dict], **options) -> list[dict]:
    """The input rows with each task's prediction (and score) added."""
    for name in tasks:
        if name not in loaded.tasks:
            raise MtlError(
                f"task={name}: the model was not trained on it; choose from "
                f"{', '.join(loaded.tasks)}"
            )
    out = [dict(row) for row in rows]
    for name in tasks:
        results = predict_task(loaded, name, rows, **options)
        for row, result in zip(out, results, strict=True):
            for key, value in result.items():
                row[key if len(tasks) == 1 else f"{name}.{key}"] = value
    return out


def predict_unlabeled(model, tokenizer, tasks: dict, run_dir: str | Path) -> list[Path]:
    """`<run>/predictions/<task>.<split>.jsonl` for every split a task holds without labels
    (`Task.inputs`, a test split): each source row with `prediction` (and `score`), as
    mtl-predict writes them. Returns the files written."""
    infos = {
        name: TaskInfo(task.task_type, task.label_names, task.task_type.config)
        for name, task in tasks.items()
    }
    loaded = LoadedModel(model, tokenizer, infos)
    was_training = model.training
    model.eval()
    written = []
    try:
        for name, task in tasks.items():
            for split, rows in task.inputs.items():
                out = predict_rows(loaded, [name], rows.to_list())
                path = Path(run_dir) / "predictions" / f"{name}.{split}.jsonl"
                path.parent.mkdir(parents=True, exist_ok=True)
                write_output(str(path), render(out, "jsonl"), overwrite=True)  # the run's own
                written.append(path)
    finally:
        model.train(was_training)
    return written


def predict_file(
    model: str | Path,
    tasks: list[str],
    input_path: str,
    output_path: str,
    *,
    batch_size: int = 32,
    overwrite: bool = False,
    trust_custom_code: bool = False,
    max_new_tokens: int | None = None,
) -> None:
    """What `mtl-predict` does (`mtl.cli.predict`): the rows of `input_path` (`-`: stdin) with
    the predictions of `tasks` written to `output_path` (`-`: stdout), whole or not at all."""
    import torch

    out_path = output_path
    model = Path(model).expanduser()
    if not model.is_dir():
        raise MtlError(f"model={model}: no such folder; give an mtl run folder or export folder")
    if not is_export(model):
        run_folder(model)  # a one-line error for a folder that is neither
    check = {"overwrite": overwrite, "protect": [model]}
    if out_path != "-":
        check_target(out_path, **check)
        real = Path(out_path).resolve()
        if input_path != "-" and real == Path(input_path).resolve():
            raise MtlError(f"output={out_path} is the input file; give another output path")
        inside = [p for p in real.parents if is_export(p) or p.name == RunLayout.CHECKPOINTS]
        if inside:
            raise MtlError(
                f"output={out_path} is inside {inside[0]}, a model folder; give a path outside it"
            )
    out_kind = output_kind(out_path)
    rows, from_csv = read_rows(input_path)
    if not rows:
        raise MtlError(f"input={input_path} has no rows; give at least one row to predict")
    loaded = load_model(model, trust_custom_code=trust_custom_code)
    for name in tasks:
        if name not in loaded.tasks:
            raise MtlError(
                f"task={name}: the model was not trained on it; choose from "
                f"{', '.join(loaded.tasks)}"
            )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loaded.model.to(device)
    out = predict_rows(
        loaded,
        tasks,
        rows,
        batch_size=batch_size,
        device=device,
        from_csv=from_csv,
        progress=out_path != "-",
        max_new_tokens=max_new_tokens,
    )
    write_output(out_path, render(out, out_kind), **check)
