"""Two CPU processes on gloo (`torchrun --standalone --nproc_per_node 2 train.py ...`, and
`accelerate launch --multi_gpu --num_processes 2`) with the default trainer config: no
`trainer.cpu=true`, as a user on a CPU-only machine would launch them.

Every launch asserts that it really ran as one run of 2 processes (the trace headers) and sets a
short process-group timeout, so a hang fails in seconds. Several checks share one launch (Hydra `-m`
sweeps of a multi-process job) to keep the suite to a few minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import load_file

from mtl.artifacts import RunLayout
from mtl.training.loop import run

ROOT = Path(__file__).resolve().parents[2]
TASKS = ["synthetic_cls", "synthetic_tag", "synthetic_reg"]
# synthetic_reg with 24 examples (21 train): fewer than 2 ranks x batch size 16.
TASK_ARGS = [f"task=[{','.join(TASKS)}]", "task.synthetic_reg.source.size=24"]
COMMON = [
    "debug=fast",
    "trainer.max_steps=null",
    "trainer.trace=true",
    "trainer.dist_timeout_s=20",
]

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
# On a machine without GPUs, as a user would type it; port 0: a free one.
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu"]
ACCELERATE += ["--num_processes", "2", "--main_process_port", "0"]


def start(
    *args: str,
    cwd: Path,
    env: dict | None = None,
    launcher: list[str] = TORCHRUN,
    script: Path = ROOT / "train.py",
) -> subprocess.Popen:
    """Start a 2-process launch (torchrun unless told) of `script` with COMMON, and the task
    set unless args pick one."""
    if not any(arg.startswith("task=") for arg in args):
        args = (*TASK_ARGS, *args)
    flags = [arg for arg in args if arg == "-m"]  # Hydra's flags go before the overrides
    overrides = [arg for arg in args if arg != "-m"]
    command = [*launcher, str(script), *flags, *COMMON, *overrides]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
    full_env.pop("MTL_LAUNCH_TIME", None)
    return subprocess.Popen(
        command, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"launch hung for {timeout}s:\n{err[-3000:]}")
    return proc.returncode, out + err


def launch(*args: str, cwd: Path, launcher: list[str] = TORCHRUN) -> str:
    code, output = finish(start(*args, cwd=cwd, launcher=launcher))
    assert code == 0, output[-4000:]
    return output


def read_trace(run_dir: Path, world: int = 2) -> list[list[dict]]:
    """Per rank: the step rows; asserts the run had `world` processes."""
    ranks = []
    for rank in range(world):
        rows = [json.loads(line) for line in (run_dir / f"trace_rank{rank}.jsonl").open()]
        headers = [r for r in rows if r.get("header")]
        assert headers and all(h["world"] == world and h["rank"] == rank for h in headers)
        ranks.append([r for r in rows if not r.get("header")])
    assert not (run_dir / f"trace_rank{world}.jsonl").exists()
    return ranks


def train_sizes(run_dir: Path) -> dict[str, int]:
    line = (run_dir / "trace_rank0.jsonl").open().readline()
    return json.loads(line)["train_sizes"]


def assert_ranks_in_step(ranks: list[list[dict]]) -> None:
    """Same steps, same task(s) per micro-batch and the same parameters on every rank."""
    first = ranks[0]
    assert first, "no steps traced"
    for other in ranks[1:]:
        assert [r["step"] for r in other] == [r["step"] for r in first]
        for a, b in zip(first, other, strict=True):
            assert [m["tasks"] for m in a["micro"]] == [m["tasks"] for m in b["micro"]]
            assert a["param_hash"] == b["param_hash"], f"step {a['step']}: heads out of sync"


def assert_disjoint_shards(run_dir: Path, ranks: list[list[dict]], exact: bool) -> None:
    """Per task per epoch, the ranks' ids cover the task's train split; duplicates only the
    sampler's padding (fewer than one batch per rank) unless the policy cycles (`exact=False`)."""
    sizes = train_sizes(run_dir)
    epochs = {r["epoch"] for r in ranks[0]}
    for epoch in epochs:
        for task, size in sizes.items():
            ids = Counter()
            for rows in ranks:
                for row in rows:
                    if row["epoch"] == epoch:
                        for micro in row["micro"]:
                            ids.update(micro["example_ids"].get(task, []))
            assert set(ids) == set(range(size)), (task, epoch)
            if exact:
                assert sum(ids.values()) - size < 2 * 16, (task, epoch)


