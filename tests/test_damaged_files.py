"""Damaged and unusual files, each met as a user meets it: a checkpoint cut short, an export whose
weights are damaged, a model folder without weights, a tokenizer without its vocabulary, an
output folder the user cannot write, torch's compile cache with a half-written library. Each
command ends with status 2 and one line `mtl: error: ...` naming the file and what to do, no
traceback, and writes or changes nothing (or, where the run can go on correctly, one warning
line). What mtl writes gets the modes of the user's umask."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mtl.artifacts import RunLayout
from mtl.cli.export import main as export_main
from mtl.cli.predict import main as predict_main
from mtl.training.setup.compile_cache import repair_cache, whole_library
from tests.conftest import compose_config, resealed

ROOT = Path(__file__).resolve().parents[1]
FAST = ("debug=fast", "task=[synthetic_cls]", "logger=none")


@pytest.fixture(scope="module")
def made_run(tmp_path_factory) -> Path:
    """A tiny run of synthetic_cls (its best model, one step checkpoint, its export)."""
    from mtl.cli.job import train as run

    out = tmp_path_factory.mktemp("damaged") / "run"
    cfg = compose_config(*FAST, f"output_dir={out}")
    run(cfg)
    (out / ".hydra").mkdir()
    OmegaConf.save(cfg, out / ".hydra" / "config.yaml")
    return out


@pytest.fixture
def work(made_run, tmp_path, monkeypatch) -> Path:
    """A copy of the run in a folder of its own (the current folder), with rows to predict."""
    shutil.copytree(made_run, tmp_path / "run", symlinks=True)
    (tmp_path / "rows.jsonl").write_text('{"text": "good fine"}\n{"text": "bad poor"}\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path


def listing(folder: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every path under `folder`: its content (None for folders) and mode."""
    return {
        p.relative_to(folder).as_posix(): (
            p.read_bytes() if p.is_file() else None,
            p.stat().st_mode,
        )
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture
def train_ok(train_here):
    """`train_ok(*args)`: `train_here(*args)` (conftest), a run that goes through; its stderr."""

    def call(*args: str) -> str:
        status, err = train_here(*args)
        assert status == 0, err[-2000:]
        return err

    return call


def one_error_line(status, err: str) -> str:
    assert status == 2, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("mtl: error: "), err
    return lines[0].removeprefix("mtl: error: ")


def command(capsys, main, *args: str) -> tuple[int, str]:
    """`main(args)` (a console script's entry point) in this process: (status, stderr)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(list(args))
    return stop.value.code, capsys.readouterr().err


def cut(path: Path) -> None:
    """Cut a file short, at half its size."""
    os.truncate(path, path.stat().st_size // 2)


# -- checkpoints and exports ----------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["export", "predict"])
def test_a_best_model_cut_short_is_named_with_the_checkpoint_to_use(work, capsys, tool):
    cut(work / "run" / "checkpoints" / "best" / "model.safetensors")
    before = listing(work)
    if tool == "export":
        result = command(capsys, export_main, "run", "out")
    else:
        result = command(
            capsys, predict_main, "model=run", "task=synthetic_cls", "input=rows.jsonl",
            "output=out.jsonl",
        )  # fmt: skip
    line = one_error_line(*result)
    assert line.startswith("run/checkpoints/best is damaged (model.safetensors has "), line
    assert "give another whole checkpoint of the run instead (run/checkpoints/step_0000004)" in line
    assert listing(work) == before


def test_a_best_model_saved_as_a_torch_file_by_older_runs_still_exports(work, capsys):
    """Older runs kept `checkpoints/best/model.pt`; their export holds the same weights."""
    import json

    import torch
    from safetensors.torch import load_file

    best = work / "run" / "checkpoints" / "best"
    weights = load_file(best / "model.safetensors")
    torch.save(weights, best / "model.pt")
    (best / "model.safetensors").unlink()
    marker = json.loads((best / "mtl_checkpoint.json").read_text())
    marker["files"].pop("model.safetensors")
    marker["files"]["model.pt"] = (best / "model.pt").stat().st_size
    del marker["sha256"]  # older runs recorded sizes only
    (best / "mtl_checkpoint.json").write_text(json.dumps(marker))
    export_main(["run", "out"])
    heads = load_file(work / "out" / "heads.safetensors")
    assert heads and all(torch.equal(v, weights[f"heads.{k}"]) for k, v in heads.items())


def test_a_weights_file_that_matches_its_marker_but_is_not_one_is_named(work, capsys):
    """Bytes overwritten in place (the size the marker records kept): safetensors' reader."""
    best = work / "run" / "checkpoints" / "best" / "model.safetensors"
    size = best.stat().st_size
    best.write_bytes(b"\0" * size)
    line = one_error_line(*command(capsys, export_main, "run", "out"))
    assert line.startswith("run/checkpoints/best/model.safetensors is not the file the checkpoint")
    assert "step_0000004" in line
    resealed(best.parent)  # the marker rewritten to match: safetensors' reader says it
    line = one_error_line(*command(capsys, export_main, "run", "out"))
    prefix = "run/checkpoints/best/model.safetensors is damaged (cut short or overwritten?"
    assert line.startswith(prefix), line
    assert "step_0000004" in line
    assert not (work / "out").exists()


def test_a_step_checkpoint_cut_short_is_named_and_the_best_model_offered(work, capsys):
    step = RunLayout(work / "run").step(4)
    cut(step / "model.safetensors")
    before = listing(work)
    line = one_error_line(*command(capsys, export_main, str(step.relative_to(work)), "out"))
    assert line.startswith("run/checkpoints/step_0000004 is damaged (model.safetensors has "), line
    assert "instead (run/checkpoints/best)" in line
    assert listing(work) == before


def test_a_run_whose_only_checkpoint_is_cut_short_says_train_again(work, capsys):
    shutil.rmtree(work / "run" / "checkpoints" / "best")
    cut(RunLayout(work / "run").step(4) / "model.safetensors")
    line = one_error_line(*command(capsys, export_main, "run", "out"))
    assert "step_0000004 is damaged" in line and "no other whole checkpoint; train again" in line


@pytest.mark.parametrize("damage", ["cut short", "overwritten", "other values"])
@pytest.mark.parametrize("name", ["heads.safetensors", "model.safetensors"])
def test_an_export_with_damaged_weights_says_export_again(work, capsys, damage, name):
    """Cut short, bytes overwritten, or other values of the same tensors at the same size (a
    valid file that mtl-predict would have predicted with): the sha256 the export recorded."""
    from safetensors.torch import load_file, save_file

    weights = work / "run" / "export" / name
    if damage == "cut short":
        cut(weights)
    elif damage == "overwritten":
        with open(weights, "r+b") as f:
            f.seek(2)
            f.write(b"garbage!" * 4)
    else:
        size = weights.stat().st_size
        tensors = {k: v + 1 if v.is_floating_point() else v for k, v in load_file(weights).items()}
        save_file(
            tensors, weights, metadata={"format": "pt"} if name == "model.safetensors" else None
        )
        assert weights.stat().st_size == size
    before = listing(work)
    line = one_error_line(
        *command(
            capsys,
            predict_main,
            "model=run/export",
            "task=synthetic_cls",
            "input=rows.jsonl",
            "output=out.jsonl",
        )  # fmt: skip
    )
    assert line.startswith(f"run/export/{name} is not the file the export wrote"), line
    assert line.endswith("export the run again")
    assert listing(work) == before


def test_mtl_export_of_an_export_says_what_it_is(work, capsys):
    shutil.copytree(work / "run" / "export", work / "edited")
    line = one_error_line(*command(capsys, export_main, "edited", "out"))
    assert "model=edited is an export already (it holds mtl_tasks.json" in line
    assert "mtl-predict model=" in line
    assert not (work / "out").exists()


# -- model folders and tokenizers -----------------------------------------------------------------


@pytest.fixture
def model_folder(tmp_path_factory) -> Path:
    from mtl.models.tiny import save_tiny_model

    return save_tiny_model("bert", tmp_path_factory.mktemp("model") / "tiny")


def test_a_model_folder_without_weights_says_what_to_copy(work, model_folder, train_here):
    (model_folder / "model.safetensors").unlink()
    line = one_error_line(
        *train_here(*FAST, f"model.name_or_path={model_folder}", "model.random_init=false")
    )
    assert f"model.name_or_path={model_folder}: the folder has a config.json but no weights" in line
    assert "model.random_init=true" in line
    assert not (work / "outputs").exists()


def test_a_model_folder_with_weights_cut_short_names_the_file(work, model_folder, train_here):
    cut(model_folder / "model.safetensors")
    line = one_error_line(
        *train_here(*FAST, f"model.name_or_path={model_folder}", "model.random_init=false")
    )
    assert line.startswith(f"{model_folder}/model.safetensors is damaged"), line
    assert not (work / "outputs").exists()


def test_a_tokenizer_without_its_vocabulary_is_refused(work, model_folder, train_here):
    (model_folder / "tokenizer.json").unlink()
    (model_folder / "vocab.txt").unlink(missing_ok=True)
    line = one_error_line(*train_here(*FAST, f"model.tokenizer={model_folder}"))
    assert f"tokenizer '{model_folder}' has no vocabulary (its 5 tokens are its special" in line
    assert not (work / "outputs").exists()


def test_a_tokenizer_file_cut_short_names_it(work, model_folder, train_here):
    cut(model_folder / "tokenizer.json")
    line = one_error_line(*train_here(*FAST, f"model.tokenizer={model_folder}"))
    assert f"{model_folder}/tokenizer.json is damaged" in line
    assert not (work / "outputs").exists()


def test_fp16_on_a_cpu_says_it_trains_in_fp32(work, train_ok):
    err = train_ok(*FAST, "trainer.mixed_precision=fp16", "hydra.run.dir=out")
    assert (work / "out" / "results.json").is_file()
    warnings = [line for line in err.splitlines() if "mixed_precision" in line]
    assert warnings == [
        "mtl: trainer.mixed_precision=fp16 needs a GPU; on cpu this run trains in fp32 (give "
        "trainer.mixed_precision=bf16 for mixed precision here, or no)"
    ]
    assert "mixed_precision" not in train_ok(
        *FAST, "trainer.mixed_precision=bf16", "hydra.run.dir=b"
    )


# -- an output folder the user cannot write -------------------------------------------------------


def unprivileged_prefix(folder: Path) -> list[str] | None:
    """A command prefix that runs a command as a user who cannot write `folder` (already so
    when not root; else the user nobody, or root without its power over file modes), None
    when this machine has neither."""
    if os.geteuid() != 0:
        return []
    probe = [sys.executable, "-c", f"import mtl, os; os.listdir({str(folder)!r})"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for prefix in (
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"],
        ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search"],
    ):
        if shutil.which(prefix[0]) is None:
            continue
        done = subprocess.run(prefix + probe, env=env, capture_output=True, cwd=folder)
        if done.returncode == 0:
            return prefix
    return None


@pytest.mark.slow  # mtl-predict as another user: its own process
def test_predict_into_a_folder_the_user_cannot_write_stops_before_the_work(work):
    locked = work / "locked"
    locked.mkdir()
    for path in [work, *work.rglob("*")]:  # readable by every user: the test may run as nobody
        path.chmod(path.stat().st_mode | stat.S_IROTH | (stat.S_IXOTH if path.is_dir() else 0))
    locked.chmod(0o555)
    prefix = unprivileged_prefix(work)
    if prefix is None:
        pytest.skip("no unprivileged user here (not root without setpriv, nor user nobody)")
    before = listing(work)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HOME": str(work)}
    args = ["model=run", "task=synthetic_cls", "input=rows.jsonl", "output=locked/out.jsonl"]
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "mtl.cli.predict", *args],
        env=env, capture_output=True, text=True, cwd=work, timeout=300,
    )  # fmt: skip
    line = one_error_line(done.returncode, done.stderr)
    assert line == (
        f"output=locked/out.jsonl: cannot write in {locked} (permission denied); give a folder "
        "you can write"
    )
    assert listing(work) == before


