"""`mtl-train` and `python train.py`: `--help` answers from the config folders' listing at once;
anything else trains (`mtl.cli.train`, which imports the training stack: seconds).

Hydra's own help composes the whole config first (the structured configs import torch and
transformers); this one lists each config group's options, mtl's and those of the folders
`--config-dir` / `-cd` names, and how to see the composed config (`--cfg job`) or Hydra's own
flags (`--hydra-help`)."""

from __future__ import annotations

import sys
from pathlib import Path

from mtl.artifacts import config_dir
from mtl.cli.script import WIDTH, one_line_errors

GROUPS = ("task", "loader", "sampler", "balancer", "model", "trainer", "logger")
GROUPS += ("experiment", "debug", "hparams_search")


def train() -> None:
    """The console script: the help below for `--help` / `-h`, else a training."""
    argv = sys.argv[1:]
    if "--help" in argv or "-h" in argv:
        with one_line_errors:  # `mtl-train --help | head`: a reader that leaves early
            print(help_text(user_folders(argv)))
        return
    from mtl.cli.train import train as run  # the training stack: not for --help

    run()


def user_folders(argv: list[str]) -> list[Path]:
    """The config folders `--config-dir DIR` / `-cd DIR` (or `--config-dir=DIR`) name."""
    folders = []
    for i, arg in enumerate(argv):
        if arg in ("--config-dir", "-cd") and i + 1 < len(argv):
            folders.append(Path(argv[i + 1]))
        elif arg.startswith("--config-dir="):
            folders.append(Path(arg.split("=", 1)[1]))
    return [folder for folder in folders if folder.is_dir()]


def options(folders: list[Path], group: str) -> list[str]:
    """A group's options in `folders` (those in its sub-folders as `sub/name`), sorted."""
    return sorted(
        {
            path.relative_to(folder / group).with_suffix("").as_posix()
            for folder in folders
            for path in (folder / group).rglob("*.yaml")
        }
    )


def help_text(extra: list[Path]) -> str:
    folders = [config_dir(), *extra]
    lines = [
        "usage: mtl-train [--config-dir DIR] [-m] [group=option ...] [key=value ...]",
        "",
        "Train one shared encoder with a head per task; Hydra composes the config from the",
        "groups below (task=[a,b] picks several tasks) and any key=value override",
        "(trainer.lr=3e-4, loader.weighting=temperature; +key=value adds a key).",
        "",
        "config groups (group=option):",
    ]
    for group in GROUPS:
        names = options(folders, group)
        text = f"  {group}: {', '.join(names)}"
        while len(text) > WIDTH:  # wrapped under the group's name
            cut = text.rfind(", ", 0, WIDTH) + 1
            lines.append(text[:cut])
            text = " " * (len(group) + 4) + text[cut:].lstrip()
        lines.append(text)
    lines += [
        "",
        "  --config-dir DIR   a folder of config groups of your own beside mtl's (conf/task/...)",
        "  -m, --multirun     a sweep: comma-separated values (loader=random,mixup seed=0,1)",
        "  --cfg job          print the composed config and exit",
        "  --hydra-help       Hydra's own flags",
        "",
        "trainer.resume=<run folder> continues a stopped run; the README says what each choice",
        "does (docs/extending.md: adding your own task type, loader, sampler or balancer).",
    ]
    return "\n".join(lines)
