"""Every benchmark runs on tiny inputs (`--quick`), names its peer and ends with its JSON line;
each uses the one harness and none imports another.

A benchmark runs in the test's own process, as `python script --quick` would (through runpy): a
new process would cost each ~6 s of imports. Where what a benchmark measures is a process
(start-up, peak memory, tools side by side), the script starts those processes itself, as it does
for a user. One torch thread (`--threads 1`) where a script's default is two: on a CPU that the
other test worker keeps busy, two threads wait on each other at every tiny op."""

import ast
import contextlib
import io
import json
import runpy
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from accelerate.state import AcceleratorState

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.append(str(BENCH_DIR))  # the studies' functions, read by their report tests
import study  # noqa: E402
import study_generative  # noqa: E402

BENCHMARKS = {
    "bench_sampler_scale.py": "sampler_scale",
    "bench_randomness.py": "randomness",
    "bench_loader_overhead.py": "loader_overhead",
    "bench_mixup_memory.py": "mixup_memory",
    "bench_collate.py": "collate",
    "bench_padding_efficiency.py": "padding_efficiency",
    "bench_train_speed.py": "train_speed",
    "bench_task_types.py": "task_types",
    "bench_vs_trainer.py": "vs_trainer",
    "bench_loop_overhead.py": "loop_overhead",
    "bench_packing.py": "packing",
    "bench_host_memory.py": "host_memory",
    "bench_predict.py": "predict",
    "bench_balancers.py": "balancers",
    "bench_families.py": "families",
    "bench_mixtures.py": "mixtures",
    "bench_online.py": "online",
    "bench_startup.py": "startup",
    "bench_peft.py": "peft",
    "bench_vs_trl.py": "vs_trl",
}


def run_quick(script: str, *args: str) -> dict:
    return json.loads(quick_output(script, *args)[-1])


# Scripts whose --threads default is 2 (see the module's docstring).
TWO_THREADS = {"bench_balancers.py", "bench_peft.py", "bench_train_speed.py", "bench_vs_trl.py"}


def quick_output(script: str, *args: str) -> list[str]:
    """The lines `script --quick` prints: a table, then its JSON line."""
    argv = [str(BENCH_DIR / script), "--quick", *args]
    argv += ["--threads", "1"] if script in TWO_THREADS else []
    lines = run_here(argv).strip().splitlines()
    assert len(lines) > 2  # a table before the JSON line
    return lines


def run_here(argv: list[str]) -> str:
    """`python *argv` in this process: its stdout; torch's threads, `sys.argv`, `sys.path` and
    accelerate's process-wide state as they were after."""
    saved = sys.argv, list(sys.path), torch.get_num_threads()
    sys.argv, out = argv, io.StringIO()
    sys.path.insert(0, str(BENCH_DIR))
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as stop:
        assert stop.code in (None, 0), f"{argv[0]} exited with {stop.code}"
    finally:
        sys.argv, sys.path[:] = saved[0], saved[1]
        torch.set_num_threads(saved[2])
        AcceleratorState._reset_state(reset_partial_state=True)
    return out.getvalue()


# Benchmarks whose own test runs them (and checks their JSON line's name there too): below, or
# tests/test_gpu_check.py for bench_vs_trainer.py (scripts/gpu_check.sh runs it, through bench_gpu).
CHECKED_BELOW = {
    "bench_padding_efficiency.py",
    "bench_train_speed.py",
    "bench_vs_trainer.py",
    "bench_loop_overhead.py",
    "bench_predict.py",
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "name"), [(s, n) for s, n in BENCHMARKS.items() if s not in CHECKED_BELOW]
)
def test_script_runs_quick_and_prints_its_json_line(script, name):
    assert_named(run_quick(script, *QUICK_ARGS.get(script, [])), name)


# Fewer memory child processes, each a start-up of its own: sum and one aggregating balancer are
# the two paths of bench_balancers (a loss weighting steps as sum does).
QUICK_ARGS = {"bench_balancers.py": ["--only", "upgrad"]}