# -- modes of what mtl writes ---------------------------------------------------------------------


def modes(folder: Path) -> dict[str, int]:
    return {
        p.relative_to(folder).as_posix(): stat.S_IMODE(p.stat().st_mode)
        for p in [folder, *folder.rglob("*")]
    }


@pytest.mark.parametrize("mask", [0o022, pytest.param(0o027, marks=pytest.mark.slow)])
def test_what_mtl_writes_has_the_modes_of_the_umask(work, train_ok, mask):
    from mtl.reporting.figures import report

    old = os.umask(mask)
    try:
        train_ok(*FAST, "hydra.run.dir=fresh")
        export_main(["run", "exported"])
        predict_main(
            ["model=run/export", "task=synthetic_cls", "input=rows.jsonl", "output=p.jsonl"]
        )
        written = {
            "fresh/checkpoints": modes(work / "fresh" / "checkpoints"),
            "fresh/export": modes(work / "fresh" / "export"),
            "exported": modes(work / "exported"),
            "p.jsonl": {"p.jsonl": stat.S_IMODE((work / "p.jsonl").stat().st_mode)},
            "report": {p.name: stat.S_IMODE(p.stat().st_mode) for p in report(work / "fresh")},
        }
    finally:
        os.umask(old)
    file, folder = 0o666 & ~mask, 0o777 & ~mask
    for where, found in written.items():
        for name, mode in found.items():
            path = work / where / name if where != "p.jsonl" else work / name
            wanted = folder if path.is_dir() else file
            if where == "report":
                wanted = file
            assert mode == wanted, f"{where}: {name} is {mode:o}, not {wanted:o}"


