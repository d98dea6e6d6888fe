"""`mtl-dry-run <loader> <task>=<batches> ... [loader.<key>=<value> ...] [epochs=1]`: what each
epoch of a composite loader does, from the task sizes alone (`mtl.loaders.dry_run`).

A loader's options are written as in training, `loader.weighting=temperature`; any other
`key=value` but `epochs=` is a task's size, so a task cannot be called `epochs`.

`mtl-dry-run [loader=]<loader> "task=[a,b]" [any training override ...] [epochs=1]`: the same
over a task set as training composes it (`task_set_sizes`): its tasks' data read, split and
batched by the configured sampler, so each task's batches per pass are the run's own."""

from __future__ import annotations

import inspect
import sys
from typing import Any

from mtl.cli.script import Command, Option, Positional, count, one_line_errors
from mtl.errors import MtlError, did_you_mean

COMMAND = Command(
    prog="mtl-dry-run",
    summary="What each epoch of a composite loader does, from the task sizes alone (no data, "
    "no model): its steps, and per task its batches, share of batches and passes over its data.",
    positionals=(
        Positional("loader", "one of mtl's loaders: sequential | round_robin | random | mixup"),
    ),
    arguments="a loader, then each task's size as <task>=<batches> (topic=49)",
    free=(
        (
            "<task>=<batches> ...",
            "each task's batches per pass (examples / batch size, rounded up)",
        ),
        (
            "[loader.<key>=<value> ...]",
            "an option of the loader, as in training "
            "(loader.weighting=uniform); its values are read as training reads them "
            "(Hydra's override grammar: 1e-9 is a number)",
        ),
        (
            '"task=[a,b]" [<override> ...]',
            "instead of the sizes: a task set as training composes it (any training override, "
            "loader=<loader> for the positional); its data are read and batched as a run's",
        ),
    ),
    options=(Option("epochs", "1", "how many epochs to print", 1, count),),
)


def sizes_and_options(pairs: dict[str, str], loader: type) -> tuple[dict[str, int], dict]:
    """The task sizes and the loader options (values read as training's command line reads
    them, `override_value`) of the `key=value` pairs."""
    from mtl.config.checks import check_arguments, parameters  # see main

    sizes, options = {}, {}
    for key, value in pairs.items():
        if key.startswith("loader."):
            options[key.removeprefix("loader.")] = override_value(key, value)
        elif "." in key:
            known = ["epochs", *(f"loader.{name}" for name in parameters(loader)[0])]
            raise MtlError(
                f"unknown option {key}={value!r}; {did_you_mean(key, known)}a loader's options "
                "are loader.<key>=<value>"
            )
        elif not value.isdigit():
            if key in parameters(loader)[0]:
                raise MtlError(
                    f"{key}={value}: a loader option is written loader.{key}={value} (a task's "
                    "size is <task>=<batches>)"
                )
            raise MtlError(f"task {key!r}: size {value!r}; give its number of batches (an int)")
        else:
            sizes[key] = int(value)
    if not sizes:
        raise MtlError(f"give each task's size as <task>=<batches>; usage: {COMMAND.usage()}")
    check_arguments(options, loader, "loader")
    return sizes, options


def override_value(key: str, value: str) -> Any:
    """`value` as `key=value` on training's command line gives it (Hydra's override grammar,
    then OmegaConf's: `1e-9` a float, `{a: 1}` a mapping), or one line saying it cannot be read."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    try:
        parsed = OverridesParser.create().parse_override(f"{key}={value}").value()
    except HydraException as err:
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise MtlError(
            f"{key}={value}: cannot be read ({detail}); quote it as in training"
        ) from None
    if isinstance(parsed, (dict, list)):
        return OmegaConf.to_container(OmegaConf.create(parsed), resolve=True)
    return parsed


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if any(a.startswith(("task=", "+task=")) for a in argv) and "--help" not in argv:
        from mtl.cli.task_set import print_task_set  # once the arguments are read: see below

        return print_task_set(argv)  # a task set, as training composes it
    args: dict[str, Any] = COMMAND.parse(argv)
    # Imported once the arguments are read: `--help` and argument errors need none of it, and
    # it takes seconds to import (torch).
    from mtl.loaders.dry_run import dry_run, loader_class

    loader = loader_class(args["loader"])
    sizes, options = sizes_and_options(args["free"], loader)
    if "epochs" in inspect.signature(loader).parameters:
        options.setdefault("epochs", args["epochs"])  # mixtures that move over the run
    for epoch in range(args["epochs"]):
        try:
            print(dry_run(args["loader"], sizes, epoch=epoch, **options))
        except TypeError as err:  # a value of the wrong type for the loader's constructor
            fix = "check the loader.<key> values"
            raise MtlError(f"loader {args['loader']!r}: {err}; {fix}") from None


if __name__ == "__main__":
    main()