def test_generative_study_report_pairs_each_mixture_with_each_tasks_single_run(tmp_path):
    """`study_generative.py --report-only`: a mixture's figure of a task minus that task's
    single-task run, paired by seed, with its verdict; the cosines of the proportional runs."""
    from harness import append_row

    results = tmp_path / "runs"
    figures = {"pydoc_heading alone": 0.30, "pydoc_topic alone": 0.20, "proportional": 0.25}
    for seed in range(3):
        for option, value in figures.items():
            row = {"option": option, "seed": seed, "overrides": "", "steps": 100, "wall_s": 50}
            row |= {c: value + 0.01 * seed for c in study_generative.COLUMNS}
            row |= {f"last_cos/{a}/{b}": -0.2 for a, b in study_generative.PAIRS}
            append_row(results / "runs.csv", row)
    out = tmp_path / "study.md"
    argv = [str(BENCH_DIR / "study_generative.py"), "--report-only", "--results", str(results)]
    run_here([*argv, "--out", str(out)])
    text = out.read_text()
    assert "| proportional | 3 | 0.260 ± 0.006 |" in text
    # heading figures against heading alone (-0.05), topic's against topic alone (+0.05)
    assert "- proportional, pydoc_heading/exact_match (higher is better): -0.050 ± 0.000" in text
    assert "- proportional, pydoc_topic/accuracy (higher is better): 0.050 ± 0.000" in text
    assert "pydoc_code/f1" not in text.split("paired by seed")[1]  # no pydoc_code alone: no pair
    assert "pydoc_heading / pydoc_topic -0.200" in text


def assert_named(figures: dict, name: str) -> None:
    assert figures["bench"] == name
    assert figures["peer"]  # the figures name what they are compared with


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_benchmark_uses_the_harness_and_imports_no_other_benchmark():
    files = sorted(BENCH_DIR.glob("*.py"))
    # bench_gpu.py runs --quick in tests/test_gpu_check.py (scripts/gpu_check.sh --cpu)
    assert {p.name for p in files} == {
        *BENCHMARKS,
        "bench_gpu.py",
        "harness.py",
        "study.py",
        "study_generative.py",
    }
    others = {p.stem for p in files} - {"harness"}
    for path in files:
        if path.name == "harness.py":
            continue
        imported = imported_modules(path)
        assert "harness" in imported, path.name
        assert not imported & others, (path.name, imported & others)
        assert "emit(" in path.read_text(), path.name  # its JSON line goes through the harness


def test_harness_table_aligns_columns_and_ratios_compare_with_the_peer(capsys):
    sys.path.insert(0, str(BENCH_DIR))
    try:
        import harness
    finally:
        sys.path.remove(str(BENCH_DIR))
    harness.table(["row", "us", "note"], [["peer", 2.0, None], ["ours_long", 12.345, "x"]], 1)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["row          us  note", "peer        2.0     -", "ours_long  12.3     x"]
    assert harness.ratios({"peer": 2.0, "ours": 1.0}, "peer") == {"peer": 1.0, "ours": 0.5}
    calls = []
    best = harness.best_of({"a": lambda: calls.append("a") or 4}, rounds=2)
    assert calls == ["a"] * 3 and 0 < best["a"] < 1  # one warm-up round, then 2 timed