# -- torch.compile's cache ------------------------------------------------------------------------


def fake_cache(folder: Path) -> tuple[Path, Path]:
    """A cache folder holding one whole library (a copy of the Python interpreter, an ELF file)
    and one cut short, as inductor leaves it when its compiler is stopped."""
    whole = folder / "ab" / "cabwhole.so"
    half = folder / "cd" / "ccdhalf.main.so"
    for path in (whole, half):
        path.parent.mkdir(parents=True)
        shutil.copyfile(Path(sys.executable).resolve(), path)
    with open(half, "r+b") as f:
        f.truncate(half.stat().st_size // 3)
        f.write(b"\0" * 64)  # the linker had written no header yet
    return whole, half


@pytest.mark.slow  # a compiled training
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inductor's ELF libraries")
def test_a_half_written_compile_cache_entry_is_removed_with_one_line(work, train_ok, monkeypatch):
    """A compiled run (aot_eager, so the test does not wait for a C++ compiler; the check runs
    before any backend compiles) after a compile stopped half way: one warning line, the
    damaged library gone, the whole one kept, the run trains."""
    cache = work / "inductor"
    whole, half = fake_cache(cache)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    err = train_ok(
        *FAST, "trainer.compile=true", "trainer.compile_backend=aot_eager", "hydra.run.dir=out",
        "model.config.num_hidden_layers=1", "model.pack=false", "trainer.max_steps=1",
    )  # fmt: skip
    lines = [line for line in err.splitlines() if "compile cache" in line]
    assert lines == [
        "mtl: torch.compile: removed 1 half-written kernel library (e.g. ccdhalf.main.so, left by "
        f"a compile that was stopped) from the compile cache {cache}; they are built again"
    ]
    assert whole.is_file() and not half.exists()
    assert (work / "out" / "results.json").is_file()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inductor's ELF libraries")
def test_a_library_another_process_is_building_is_left_alone(tmp_path):
    from filelock import FileLock

    whole, half = fake_cache(tmp_path)
    assert whole_library(whole) and not whole_library(half)
    (tmp_path / "locks").mkdir()
    with FileLock(tmp_path / "locks" / "ccdhalf.lock"):
        assert repair_cache(tmp_path) == []
    assert half.exists()
    assert repair_cache(tmp_path) == [half] and not half.exists()


@pytest.mark.slow  # a training command run as another user: its own process
@pytest.mark.parametrize(
    ("args", "cwd", "expected"),
    [
        (["hydra.run.dir=locked/run"], ".", "cannot write in {work}/locked (permission denied)"),
        (["hydra.run.dir=locked"], ".", "cannot write in {work}/locked (permission denied)"),
        (["hydra.run.dir=/root/mtl-run/run"], ".", "run folder /root/mtl-run/run: cannot "),
        ([], "locked", "cannot write in {work}/locked (permission denied)"),
        (["trainer.resume={work}/locked_run"], ".", "cannot write in {work}/locked_run"),
    ],
    ids=["new folder", "existing folder", "under /root", "default folder", "resume"],
)
def test_a_run_folder_the_user_cannot_write_is_one_line(work, args, cwd, expected):
    """As an unprivileged user: a run folder they cannot write (new or existing, given, the
    default one under a working folder they cannot write, a run to resume) is one line before
    Hydra makes it or opens its log file; nothing is written."""
    locked, locked_run = work / "locked", work / "locked_run"
    locked.mkdir()
    shutil.copytree(work / "run", locked_run)
    for path in [work, *work.rglob("*")]:  # readable by every user: the test may run as nobody
        path.chmod(path.stat().st_mode | stat.S_IROTH | (stat.S_IXOTH if path.is_dir() else 0))
    for folder in (locked, locked_run):
        folder.chmod(0o555)
    prefix = unprivileged_prefix(work)
    if prefix is None:
        pytest.skip("no unprivileged user here (not root without setpriv, nor user nobody)")
    if "/root" in " ".join(args) and (os.geteuid() == 0 and "--reuid=65534" not in prefix):
        pytest.skip("the user here is root without its file-mode powers, and owns /root")
    before = listing(work)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HOME": str(work)}
    command = [sys.executable, str(ROOT / "train.py"), *FAST, "model=tiny"]
    done = subprocess.run(
        [*prefix, *command, *(a.format(work=work) for a in args)],
        env=env, capture_output=True, text=True, cwd=work / cwd, timeout=300,
    )  # fmt: skip
    line = one_error_line(done.returncode, done.stderr)
    assert expected.format(work=work) in line, line
    assert listing(work) == before


# -- a full disk -----------------------------------------------------------------------------------


@pytest.fixture
def small_disk(work):
    """`small_disk(size)`: a tmpfs of `size` mounted at `<work>/disk` (root with the right to
    mount, else the test is skipped), unmounted after the test."""
    mounted = []

    def mount(size: str) -> Path:
        disk = work / "disk"
        disk.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)],
            capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            pytest.skip(f"cannot mount a small disk here ({done.stderr.strip()})")
        mounted.append(disk)
        return disk

    yield mount
    for disk in mounted:
        subprocess.run(["umount", "--lazy", str(disk)], check=False)  # a log file may be open