def assert_logged_once(run_dir: Path, ranks: list[list[dict]], mixup: bool) -> None:
    """metrics.jsonl has each traced step once, with shares counted over every rank's
    micro-batches (all-reduced)."""
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    logged = [m for m in metrics if "loss" in m]
    assert [m["step"] for m in logged] == [r["step"] for r in ranks[0]]
    for m, *rows in zip(logged, *ranks, strict=True):
        counts = Counter()
        for row in rows:
            for micro in row["micro"]:
                for task, ids in micro["example_ids"].items():
                    counts[task] += len(ids) if mixup else 1
        total = sum(counts.values())
        for task in TASKS:
            assert m[f"share/{task}"] == pytest.approx(counts[task] / total)


def sweep_jobs(sweep: Path) -> list[Path]:
    return sorted((p for p in sweep.iterdir() if p.is_dir()), key=lambda p: int(p.name))


def test_dist_default_config_is_one_run_under_accelerate_launch(tmp_path):
    """`accelerate launch` of 2 processes on CPU without trainer.cpu=true is one run of world
    size 2: both traces say so, each step is logged once with shares over both ranks, one
    summary. (torchrun's: the same checks on each job of the loaders' sweep below.)"""
    run_dir = tmp_path / "run"
    output = launch(
        "loader=random",
        "sampler=random",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
        launcher=ACCELERATE,
    )
    assert "cpu: false" in (run_dir / ".hydra" / "config.yaml").read_text()
    ranks = read_trace(run_dir)
    assert_ranks_in_step(ranks)
    assert_disjoint_shards(run_dir, ranks, exact=True)
    assert_logged_once(run_dir, ranks, mixup=False)
    header = r"^task +type +metric +best \(step \d+\) +last \(step \d+\)$"
    assert len(re.findall(header, output, re.MULTILINE)) == 1


WRONG_DEVICE = """
import sys
sys.path.insert(0, {root!r})
import mtl.training.launch.distributed
# accelerate finds no distributed device here: it would run 1 process each
mtl.training.launch.distributed.has_distributed_device = lambda: True
from mtl.cli.train import train
train()
"""


def test_dist_process_count_differing_from_launch_stops_at_start(tmp_path):
    """Where accelerate would run each process on its own, the launch stops before training
    with one line naming the fix; the processes exit with status 2 (or are stopped by torchrun
    once the first has)."""
    script = tmp_path / "wrong_device_train.py"
    script.write_text(WRONG_DEVICE.format(root=str(ROOT)))
    code, output = finish(start(cwd=tmp_path, script=script), timeout=120)
    assert code != 0
    errors = [line for line in output.splitlines() if line.startswith("mtl: error:")]
    assert errors == [
        "mtl: error: accelerate sees 1 process(es) (NO) but the launcher started 2; set "
        "trainer.cpu=true to run the 2 processes on CPU, or launch one process per device "
        "(--nproc_per_node / --num_processes)"
    ], output[-3000:]
    # torchrun's failure summary has one "exitcode  : N" entry per rank. The first rank to exit
    # has status 2; torchrun then stops the other with SIGTERM (-15) unless it exited with 2
    # first: which happens is a race, as is a C++ abort (-6) at exit while a gloo thread runs.
    codes = re.findall(r"exitcode\s+: (-?\d+)", output)
    assert len(codes) == 2 and "2" in codes and set(codes) <= {"2", "-15", "-6"}, output[-3000:]
    assert not list(tmp_path.rglob("metrics.jsonl"))


RANK_0_LATE = """
import os, sys, time
sys.path.insert(0, {root!r})
import mtl.cli.train as cli

start_launch = cli.start_launch

def late_start_launch():
    start_launch()
    if os.environ["RANK"] == "0":
        time.sleep(3)  # rank 1's Hydra makes the run folder first

cli.start_launch = late_start_launch
cli.train()
"""


