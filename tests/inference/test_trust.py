"""Reading an export or a run folder runs no code a file in it names (`mtl.errors.untrusted`).

Each case is a folder someone else could hand over, crafted as an attacker would (the export's
digests rewritten to match, so that only the trust check stands in the way): `mtl-predict`,
`mtl-export` and `mtl.load_model` refuse it in one line naming what it names and
`trust_custom_code=true`, and the payload's marker is never written. A resume runs the run's own
configuration, so it may import the user's classes, but each `_target_` must be a class of the
kind its slot takes: a function (`os.system`) is refused before it is called.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import mtl
from mtl.artifacts import digests_of
from mtl.cli.export import main as export_main
from mtl.cli.predict import main as predict_main
from mtl.errors import MtlError
from tests.inference.test_artifacts import listing, one_line_error, predict_args

pytest.importorskip("peft")

PAYLOAD = "from pathlib import Path\nPath({marker!r}).write_text('ran')\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, compose_cfg) -> dict[str, Path]:
    """Two tiny runs of synthetic_cls with their config and export: plain, and LoRA on a
    randomly initialised base (its export holds `base/`)."""
    from mtl.cli.job import train as run

    root = tmp_path_factory.mktemp("trust")
    made = {}
    for name, extra in {"plain": [], "lora": ["model.peft=lora"]}.items():
        out = root / name
        cfg = compose_cfg("debug=fast", "task=[synthetic_cls]", f"output_dir={out}", *extra)
        with contextlib.redirect_stderr(io.StringIO()):
            run(cfg)
        (out / ".hydra").mkdir()
        OmegaConf.save(cfg, out / ".hydra" / "config.yaml")
        made[name] = out
    return made


def crafted_export(source: Path, out: Path, edit) -> Path:
    """A copy of `source` edited by `edit(folder, meta)`, its digests rewritten to match."""
    shutil.copytree(source, out)
    meta = json.loads((out / "mtl_tasks.json").read_text())
    edit(out, meta)
    meta["digests"] = digests_of(out)
    (out / "mtl_tasks.json").write_text(json.dumps(meta))
    return out


def _remote_code_base(folder: Path, meta: dict, marker: Path, auto_map: bool = True) -> None:
    """base/config.json maps AutoConfig/AutoModel to a module in base/, asked to be trusted."""
    (folder / "base" / "evil.py").write_text(PAYLOAD.format(marker=str(marker)))
    config = json.loads((folder / "base" / "config.json").read_text())
    if auto_map:
        config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}
    (folder / "base" / "config.json").write_text(json.dumps(config))
    meta["peft"]["base_config"]["config"]["trust_remote_code"] = True


def _edit_json(name: str, **values):
    def edit(folder: Path, meta: dict, module: str) -> None:
        path = folder / name
        data = json.loads(path.read_text())
        data.update(json.loads(json.dumps(values).replace("{module}", module)))
        path.write_text(json.dumps(data))

    return edit


EXPORT_CASES = {
    "peft base maps to code and asks for remote code": (
        "lora",
        lambda folder, meta, module, marker: _remote_code_base(folder, meta, marker),
        "base/config.json's auto_map",
    ),
    "peft base asks for remote code": (
        "lora",
        lambda folder, meta, module, marker: _remote_code_base(folder, meta, marker, False),
        "model.config.trust_remote_code=true",
    ),
    "peft family names a module": (
        "lora",
        lambda folder, meta, module, marker: meta["peft"]["base_config"].update(
            {"family": f"{module}.Adapter"}
        ),
        "model.family='{module}.Adapter'",
    ),
    "config.json names a family module": (
        "plain",
        lambda folder, meta, module, marker: _edit_json(
            "config.json", mtl_family="{module}.Adapter"
        )(folder, meta, module),
        "model.family='{module}.Adapter'",
    ),
    "config.json has an auto_map": (
        "plain",
        lambda folder, meta, module, marker: (
            (folder / "evil.py").write_text(PAYLOAD.format(marker=str(marker))),
            _edit_json("config.json", auto_map={"AutoModel": "evil.EvilModel"})(
                folder, meta, module
            ),
        ),
        "config.json's auto_map",
    ),
}


@pytest.mark.parametrize("case", list(EXPORT_CASES))
def test_an_export_naming_code_is_refused_in_one_line(runs, tmp_path, user_module, capsys, case):
    module, marker = user_module
    run, edit, named = EXPORT_CASES[case]

    def apply(folder, meta):
        edit(folder, meta, module, marker)

    export = crafted_export(runs[run] / "export", tmp_path / "export", apply)
    with pytest.raises(MtlError) as err:
        mtl.load_model(export)
    message = str(err.value)
    assert message.startswith(f"model={export} names code that mtl would run ("), message
    assert named.format(module=module) in message and "trust_custom_code=true" in message
    assert "\n" not in message and not marker.exists() and module not in sys.modules
    args = predict_args(export, tmp_path)
    err = one_line_error(capsys, lambda: predict_main(args))
    assert "trust_custom_code=true" in err and not marker.exists()
    assert not (tmp_path / "o.jsonl").exists()


RUN_CASES = {
    "peft config is os.system": (
        {"model": {"peft": {"_target_": "os.system", "command": "touch {marker}"}}},
        "model.peft._target_='os.system'",
    ),
    "family names a module": (
        {"model": {"family": "{module}.Adapter"}},
        "model.family='{module}.Adapter'",
    ),
    "asks for remote code": (
        {"model": {"config": {"trust_remote_code": True}}},
        "model.config.trust_remote_code=true",
    ),
}


def _run_with(runs, tmp_path: Path, edit: dict, module: str, marker: Path) -> Path:
    run = shutil.copytree(runs["plain"], tmp_path / "run", ignore=shutil.ignore_patterns("export"))
    cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
    text = json.dumps(edit).replace("{module}", module).replace("{marker}", str(marker))
    OmegaConf.save(OmegaConf.merge(cfg, json.loads(text)), run / ".hydra" / "config.yaml")
    return run


@pytest.mark.parametrize("case", list(RUN_CASES))
def test_a_run_folder_naming_code_is_refused_in_one_line(runs, tmp_path, user_module, capsys, case):
    module, marker = user_module
    edit, named = RUN_CASES[case]
    run = _run_with(runs, tmp_path, edit, module, marker)
    named = named.format(module=module)
    with pytest.raises(MtlError) as err:
        mtl.load_model(run)
    assert str(err.value).startswith(f"model={run} names code that mtl would run ({named})")
    before = listing(tmp_path)
    err = one_line_error(capsys, lambda: export_main([str(run), str(tmp_path / "out")]))
    assert named in err and "trust_custom_code=true" in err
    args = predict_args(run, tmp_path)
    err = one_line_error(capsys, lambda: predict_main(args))
    assert named in err
    assert listing(tmp_path) == {**before, "in.jsonl": (tmp_path / "in.jsonl").read_bytes()}
    assert not marker.exists() and module not in sys.modules


def test_trusted_a_function_in_a_class_slot_is_still_refused(runs, tmp_path, user_module):
    module, marker = user_module
    edit = RUN_CASES["peft config is os.system"][0]
    run = _run_with(runs, tmp_path, edit, module, marker)
    with pytest.raises(MtlError) as err:
        mtl.load_model(run, trust_custom_code=True)
    assert str(err.value) == (
        "model.peft._target_='os.system' is a function, not a subclass of "
        "peft.config.PeftConfig; name a class of that kind"
    )
    assert not marker.exists()


def _adapter_config(**values):
    def edit(folder: Path, meta: dict) -> None:
        path = folder / "adapter" / "adapter_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **values}))

    return edit


def _pickle_weights(folder: Path, meta: dict) -> None:
    import pickle

    (folder / "base" / "model.safetensors").write_bytes(pickle.dumps({"weights": [1, 2, 3]}))


DAMAGED = {
    "lora_alpha x50": (_adapter_config(lora_alpha=800), "adapter/adapter_config.json is not the"),
    "peft_type unknown": (_adapter_config(peft_type="NOPE"), "adapter/adapter_config.json is not"),
    "a pickle for the base's weights": (_pickle_weights, "base/model.safetensors is not the file"),
}


@pytest.mark.parametrize("case", list(DAMAGED))
def test_an_edited_export_file_is_named_and_blamed_on_itself(runs, tmp_path, case):
    """Edited after the export: its digest names it. Edited by one who rewrote the digests as
    well: the file is still named by what reading it says, never blamed on another."""
    edit, says = DAMAGED[case]
    export = shutil.copytree(runs["lora"] / "export", tmp_path / "export")
    meta = json.loads((export / "mtl_tasks.json").read_text())
    edit(export, meta)
    with pytest.raises(MtlError) as err:
        mtl.load_model(export)
    assert says in str(err.value) and "export the run again" in str(err.value)
    if case == "lora_alpha x50":
        return  # whole and consistent with digests rewritten: a crafted export is another model
    redigested = crafted_export(runs["lora"] / "export", tmp_path / "crafted", edit)
    with pytest.raises(MtlError) as err:
        mtl.load_model(redigested)
    message = str(err.value)
    assert "\n" not in message
    if case == "a pickle for the base's weights":
        assert message.startswith(f"{redigested}/base/model.safetensors is damaged")
    else:
        assert message.startswith(f"model={redigested}: an adapter cannot be put on its base")