def test_an_export_to_a_full_disk_is_one_line_and_leaves_nothing(work, capsys, small_disk):
    disk = small_disk("2m")  # the tiny model's export is about 4.6 MB
    line = one_error_line(*command(capsys, export_main, "run", "disk/out"))
    assert line.startswith("disk/out: no space left on the disk of disk (what was written"), line
    assert list(disk.iterdir()) == []


def test_predictions_to_a_full_disk_are_one_line_and_leave_nothing(work, capsys, small_disk):
    disk = small_disk("32k")
    rows = "".join('{"text": "good fine and a sentence long enough to fill the disk"}\n' * 2000)
    (work / "rows.jsonl").write_text(rows)
    args = ["model=run", "task=synthetic_cls", "input=rows.jsonl", "output=disk/out.jsonl"]
    status, err = command(capsys, predict_main, *args)
    err = "\n".join(line for line in err.splitlines() if not line.startswith("predict "))
    line = one_error_line(status, err)  # the progress bar's lines aside
    assert line.startswith("disk/out.jsonl: no space left on the disk of disk"), line
    assert list(disk.iterdir()) == []


def test_a_checkpoint_on_a_full_disk_is_one_line_and_leaves_no_part(work, small_disk, train_here):
    """The step checkpoint (about 12 MB) does not fit: the training stops with one line saying
    how to resume, and no part of the checkpoint is left taking the space."""
    disk = small_disk("8m")
    status, err = train_here(*FAST, f"hydra.run.dir={disk}/run")
    err = "\n".join(line for line in err.splitlines() if not line.startswith("mtl: run folder"))
    line = one_error_line(status, err)
    assert line.startswith(f"checkpoint of step 4: no space left on the disk of {disk}/run/"), line
    assert line.endswith(f"then resume with trainer.resume={disk}/run"), line
    assert list((disk / "run" / "checkpoints").iterdir()) == []


