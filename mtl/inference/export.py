"""Export a trained run as a self-contained model folder, and load it back (`mtl.load_model`).

An export folder holds the encoder and the tokenizer in Hugging Face format (`save_pretrained`),
`heads.safetensors` (every head's weights, keyed `<task>.<parameter>`) and `mtl_tasks.json`
(per task: its `TaskConfig`, label names and the head's constructor arguments). The weights come
from a run folder's best model (else its latest complete checkpoint) or a checkpoint folder;
the tasks and model settings from the run's `.hydra/config.yaml`, each task's label names from
the checkpoint (`mtl_run.json`: as the run trained with them; no data file is read). A run
writes `<run>/export` itself when it ends (`trainer.export`). Reading an export back:
`mtl.inference.load`.

With `standard=true` each task also gets `<export>/<task>/`: a standard transformers model
(`AutoModelFor...`, with its labels) and its tokenizer (`model_max_length` = the task's
`max_length`), for `transformers.pipeline` and any code that reads such folders
(`mtl.inference.export_hf`). Each holds a copy of the encoder, so they are opt-in. A task whose
head has no transformers counterpart (mean pooling, a head of your own, an encoder that is not
BERT-family) gets none, and one line on stderr saying why.

The export is written whole or not at all (`mtl.artifacts`): an existing `out` is replaced only
when it is an earlier export (it holds `mtl_tasks.json`) or with `overwrite=true`; `.`, the run
folder and the folders holding it are refused. Loading reads `mtl_tasks.json` as data: task
types, heads and metrics that are not mtl's own need `trust_custom_code=true`
(`mtl.inference.trust`). The command `mtl-export <run> [out] [key=value ...]` is
`mtl.cli.export`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from mtl.artifacts import (
    HEADS_FILE,
    TASKS_FILE,
    RunLayout,
    check_target,
    digests_of,
    is_export,
    write_folder,
)
from mtl.builders.model import build_model
from mtl.builders.tasks import build_tasks
from mtl.builders.weights import DESCRIPTION, NoCheckpoint, trained_weights
from mtl.config import validate
from mtl.errors import MtlError, untrusted
from mtl.inference.export_hf import standard_model
from mtl.inference.load import (
    FORMAT,
    LoadedModel,
    TaskInfo,
    base_digest,
    load_export,
)
from mtl.inference.trust import check_task
from mtl.models.encoder import DEFAULT_NAMES
from mtl.models.lora import frozen_keys, is_adapted
from mtl.models.multitask import heads_state
from mtl.quiet import quiet_libraries

__all__ = ["HEADS_FILE", "TASKS_FILE", "LoadedModel", "TaskInfo", "is_export", "load_model"]


def run_folder(path: str | Path) -> Path:
    """The run folder of a run or checkpoint folder (the one with `.hydra/config.yaml`)."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise MtlError(f"model={path}: no such folder; give an mtl run folder or export folder")
    run = RunLayout.find(p)
    if run is not None:
        return run.root
    if is_export(p):
        raise MtlError(
            f"model={path} is an export already (it holds {TASKS_FILE}, no .hydra/config.yaml "
            "of a run above it): use it as it is (mtl-predict model=, mtl.load_model), or "
            "export the run it came from"
        )
    raise MtlError(
        f"model={path}: not an mtl run or export folder (no .hydra/config.yaml or "
        f"{TASKS_FILE}); give a run folder, one of its checkpoints, or an mtl-export folder"
    )


def trained_model(path: str | Path, *, trust_custom_code: bool = False):
    """(model with the trained weights, tokenizer, {name: Task}, settings) of a run or checkpoint
    folder. Task types, heads and metrics that are not mtl's own need `trust_custom_code`, as does
    any other code the run's config names (a family, a peft config, a balancer, ...): while the
    folder is read nothing outside mtl's own package is imported (`mtl.errors.untrusted`)."""
    with untrusted(f"model={path}", trust=trust_custom_code):
        return _trained_model(path, trust_custom_code)


def _trained_model(path: str | Path, trust_custom_code: bool):
    from omegaconf import OmegaConf

    run = run_folder(path)
    try:
        state, source = trained_weights(str(path))
    except NoCheckpoint:
        raise MtlError(
            f"model={path}: the run has no saved model (no checkpoints/best and no complete "
            "checkpoint); train it longer or give another run"
        ) from None
    cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
    for name, task in (cfg.get("task") or {}).items():
        check_task(name, OmegaConf.to_container(task), trust=trust_custom_code)
    settings = validate(cfg)
    # the trained weights replace the base model's: build from its config alone (no load report),
    # unless an adapter trained (model.peft): a step checkpoint holds what trained, not the base
    adapted = settings.model.peft is not None
    random_init = settings.model.random_init if adapted else True
    built = dataclasses.replace(settings.model, init_from=None, random_init=random_init)
    # builds the model; the run's own settings are returned (an adapter export names its base)
    build = dataclasses.replace(settings, model=built)
    base = settings.model.tokenizer or settings.model.name_or_path
    if base and base.startswith((".", "/", "~")) and not Path(base).expanduser().exists():
        raise MtlError(
            f"model={path}: the run's base model {base} is gone (moved or deleted), and a run "
            f"folder is read with it; put it back, or use the run's export ({run}/export, "
            f"or mtl-export it where the base is), which holds the encoder whole"
        )
    labels = recorded_labels(source if source.is_dir() else source.parent, set(settings.tasks))
    tasks, tokenizer = build_tasks(build, int(cfg.get("seed", 0) or 0), labels)
    model = build_model(build, tasks)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or set(missing) - frozen_keys(model):
            model.load_state_dict(state)  # raises: which weights miss or do not fit
    except RuntimeError as err:
        raise MtlError(
            f"model={path}: the saved weights do not fit the run's config "
            f"({str(err).splitlines()[0]}); was the config changed after training?"
        ) from None
    model.eval()
    return model, tokenizer, tasks, settings