def test_dist_a_refused_launch_leaves_no_folder_whichever_rank_made_it(tmp_path):
    """A launch refused for bad input removes the run folder it made, also when the process
    that made it is not rank 0. (A folder that was there before is kept as it was:
    tests/distributed/test_dist_lock.py's refused launch.)"""
    script = tmp_path / "rank_0_late_train.py"
    script.write_text(RANK_0_LATE.format(root=str(ROOT)))
    run_dir = tmp_path / "runs" / "refused"
    code, output = finish(
        start("data.max_examples=0", f"hydra.run.dir={run_dir}", cwd=tmp_path, script=script),
        timeout=120,
    )
    assert code != 0 and "mtl: error: data.max_examples=0 must be >= 1" in output, output[-3000:]
    assert not (tmp_path / "runs").exists(), sorted(map(str, (tmp_path / "runs").rglob("*")))


def test_dist_every_loader_keeps_ranks_in_sync(tmp_path):
    """Checks 1, 2, 6, 7 (sweep): 4 loaders x grad_accum 1, 2 in one `-m` launch of torchrun
    with the default trainer config (no trainer.cpu=true): each job one run of world size 2,
    its steps logged once, its summary printed once (by rank 0)."""
    sweep = tmp_path / "sweep"
    started = time.perf_counter()
    output = launch(
        "-m",
        "loader=sequential,round_robin,random,mixup",
        "trainer.grad_accum=1,2",
        "sampler=random",
        f"hydra.sweep.dir={sweep}",
        "hydra.sweep.subdir=${hydra.job.num}",
        cwd=tmp_path,
    )
    print(f"8 jobs in {time.perf_counter() - started:.1f}s")
    jobs = sweep_jobs(sweep)
    assert len(jobs) == 8
    header = r"^task +type +metric +best \(step \d+\) +last \(step \d+\)$"
    assert len(re.findall(header, output, re.MULTILINE)) == 8
    for job in jobs:
        assert "cpu: false" in (job / ".hydra" / "config.yaml").read_text()
        ranks = read_trace(job)
        assert_ranks_in_step(ranks)
        overrides = (job / ".hydra" / "overrides.yaml").read_text()
        mixup = "loader=mixup" in overrides
        if "grad_accum=1" in overrides:
            # grad_accum 2: an odd epoch's last micro-batch waits for the next optimizer step
            # (or is dropped at the end of the run), so it is not in this epoch's trace.
            assert_disjoint_shards(job, ranks, exact=not mixup)
        assert "hydra/job_logging=stdout" not in (job / ".hydra" / "hydra.yaml").read_text()
        assert len(list(job.rglob("config.yaml"))) == 1
        assert_logged_once(job, ranks, mixup)


def test_dist_every_exhaust_policy_and_sampler_gives_equal_steps(tmp_path):
    """Check 3: no hang and equal steps for every exhaust policy, also for a task smaller than
    ranks x batch size; two epochs each."""
    sweep = tmp_path / "sweep"
    launch(
        "-m",
        "loader=random,mixup",
        "loader.exhaust=each_once,first,cycle_to_longest",
        "sampler=block_shuffle",
        "trainer.epochs=2",
        f"hydra.sweep.dir={sweep}",
        "hydra.sweep.subdir=${hydra.job.num}",
        cwd=tmp_path,
    )
    jobs = sweep_jobs(sweep)
    assert len(jobs) == 6
    for job in jobs:
        ranks = read_trace(job)
        assert_ranks_in_step(ranks)
        assert {r["epoch"] for r in ranks[0]} == {0, 1}
        assert json.loads((job / "results.json").read_text())["step"] == ranks[0][-1]["step"]


def stream(rows: list[dict]) -> list[tuple]:
    return [
        (r["step"], [(m["tasks"], m["example_ids"]) for m in r["micro"]], r["param_hash"])
        for r in rows
    ]


def losses(rows: list[dict]) -> list[float]:
    return [m["loss"] for r in rows for m in r["micro"]]


def assert_same_stream(got: list[dict], expected: list[dict]) -> None:
    assert stream(got) == stream(expected)
    assert losses(got) == pytest.approx(losses(expected), rel=1e-6, abs=1e-7)


RESUME = [
    "loader=random",
    "sampler=block_shuffle",
    "trainer.epochs=3",
    "trainer.checkpoint_every=1",
    "trainer.keep_last=null",
    "data.max_examples=48",
]


# update_every 3 with a checkpoint every step: resumes land inside the policy's window. About
# 13 steps an epoch: the policy's weights change the counts of the steps it redraws.
ONLINE = [*RESUME, "data.max_examples=192", "trainer.epochs=2"]
ONLINE += ["loader.online={policy:loss_softmax,update_every:3,options:{temperature:0.3}}"]