@pytest.mark.slow
def test_padding_efficiency_has_the_peers_and_writes_its_plot(tmp_path):
    png = tmp_path / "padding.png"
    figures = run_quick("bench_padding_efficiency.py", "--plot", str(png))
    assert_named(figures, "padding_efficiency")
    for data in ("pydoc", "synthetic"):
        rows = figures[data]
        for row in ("random", "token_budget", "torch_dataloader", "hf_length_grouped"):
            assert 0 < rows[row] <= 1
        assert rows["block_shuffle(sort_bs_num=50)"] > rows["random"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_train_speed_runs_both_samplers_and_writes_its_plot(tmp_path):
    png = tmp_path / "speed.png"
    figures = run_quick("bench_train_speed.py", "--plot", str(png))
    assert_named(figures, "train_speed")
    assert set(figures["examples_per_s"]) == {"random", "block_shuffle"}
    assert all(v > 0 for runs in figures["examples_per_s"].values() for v in runs)
    assert set(figures["dev"]["random"]) == {"pydoc_topic"}
    assert png.is_file()


@pytest.mark.slow
def test_train_speed_compares_any_two_samplers_with_options():
    figures = run_quick(
        "bench_train_speed.py", "--samplers", "block_shuffle", "token_budget:max_tokens=400"
    )
    assert set(figures["examples_per_s"]) == {"block_shuffle", "token_budget:max_tokens=400"}
    assert "ratio_token_budget:max_tokens=400_vs_block_shuffle" in figures


@pytest.mark.slow
def test_loop_overhead_runs_both_loops_on_the_same_batches_and_writes_its_json(tmp_path):
    path = tmp_path / "loop_overhead.json"
    lines = quick_output("bench_loop_overhead.py", "--json", str(path))
    figures = json.loads(lines[-1])
    assert_named(figures, "loop_overhead")
    assert json.loads(path.read_text()) == figures
    assert [line.split()[1] for line in lines[2:4]] == ["mtl", "bare"]
    assert lines[4].startswith("mtl / bare examples/s: ")
    assert (figures["steps"], figures["warmup"]) == (20, 5)
    assert set(figures["examples_per_s"]) == {"mtl", "bare"}
    assert all(len(v) == 1 and v[0] > 0 for v in figures["examples_per_s"].values())
    # The same batches in the same order, and the same computation: every logged window loss.
    assert figures["same_batches"] is True
    assert figures["same_losses"] is True


@pytest.mark.slow
def test_online_on_two_processes_runs_every_row_on_the_same_batches():
    figures = json.loads(quick_output("bench_online.py", "--processes", "2")[-1])
    assert_named(figures, "online")
    assert figures["processes"] == 2 and figures["same_batches"] is True
    assert set(figures["ratio"]) == {"static", "online every 1", "online every 20"}


def study_rows(option: str, figures: list[float]) -> list[dict]:
    """Rows of benchmarks/study.py's CSVs for `option`, one per seed, `figures` its tasks'
    first dev figure by seed (the others derived from it)."""
    rows = []
    for seed, value in enumerate(figures):
        row = dict.fromkeys(study.FIELDS, "")
        row |= {"option": option, "seed": seed, "overrides": "", "steps": 100, "wall_s": 50 + seed}
        row |= {task: value / (i + 1) for i, task in enumerate(study.CAPS)}
        row |= {k: 0.1 * (seed + 1) for k in study.FIELDS if k.startswith("first_")}
        row |= {k: -0.1 * (seed + 1) for k in study.FIELDS if k.startswith("last_")}
        row["epochs_curve"] = json.dumps([[50, value - 0.1], [100, value]])
        rows.append(row)
    return rows


def test_study_report_is_made_from_its_csvs_alone(tmp_path):
    """`study.py --report-only`: each option's mean ± standard error over seeds, the paired
    difference against the group's baseline with its verdict; a changed row changes the table;
    a group with no rows says it was not run."""
    results = tmp_path / "study"
    rows = study_rows("proportional", [0.5, 0.6, 0.7]) + study_rows("uniform", [0.52, 0.64, 0.76])
    rows += study_rows("annealed", [0.6, 0.7])  # two seeds: no verdict
    for row in rows:
        study.append_row(results / "mixtures.csv", row)
    out = tmp_path / "study.md"
    argv = [str(BENCH_DIR / "study.py"), "--report-only", "--results", str(results)]
    run_here([*argv, "--out", str(out)])
    text = out.read_text()
    values = [0.52, 0.64, 0.76]
    mean, se = statistics.fmean(values), statistics.stdev(values) / 3**0.5
    line = next(x for x in text.splitlines() if x.startswith("| uniform |"))
    assert line.split(" | ")[2] == f"{mean:.3f} ± {se:.3f}"  # option | seeds | pydoc_topic
    diffs = [0.02, 0.04, 0.06]  # paired by seed
    diff, dse = statistics.fmean(diffs), statistics.stdev(diffs) / 3**0.5
    assert f"- uniform, pydoc_topic: {diff:.3f} ± {dse:.3f} (n=3): beyond 2 standard" in text
    assert "- annealed, pydoc_topic: 0.100 ± 0.000 (n=2): too few seeds to say" in text
    assert "## balancers\n\nNot run yet." in text
    assert (
        "Recommended: uniform. Better than proportional beyond 2 standard errors on "
        "pydoc_topic, pydoc_code, pydoc_code_share, worse beyond them on no task" in text
    )
    assert "(annealed: fewer than 3 seeds, not judged)" in text
    # the interaction matrices, seeds' means: cosines first -> last, affinities x 1e4
    assert "| pydoc_topic | 1 | +0.200 -> -0.200 | +0.200 -> -0.200 |" in text
    assert "| pydoc_code_share | -2000.0 | -2000.0 |  |" in text
    rows[4]["pydoc_topic"] = 0.9  # uniform, seed 1
    (results / "mixtures.csv").unlink()
    for row in rows:
        study.append_row(results / "mixtures.csv", row)
    run_here([*argv, "--out", str(out)])
    values = [0.52, 0.9, 0.76]
    mean, se = statistics.fmean(values), statistics.stdev(values) / 3**0.5
    text = out.read_text()
    line = next(x for x in text.splitlines() if x.startswith("| uniform |"))
    assert line.split(" | ")[2] == f"{mean:.3f} ± {se:.3f}"
    assert (
        "Recommended: uniform. Better than proportional beyond 2 standard errors on "
        "pydoc_code, pydoc_code_share, worse" in text
    )  # pydoc_topic now within its spread


def test_every_study_job_has_its_overrides_as_typed():
    args = type("Args", (), {"quick": False, "epochs": 3, "plateau_epochs": 8})()
    for group, options in study.GROUPS.items():
        for option, overrides in options.items():
            got = study.job_overrides(args, overrides, seed=1)
            assert "seed=1" in got and "trainer.epochs=3" in got, (group, option)
            placeholders = ("{epochs_x3}", "{plateau_epochs}", "{random_steps")
            assert not any(p in o for p in placeholders for o in got), (group, option)
    exp3 = study.job_overrides(args, study.GROUPS["mixtures"]["exp3 online"], seed=0)
    assert exp3[-1] == "loader.online={policy: exp3, update_every: 20}"
    steps = study.job_overrides(args, study.GROUPS["mixup"]["mixup equal steps"], seed=0)
    assert steps[-2:] == ["trainer.epochs=9", "trainer.max_steps=192"]  # 3 x (47 + 13 + 4)
    batches = study.job_overrides(args, study.GROUPS["mixup"]["mixup equal batches"], seed=0)
    assert batches[-1] == "trainer.max_steps=64"


def test_every_study_job_builds_its_loader():
    """Each job's loader and its options, built as in training over the study's task sizes (the
    loader's own checks: an option it refuses would stop the study at that job)."""
    from mtl.loaders.dry_run import dry_run

    sizes = study.task_batches(study.CAPS)
    for group, options in study.GROUPS.items():
        for option, overrides in options.items():
            name, loader_options = "random", {"epochs": 3}
            for override in overrides:
                key, value = override.split("=", 1)
                if key == "loader":
                    name = value
                elif key.startswith("loader."):
                    loader_options[key.removeprefix("loader.")] = yaml.safe_load(value)
            assert "steps" in dry_run(name, sizes, **loader_options), (group, option)


def test_a_study_job_typed_as_one_already_run_takes_its_row(tmp_path):
    """mixup's random baseline is mixtures' proportional (the same overrides, seed by seed): its
    row is that job's, not a second run; a job with other overrides is not matched."""
    args = type("Args", (), {"quick": False, "epochs": 3, "plateau_epochs": 8})()
    args.results, args.groups, args.options = str(tmp_path), ["mixup"], ["random"]
    args.seeds, args.resume, args.budget_min = 1, True, 60
    overrides = study.job_overrides(args, study.GROUPS["mixtures"]["proportional"], seed=0)
    row = {field: "" for field in study.FIELDS}
    row |= {"option": "proportional", "seed": 0, "overrides": " ".join(overrides), "steps": 192}
    row |= {"wall_s": 240.5, "pydoc_topic": 0.72}
    study.append_row(tmp_path / "mixtures.csv", row)
    assert study.run_study(args) == 0
    (got,) = study.read_rows(tmp_path / "mixup.csv")
    assert got == {**study.read_rows(tmp_path / "mixtures.csv")[0], "option": "random"}
    other = study.job_overrides(args, study.GROUPS["mixup"]["mixup equal batches"], seed=0)
    assert study.same_job(args, other) is None


@pytest.mark.slow
def test_study_runs_its_jobs_into_its_csv_and_resumes(tmp_path):
    """benchmarks/study.py --quick: each job a train.py process, its row in the group's CSV as
    it ends; --resume runs only what is missing, and without it a done job is refused."""
    results = tmp_path / "study"
    argv = [sys.executable, str(BENCH_DIR / "study.py"), "--quick", "--groups", "mixtures"]
    argv += ["--options", "proportional,uniform", "--seeds", "1", "--results", str(results)]
    argv += ["--work", str(tmp_path / "work"), "--out", str(tmp_path / "study.md")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["jobs_run"] == 2
    rows = study.read_rows(results / "mixtures.csv")
    assert [(r["option"], r["seed"]) for r in rows] == [("proportional", "0"), ("uniform", "0")]
    for row in rows:
        assert int(row["steps"]) > 0 and 0 <= float(row["pydoc_topic"]) <= 1
        assert "task.pydoc_code_share.max_train_examples=8" in row["overrides"]
    assert "| uniform | 1 |" in (tmp_path / "study.md").read_text()
    again = subprocess.run([*argv, "--resume"], capture_output=True, text=True, check=False)
    assert json.loads(again.stdout.strip().splitlines()[-1])["jobs_run"] == 0
    assert study.read_rows(results / "mixtures.csv") == rows
    refused = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert refused.returncode != 0 and "use --resume" in refused.stderr


@pytest.mark.slow
def test_predict_orders_by_length_and_predicts_the_same():
    figures = run_quick("bench_predict.py")
    assert_named(figures, "predict")
    assert figures["rows"] == 64 and figures["same_predictions"] is True
    assert set(figures["examples_per_s"]) == {"length_sorted", "input_order"}


def test_bench_gpu_counts_model_flops_over_real_and_padded_tokens():
    """6 x parameters x tokens + 12 x layers x hidden x length^2 per sequence, and the peak of
    the row's precision on a GPU it knows."""
    import bench_gpu

    clock = bench_gpu.StepClock(start=1, count=1)
    clock.sizes_of_model = (10, 2, 8)  # parameters, layers, hidden
    clock.lengths, clock.widths = [[2, 3], [4]], [4, 4]
    assert clock.flops(0, 1, padded=False) == 6 * 10 * 5 + 12 * 2 * 8 * (2 * 2 + 3 * 3)
    assert clock.flops(0, 1, padded=True) == 6 * 10 * 8 + 12 * 2 * 8 * (4 * 4 + 4 * 4)
    assert (
        clock.flops(0, 2, padded=False) == clock.flops(0, 1, False) + 6 * 10 * 4 + 12 * 2 * 8 * 16
    )
    assert bench_gpu.peak_flops("NVIDIA H200", bf16=True) == 989.4e12
    assert bench_gpu.peak_flops("CPU, 1 torch threads", bf16=True) is None