def recorded_labels(folder: Path, tasks: set[str]) -> dict | None:
    """Each task's label names as the run trained with them (the checkpoint's `mtl_run.json`),
    None where it recorded none (checkpoints of mtl 0.2 and earlier: read from the data)."""
    try:
        labels = json.loads((folder / DESCRIPTION).read_text()).get("labels")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(labels, dict) or set(labels) != tasks:
        return None
    return labels


def export_model(
    run_or_checkpoint: str | Path,
    out_dir: str | Path,
    *,
    standard: bool = False,
    merge: bool = False,
    trust_custom_code: bool = False,
    overwrite: bool = False,
) -> Path:
    """Write the export folder of a run (its best model) or checkpoint folder; returns it.
    `standard`: also a transformers model folder per task; `merge`: a model.peft run's adapters
    merged (`write_export`). The run folder, the
    folders holding it and the checkpoint read are never written; an existing `out_dir` is
    replaced only if it is an earlier export or with `overwrite`."""
    source = Path(run_or_checkpoint).expanduser()
    run = run_folder(source)
    out = Path(out_dir).expanduser()
    if source.resolve() != run.resolve() and source.resolve() in out.resolve().parents:
        raise MtlError(f"out={out_dir} is inside {source}, the checkpoint read; give another path")
    check = {"what": "out", "overwrite": overwrite, "protect": [run]}
    check_target(out, folder=True, ours=is_export, **check)  # before the slow part
    model, tokenizer, tasks, settings = trained_model(source, trust_custom_code=trust_custom_code)
    return write_export(
        model, tokenizer, tasks, settings, out, standard=standard, merge=merge, **check
    )


def write_export(
    model,
    tokenizer,
    tasks: dict,
    settings,
    out_dir: str | Path,
    *,
    standard=False,
    merge=False,
    **check,
):
    """The export folder of an in-memory model (eval mode while writing), whole or not at all
    (`mtl.artifacts.write_folder`: an earlier export there is replaced, anything else only with
    `overwrite=True`; `check`: its keywords).

    With `standard`, each task whose head maps onto a transformers class also gets
    `<out>/<task>/`, that model and its tokenizer (`standard_model`); any other task gets one
    line on stderr saying why and what to use instead. Each such folder holds the encoder once
    more, so they are made only when asked for.

    A model.peft run's export holds its adapters in peft's format (`<out>/adapter/`, or with one
    per task `<out>/adapters/<task>/`: `PeftModel.from_pretrained(base, folder)` loads each)
    and names their base model (`mtl_tasks.json`'s `peft.base_model`; a base that is no model on
    disk or the hub, `model.random_init` or `model.init_from`, is written to `<out>/base/`).
    `merge`: a shared adapter merged into the encoder instead (a plain export, no peft needed to
    load it); adapters per task: each task's `<out>/<task>/` as with `standard`, its adapter
    merged. With adapters, each `standard` folder holds its task's adapter merged."""
    was_training = model.training
    model.eval()
    trained = model
    adapters = is_adapted(model.encoder) and not (merge and not model.per_task_adapters)
    if not adapters:
        model = model.merged()  # a shared adapter merged into a copy (merge=true)
    standard = standard or (merge and adapters)

    def fill(tmp: Path) -> None:
        peft = adapter_files(model, settings.model, tmp) if adapters else None
        meta = _write_multitask(model, tokenizer, tasks, settings.model.head_dropout, tmp, peft)
        for name, task in tasks.items() if standard else ():
            config = task.task_type.config
            source = model.merged(name) if adapters else model
            hf, reason = standard_model(source, name, task.task_type, task.label_names, tokenizer)
            if hf is None:
                print(f"mtl: export: task {name!r}: {reason}", file=sys.stderr)
                continue
            task_tokenizer = copy.deepcopy(tokenizer)
            task_tokenizer.model_max_length = config.max_length  # pipelines truncate alike
            task.task_type.configure_export(hf, task_tokenizer)
            hf.save_pretrained(tmp / name)
            task_tokenizer.save_pretrained(tmp / name)
        meta["digests"] = digests_of(tmp)  # every file written above, checked when read
        (tmp / TASKS_FILE).write_text(json.dumps(meta, indent=1))

    try:
        with quiet_libraries():  # no "Writing model shards" bar once per folder
            return write_folder(out_dir, fill, ours=is_export, **check)
    finally:
        trained.train(was_training)


