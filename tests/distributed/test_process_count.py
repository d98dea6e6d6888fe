"""The Accelerator's process count against the launcher's (in-process, no second process).

A torchrun rank's environment (WORLD_SIZE=2, RANK/LOCAL_RANK=0) where accelerate would not join
the ranks (it finds no device and is not told cpu=True) must stop the run with one line naming
the fix, not train as a single process. The 2-process launches that do form one run are in
test_dist_train.py.
"""

from __future__ import annotations

import pytest

import mtl.training.launch.distributed
from mtl.config import TrainerConfig
from mtl.errors import MtlError
from mtl.training.launch.distributed import check_world_size, launcher_world_size, make_accelerator


@pytest.fixture
def fresh_accelerate_state():
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture
def started_group():
    """A process group as `start_launch` leaves it (one rank here: nobody to wait for)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_accelerator_that_would_not_join_the_launch_is_refused(
    monkeypatch, tmp_path, fresh_accelerate_state, started_group
):
    for name, value in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    # Claim a device accelerate does not find: it then runs this rank on its own.
    monkeypatch.setattr(mtl.training.launch.distributed, "has_distributed_device", lambda: True)
    with pytest.raises(MtlError) as info:
        make_accelerator(TrainerConfig(), tmp_path, log_with_wandb=False)
    message = str(info.value)
    assert message == (
        "accelerate sees 1 process(es) (NO) but the launcher started 2; set trainer.cpu=true to "
        "run the 2 processes on CPU, or launch one process per device "
        "(--nproc_per_node / --num_processes)"
    )
    assert "\n" not in message
    assert info.value.all_ranks  # every rank raises it: rank 0 prints it once


def test_single_process_runs_unchanged(monkeypatch, tmp_path, fresh_accelerate_state):
    for name in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    accelerator = make_accelerator(TrainerConfig(), tmp_path, log_with_wandb=False)
    assert accelerator.num_processes == 1 == launcher_world_size()


@pytest.mark.parametrize("name", ["WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"])
def test_launcher_world_size_reads_torchrun_and_mpi(monkeypatch, name):
    for other in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, "3")
    assert launcher_world_size() == 3
    check_world_size(3, launcher_world_size(), "MULTI_CPU")  # equal counts pass
    with pytest.raises(MtlError, match="accelerate sees 1 process"):
        check_world_size(1, launcher_world_size(), "NO")