def test_a_writer_that_says_only_runtime_error_on_a_full_disk_is_one_line(work, small_disk):
    """torch's zip writer reports a full disk as "unexpected pos": the free space is read while
    the part written still fills the disk, then the part is removed."""
    from mtl.artifacts import write_folder
    from mtl.errors import MtlError

    disk = small_disk("1m")

    def fill(tmp: Path) -> None:
        try:
            (tmp / "model.bin").write_bytes(b"\0" * 2**21)
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] unexpected pos") from None

    with pytest.raises(MtlError, match=r"^disk/out: no space left on the disk of disk "):
        write_folder("disk/out", fill)
    assert list(disk.iterdir()) == []


@pytest.mark.parametrize("folder", ["step_0000004", "best"])
def test_weights_changed_at_their_size_are_not_exported(work, capsys, folder):
    """Other values of the same shapes (a valid file of the size the marker records): the
    checkpoint's sha256 says it is not what training saved; nothing is exported."""
    from safetensors.torch import load_file

    checkpoint = work / "run" / "checkpoints" / folder
    path = checkpoint / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-64:] = bytes(64)  # the last tensor's last values: a valid file, other weights
    path.write_bytes(data)
    assert load_file(path)
    before = listing(work)
    line = one_error_line(*command(capsys, export_main, str(checkpoint.relative_to(work)), "out"))
    assert line.startswith(f"run/checkpoints/{folder}/model.safetensors is not the file the ")
    assert "sha256" in line and "give another whole checkpoint of the run instead" in line
    assert listing(work) == before