ADAPTER_README = """# LoRA adapters of an mtl export

The adapters (peft's format) of the export in the folder above, which also holds the task
heads (`heads.safetensors`), the tokenizer and `mtl_tasks.json`, by name (the export's paths):

{listed}

They go on the base model `{base}` (`base`: the export's own `base/` folder); `mtl_tasks.json`
records the digest of its weights, which mtl checks when it loads the export.

The whole model, heads and all, with mtl (from the folder above):

    import mtl
    model = mtl.load_model(".")

An adapter alone, on its base, with peft (from the folder above):

    from peft import PeftModel
    from transformers import AutoModel
    adapted = PeftModel.from_pretrained(AutoModel.from_pretrained("{base}"), "{folder}")
"""


def base_model(m) -> str | None:
    """The base model a model.peft run's adapters go on, as a name or absolute path that loads
    it; None where it is no model on disk or the hub (random weights, or `model.init_from`'s)."""
    if m.random_init or m.init_from:
        return None
    if m.name_or_path in DEFAULT_NAMES:
        return "sentence-transformers/all-MiniLM-L6-v2"  # the packaged MiniLM, read offline
    local = Path(m.name_or_path).expanduser()
    return str(local.resolve()) if local.exists() else m.name_or_path


def adapter_files(model, m, out: Path) -> dict:
    """Write the encoder's adapters in peft's format (and its base when `base_model` is None);
    returns what `mtl_tasks.json` records of them (`peft`)."""
    encoder = model.encoder
    base = base_model(m)
    if base is None:
        copy.deepcopy(encoder).unload().save_pretrained(out / "base")  # the frozen base alone
        base = "base"
    per_task = model.per_task_adapters
    encoder.save_pretrained(out / ("adapters" if per_task else "adapter"))  # peft's layout
    folders = {  # peft's layout: an adapter named `default` in the folder itself
        name: "adapter" if not per_task else "adapters" + ("" if name == "default" else f"/{name}")
        for name in encoder.peft_config
    }
    root = "adapters" if per_task else "adapter"  # peft's README there is an empty template
    listed = "\n".join(f"- `{name}`: `{folder}/`" for name, folder in folders.items())
    first = next(iter(folders.values()))
    text = ADAPTER_README.format(listed=listed, base=base, folder=first)
    (out / root / "README.md").write_text(text)
    return {
        "base_model": base,
        "base_digest": base_digest(encoder),  # what the adapters trained on, checked when read
        "base_config": {"config": dict(m.config), "family": m.family},  # as the run built it
        "per_task": per_task,
        "adapters": folders,
    }


def _write_multitask(
    model, tokenizer, tasks: dict, head_dropout: float, out: Path, peft: dict | None = None
) -> dict:
    """Write the encoder (or, with `peft`, nothing more of it), the tokenizer and the heads'
    weights into `out`; returns what `mtl_tasks.json` says of them, without its digests (the
    caller writes it once every file is there)."""
    from safetensors.torch import save_file

    if peft is None:
        model.encoder.save_pretrained(out)
    tokenizer.save_pretrained(out)
    heads = {
        key: value.detach().cpu().contiguous()
        for key, value in heads_state(model.state_dict()).items()
    }
    save_file(heads, out / HEADS_FILE)
    hidden = model.encoder.config.hidden_size
    return {
        "format": FORMAT,
        **({"peft": peft} if peft else {}),
        "tasks": {
            name: {
                "config": dataclasses.asdict(task.task_type.config),
                "label_names": task.label_names,
                "head": {
                    "class": f"{type(model.heads[name]).__module__}."
                    f"{type(model.heads[name]).__qualname__}",
                    "hidden_size": hidden,
                    "num_labels": task.num_labels,
                    "dropout": head_dropout,
                },
            }
            for name, task in tasks.items()
        },
    }


def load_model(path: str | Path, *, trust_custom_code: bool = False) -> LoadedModel:
    """A trained model from an export folder, or from a run / checkpoint folder (exported to a
    temporary folder first). Returns `.model` (a `MultiTaskModel` in eval mode), `.tokenizer`
    and `.tasks` ({name: TaskInfo(task_type, label_names, config)}).

    Loading builds only mtl's own task types, heads and metrics; one of your own (named in the
    export) needs `trust_custom_code=True`, as it imports and runs that code."""
    p = Path(path).expanduser()
    if is_export(p):
        return load_export(p, trust_custom_code=trust_custom_code)
    run_folder(p)  # a one-line error for a folder that is neither
    with tempfile.TemporaryDirectory(prefix="mtl-export-") as tmp:
        out = Path(tmp) / "export"
        export_model(p, out, trust_custom_code=trust_custom_code)
        return load_export(out, trust_custom_code=True)  # checked above; read into memory