@pytest.fixture(scope="module")
def online_runs(tmp_path_factory) -> dict[str, Path]:
    """The uninterrupted runs that the resume tests continue: ONLINE under loader=random and
    loader=mixup, one `-m` launch of 2 processes."""
    sweep = tmp_path_factory.mktemp("online") / "sweep"
    launch("-m", *ONLINE, "loader=random,mixup", f"hydra.sweep.dir={sweep}",
           "hydra.sweep.subdir=${hydra.job.num}", cwd=sweep.parent)  # fmt: skip
    jobs = sweep_jobs(sweep)
    assert len(jobs) == 2
    return {"random": jobs[0], "mixup": jobs[1]}


def checkpoint(run_dir: Path, step: int) -> Path:
    path = RunLayout(run_dir).step(step)
    assert path.is_dir()
    return path


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(sorted((run_dir / "checkpoints").glob("step_*"))[-1] / "model.safetensors")


def resume_points(rows: list[dict]) -> dict[str, int]:
    """Steps to stop at: step 1, mid-epoch 0, the epoch 0/1 boundary, mid-epoch 1."""
    per_epoch = Counter(r["epoch"] for r in rows)
    n = per_epoch[0]
    assert n >= 3, "epoch 0 too short to stop mid-epoch"
    return {"step 1": 1, "mid-epoch 0": n // 2 + 1, "epoch boundary": n, "mid-epoch 1": n + 2}


def check_reshuffles(ranks: list[list[dict]]) -> None:
    """Each epoch gives a different order per task per rank."""
    epochs = sorted({r["epoch"] for r in ranks[0]})
    assert len(epochs) >= 2
    for rows in ranks:
        for task in TASKS[:2]:
            orders = [
                [
                    i
                    for r in rows
                    if r["epoch"] == e
                    for m in r["micro"]
                    for i in m["example_ids"].get(task, [])
                ]
                for e in epochs
            ]
            assert all(orders) and len({tuple(o) for o in orders}) == len(epochs), task


def test_dist_same_seed_same_stream_and_exact_resume(online_runs, tmp_path):
    """Checks 4 and 5 on 2 processes, under loader.online: reshuffles, and a resume mid-epoch 1
    (after the first reshuffle, inside a window of the policy) read with 2 loader workers
    (num_workers 0 vs 2: the same stream) continues both ranks' streams and losses as the run
    never stopped. The chain of resumes (step 1, mid-epoch 0, the epoch boundary, mid-epoch 1,
    each from the previous resume) runs in-process below; resumes from a run folder stopped by
    a signal are the SIGTERM (loader=mixup) and SIGKILL (loader=random) tests."""
    ref = online_runs["random"]
    expected = read_trace(ref)
    check_reshuffles(expected)
    step = resume_points(expected[0])["mid-epoch 1"]
    step -= 1 if step % 3 == 0 else 0  # inside a window of the policy, not at its end
    out = tmp_path / "resumed"
    resume = [f"trainer.resume={checkpoint(ref, step)}", f"hydra.run.dir={out}"]
    launch(*ONLINE, "loader=random", "data.num_workers=2", *resume, cwd=tmp_path)
    got = read_trace(out)
    for rank in range(2):
        assert got[rank][0]["step"] == step + 1
        assert_same_stream(got[rank], [r for r in expected[rank] if r["step"] > step])
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    assert [m["step"] for m in metrics if "loss" in m][0] == step + 1


def test_dist_single_process_resume_chain(make_cfg, tmp_path):
    """Check 5 on 1 process (in-process runs): a chain of resumes from step 1, mid-epoch 0, the
    epoch boundary and mid-epoch 1, each from the previous resumed run's checkpoint."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the launches' OMP_NUM_THREADS=1: 2 threads on 2 cores crawl
    try:
        single_process_resume_chain(make_cfg, tmp_path)
    finally:
        torch.set_num_threads(threads)


def single_process_resume_chain(make_cfg, tmp_path):
    common = [
        *RESUME,
        "trainer.trace=true",
        "task.synthetic_reg.source.size=24",
        "trainer.max_steps=null",
    ]
    ref = tmp_path / "ref"
    run(make_cfg(*common, output_dir=ref))
    (expected,) = read_trace(ref, world=1)
    previous = ref
    for label, step in resume_points(expected).items():
        out = tmp_path / label.replace(" ", "_")
        run(make_cfg(*common, f"trainer.resume={checkpoint(previous, step)}", output_dir=out))
        (got,) = read_trace(out, world=1)
        assert got[0]["step"] == step + 1, label
        assert_same_stream(got, [r for r in expected if r["step"] > step])
        previous = out


FAULTY_SAMPLER = '''
import os
from mtl.samplers import RandomBatchSampler

class FaultyBatchSampler(RandomBatchSampler):
    """Rank 1's second batch of its first pass holds an index past the dataset's end."""
    def epoch_batches(self, epoch):
        batches = super().epoch_batches(epoch)
        if self.rank == 1 and epoch == 0 and len(batches) > 1:
            batches[1] = batches[1].copy()
            batches[1][0] = 10**6
        return batches
'''


def test_dist_failing_rank_stops_all_and_launches_get_own_folders(tmp_path):
    """Checks 3 (failure) and 7: a NaN loss on one rank, a bad example on one rank, and a
    rank-dependent config, launched at the same time: each stops every rank promptly with a
    message naming task and rank, and each launch has its own run folder."""
    data = tmp_path / "badreg.jsonl"
    rows = [{"text": f"row number {i}", "label": float(i % 5)} for i in range(40)]
    for i in (7, 17, 27):
        rows[i]["label"] = 1e30  # its squared error overflows float32: an inf loss
    data.write_text("\n".join(json.dumps(r) for r in rows))
    extra = tmp_path / "conf_extra" / "task"
    extra.mkdir(parents=True)
    (extra / "badreg.yaml").write_text(
        f"# @package task.badreg\ntype: regression\nsource: {{path: {data}}}\nbatch_size: 8\n"
    )
    (tmp_path / "faulty_sampler.py").write_text(FAULTY_SAMPLER)
    started = time.perf_counter()
    procs = {
        "nan": start(
            "task=[synthetic_cls,badreg]",
            f"hydra.searchpath=[file://{extra.parent}]",
            "loader=round_robin",
            cwd=tmp_path,
        ),
        "bad example": start(
            "sampler=random",
            "sampler._target_=faulty_sampler.FaultyBatchSampler",
            cwd=tmp_path,
            env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
        ),
        "rank-dependent seed": start("seed='${oc.decode:${oc.env:RANK}}'", cwd=tmp_path),
    }
    results = {}
    for name, proc in procs.items():
        code, output = finish(proc, timeout=120)
        results[name] = (code, output, time.perf_counter() - started)
        print(f"{name}: exit {code} after {results[name][2]:.1f}s")
    code, output, _ = results["nan"]
    assert code != 0
    assert "loss is NaN/inf for task 'badreg' on rank" in output, output[-3000:]
    assert output.count("mtl: error:") == 1  # all ranks stop; rank 0 reports once
    code, output, _ = results["bad example"]
    assert code != 0
    assert "mtl: error: rank 1: task 'synthetic_" in output and "IndexError" in output
    code, output, _ = results["rank-dependent seed"]
    assert code != 0 and "disagree on the config" in output, output[-3000:]
    # Three launches, started in the same second, one run folder and one Hydra config each: the
    # two that trained keep theirs (metrics.jsonl); the one refused before training leaves none
    # (whichever of its processes made the folder, every one of them knows the launch made it).
    folders = [p for p in (tmp_path / "outputs" / "runs").glob("*/*") if p.is_dir()]
    launches = [(f / ".hydra" / "overrides.yaml").read_text() for f in folders]
    assert len(launches) == len(set(launches))
    trained = [f for f in folders if (f / "metrics.jsonl").is_file()]
    assert len(trained) == 2
    assert sum("badreg" in (f / ".hydra" / "overrides.yaml").read_text() for f in trained) == 1
    assert sorted(folders) == sorted(trained), [sorted(os.listdir(f)) for f in folders]
    for folder in folders:
        assert len(list(folder.rglob("config.yaml"))) == 1


def test_dist_online_mixing_same_weights_on_every_rank(online_runs):
    """loader.online on 2 processes, loader=random and loader=mixup: every rank draws the same
    tasks at every step (the policy's figures are summed over the ranks, so its weights agree),
    and the weights moved. Their resumes: the same-seed, SIGTERM and SIGKILL tests."""
    for ref in online_runs.values():
        assert_ranks_in_step(read_trace(ref))
        rows = [json.loads(line) for line in (ref / "metrics.jsonl").open()]
        moved = {
            tuple(v for k, v in sorted(r.items()) if k.startswith("mix_weight/")) for r in rows
        }
        assert len(moved - {()}) > 1


def test_dist_sigterm_saves_on_every_rank_and_resumes_the_same_stream(online_runs, tmp_path):
    """SIGTERM to the launcher mid-run (loader=mixup mixing online, no periodic checkpoints):
    both ranks save the same step and exit; a resume from the run folder continues the
    uninterrupted run's stream on both ranks (saving at every step, as that run did, or not
    at all changes nothing in it)."""
    common = [a for a in ONLINE if not a.startswith("trainer.checkpoint_every")]
    common += ["loader=mixup"]
    expected = read_trace(online_runs["mixup"])
    part = tmp_path / "part"
    proc = start(*common, f"hydra.run.dir={part}", cwd=tmp_path)
    trace = part / "trace_rank0.jsonl"
    while not (trace.is_file() and len(trace.read_text().splitlines()) >= 4):
        assert proc.poll() is None, "the launch ended before it could be stopped"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)  # torchrun passes it on to both ranks
    _, output = finish(proc)  # torchrun's own status after a signal is its business
    assert len([line for line in output.splitlines() if "received SIGTERM" in line]) == 1
    saved = sorted((part / "checkpoints").glob("step_*"))
    assert len(saved) == 1
    step = int(saved[0].name.split("_")[1])
    assert 1 <= step < expected[0][-1]["step"]
    assert {p.name for p in saved[0].glob("random_states_*.pkl")} == {
        "random_states_0.pkl",
        "random_states_1.pkl",
    }
    out = tmp_path / "resumed"
    launch(*common, f"trainer.resume={part}", f"hydra.run.dir={out}", cwd=tmp_path)
    got = read_trace(out)
    for rank in range(2):
        assert got[rank][0]["step"] == step + 1
        assert_same_stream(got[rank], [r for r in expected[rank] if r["step"] > step])


KILLED = [*ONLINE, "loader=random"]


def kill_launch(proc: subprocess.Popen) -> None:
    """SIGKILL to the ranks and the launcher at once (torchrun starts each rank in a process
    group of its own, so a signal to the launcher's group does not reach them)."""
    processes = [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]
    ranks = [p for p in processes if "train.py" in " ".join(p.cmdline())]
    assert len(ranks) == 3  # torchrun and its 2 ranks
    for process in processes:
        process.kill()
    proc.communicate()
    psutil.wait_procs(processes, timeout=30)


def test_dist_sigkilled_and_resumed_ends_bit_equal(online_runs, tmp_path):
    """loader=random mixing online on 2 processes: the whole launch (torchrun and both ranks)
    SIGKILLed at a random moment, resumed in its folder from its last whole checkpoint; the
    final parameters equal the uninterrupted run's bit for bit. (Killed and resumed twice over,
    once inside a save: tests/training/test_resume.py, one process.)"""
    ref = online_runs["random"]
    part, rng, kills, attempts = tmp_path / "part", random.Random(7), 0, 0
    trace = part / "trace_rank0.jsonl"
    while kills < 1:
        attempts += 1
        assert attempts < 10, "the launch kept finishing before it could be killed"
        resume = [f"trainer.resume={part}"] if list(part.glob("checkpoints/step_*/mtl_*")) else []
        proc = start(*KILLED, *resume, f"hydra.run.dir={part}", cwd=tmp_path)
        before = len(trace.read_text().splitlines()) if trace.is_file() else 0
        while proc.poll() is None and (
            not trace.is_file() or len(trace.read_text().splitlines()) < before + 3
        ):
            time.sleep(0.02)  # training under way: a few steps past where it started
        time.sleep(rng.uniform(0, 1.0))
        if proc.poll() is not None:  # it finished first: start again from the same folder
            shutil.rmtree(part)
            continue
        kill_launch(proc)
        kills += 1
    launch(*KILLED, f"trainer.resume={part}", f"hydra.run.dir={part}", cwd=tmp_path)
    assert read_trace(part)  # both ranks' traces: a run of 2 processes
    expected, got = final_weights(ref), final_weights(part)
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)
