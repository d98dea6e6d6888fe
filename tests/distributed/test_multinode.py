"""Two "nodes" on localhost: two torchrun launches of the README's command, `--nnodes 2
--nproc_per_node 1`, one with `--node_rank 0` and one with `--node_rank 1`, meeting at a
rendezvous on 127.0.0.1 (torchrun's static rendezvous, as on a cluster without etcd).

One launch trains with checkpoints and traces; a second continues it from its run folder after
its last checkpoint is spoiled (as a kill while saving leaves it), and every assertion on the
pair shares those two launches. Launches that the nodes disagree on (another --nnodes on one
node, a run folder one node does not share) are refused in one line, started side by side.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mtl.artifacts import RunLayout

ROOT = Path(__file__).resolve().parents[2]
COMMAND = ["model=tiny", "debug=fast", "logger=none"]  # the README's multi-node example
RUN = [
    "trainer.epochs=2",
    "trainer.checkpoint_every=2",
    "trainer.keep_last=null",
    "trainer.trace=true",
]
RUN += ["trainer.dist_timeout_s=30"]  # a collective left waiting fails in 30 s

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_node(rank: int, port: int, cwd: Path, *args: str, nnodes: int = 2) -> subprocess.Popen:
    """`torchrun --nnodes N --nproc_per_node 1 --node_rank R ... train.py <README command>`."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes)]
    torchrun += ["--nproc_per_node", "1", "--node_rank", str(rank)]
    # static rendezvous; a node that never comes fails the launch in 60 s, not torchrun's 600
    torchrun += ["--rdzv-backend", "static", "--rdzv-conf", "timeout=60"]
    torchrun += ["--master_addr", "127.0.0.1", "--master_port", str(port)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("MTL_LAUNCH_TIME", None)
    return subprocess.Popen(
        [*torchrun, str(ROOT / "train.py"), *COMMAND, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def two_nodes(cwd: Path, *args: str, cwd1: Path | None = None, nnodes1: int = 2):
    """Start node 0 in `cwd` and node 1 in `cwd1` (default: the same folder); returns both."""
    port = free_port()
    return [
        start_node(0, port, cwd, *args),
        start_node(1, port, cwd1 or cwd, *args, nnodes=nnodes1),
    ]


def finish(nodes: list[subprocess.Popen], timeout: float = 240) -> list[tuple[int, str]]:
    results = []
    for proc in nodes:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in nodes:
                p.kill()
            pytest.fail(f"a node hung for {timeout}s")
        results.append((proc.returncode, out))
    return results


def run_folders(cwd: Path) -> list[Path]:
    return sorted(p for p in cwd.glob("outputs/runs/*/*") if p.is_dir())


def traces(run_dir: Path) -> list[list[dict]]:
    """Per rank, the step rows after the latest header (the latest start); asserts it was one
    run of 2 processes."""
    ranks = []
    for rank in range(2):
        rows = [json.loads(line) for line in (run_dir / f"trace_rank{rank}.jsonl").open()]
        last = max(i for i, row in enumerate(rows) if row.get("header"))
        assert rows[last]["world"] == 2 and rows[last]["rank"] == rank
        ranks.append(rows[last + 1 :])
    assert not (run_dir / "trace_rank2.jsonl").exists()
    return ranks


def schedule(rows: list[dict]) -> list[tuple]:
    return [(r["step"], [m["tasks"] for m in r["micro"]], r["param_hash"]) for r in rows]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A two-node run, then the same command with trainer.resume=<run folder> after its last
    checkpoint was left half-written: (run folder, first traces, resumed traces, outputs)."""
    cwd = tmp_path_factory.mktemp("nodes")
    first = finish(two_nodes(cwd, *RUN))
    for code, out in first:
        assert code == 0, out[-3000:]
    (run_dir,) = run_folders(cwd)
    before = traces(run_dir)
    last = RunLayout(run_dir).step(4)
    last.rename(last.with_name(".tmp-step_0000004"))  # a save the kill cut short
    second = finish(two_nodes(cwd, *RUN, f"trainer.resume={run_dir}"))
    for code, out in second:
        assert code == 0, out[-3000:]
    return run_dir, before, traces(run_dir), [out for _, out in first + second]


def test_two_nodes_train_one_run_in_step(trained):
    run_dir, before, _, outputs = trained
    assert run_folders(run_dir.parents[3]) == [run_dir]
    assert len(list(run_dir.rglob("config.yaml"))) == 1  # rank 0's Hydra files only
    assert [r["step"] for r in before[0]] == [1, 2, 3, 4]
    assert schedule(before[0]) == schedule(before[1])  # same tasks, same weights every step
    (task,) = before[0][0]["micro"][0]["tasks"]
    ids = [set(rows[0]["micro"][0]["example_ids"][task]) for rows in before]
    assert ids[0] and ids[1] and not ids[0] & ids[1]  # each node its own shard of the task
    assert {p.name for p in (RunLayout(run_dir).step(2)).iterdir()} >= {
        "random_states_0.pkl",
        "random_states_1.pkl",
        "mtl_checkpoint.json",
    }
    assert not (run_dir / ".mtl-launch").exists()
    assert sum(out.count("mtl: error") for out in outputs) == 0


def test_two_nodes_resume_from_the_run_folder_exactly(trained):
    run_dir, before, after, outputs = trained
    assert f"mtl: run folder {run_dir} (resuming at step 2)" in outputs[2]
    assert "skipping incomplete .tmp-step_0000004 (left by an interrupted save)" in outputs[2]
    for rank in range(2):
        assert schedule(after[rank]) == schedule(before[rank][2:])
        ids = [[m["example_ids"] for m in r["micro"]] for r in after[rank]]
        assert ids == [[m["example_ids"] for m in r["micro"]] for r in before[rank][2:]]
        losses = [m["loss"] for r in after[rank] for m in r["micro"]]
        assert losses == pytest.approx([m["loss"] for r in before[rank][2:] for m in r["micro"]])
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    assert [m["step"] for m in metrics if "loss" in m] == [1, 2, 3, 4]  # each step once
    assert (RunLayout(run_dir).step(4) / "mtl_checkpoint.json").is_file()


def refused(results: list[tuple[int, str]]) -> str:
    """The one error line of a refused two-node launch: every worker exited with status 2
    (torchrun's summary says so; a worker that the C++ runtime aborts at exit, after its status
    2, while a gloo thread still runs, says -6: a race of the teardown, seen once in many runs)
    and no traceback came from mtl."""
    output = "\n".join(out for _, out in results)
    assert all(code != 0 for code, _ in results)
    codes = re.findall(r"exitcode\s+: (-?\d+)", output)
    assert len(codes) == 2 and "2" in codes and set(codes) <= {"2", "-6"}, output[-3000:]
    assert str(ROOT / "mtl") not in output and "MtlError" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("mtl: error:")]
    assert len(errors) == 1, output[-3000:]
    return errors[0]


def test_nodes_that_disagree_are_refused_in_one_line(tmp_path):
    """Node 1 started with --nnodes 3 (torchrun still starts its worker, which would train and
    then wait for a third node at the end); and node 1 started in another folder, so the
    relative run folder is not the one node 0 writes. Both stop at start, within the test's
    timeout: no hang."""
    shared, here, there = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder in (shared, here, there):
        folder.mkdir()
    launches = {
        "nnodes": two_nodes(shared, "trainer.dist_timeout_s=30", nnodes1=3),
        "not shared": two_nodes(here, "trainer.dist_timeout_s=30", cwd1=there),
    }
    try:
        nnodes = refused(finish(launches["nnodes"], timeout=180))
        not_shared = refused(finish(launches["not shared"], timeout=180))
    finally:
        for proc in [*launches["nnodes"], *launches["not shared"]]:
            if proc.poll() is None:
                proc.kill()
    host = socket.gethostname()
    assert nnodes == (
        f"mtl: error: the nodes were started for different launches (node 0 ({host}): --nnodes "
        f"2, node 1 ({host}): --nnodes 3); start every node with the same --nnodes and a "
        "--node_rank below it"
    )
    assert not_shared.startswith(f"mtl: error: the run folder is not shared: rank 1 on {host} ")
    assert "put it on a shared filesystem (hydra.run.dir=/shared/path)" in not_shared
    for folder in (shared, here, there):  # stopped before training
        assert not list(folder.rglob("metrics.jsonl")) and not list(folder.rglob("checkpoints"))
