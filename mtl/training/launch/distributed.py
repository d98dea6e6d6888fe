"""Running under a launcher (`torchrun`, `accelerate launch`): one run folder per launch, checks
that every process trains the same thing, and a per-step trace for tests.

- `start_launch()` runs in `train.py` before Hydra. With `WORLD_SIZE > 1` it starts the process
  group (gloo on CPU; gloo + NCCL where CUDA is present), rank 0's clock becomes the launch time
  of every rank (`MTL_LAUNCH_TIME`, read by the `mtl_now` resolver in `conf/hydra/default.yaml`),
  and ranks other than 0 are told not to write Hydra's `.hydra/` files or log file. So a launch
  gets one run folder whatever the start skew of its processes, and the folder name carries
  microseconds, so two launches started in the same second get two folders.
- `make_accelerator()` runs the launcher's processes as one run on whatever device is there:
  without a device accelerate can spread processes over (GPU, XPU, NPU, ...), a launch of
  several processes is a multi-CPU run, as `trainer.cpu=true` would make it (accelerate itself
  would give each process a run of its own). A process count that differs from the launcher's
  is refused at start with one MtlError, and so are nodes started for different launches or
  not sharing the run folder (`mtl.training.launch.nodes`).
- `trainer.strategy=fsdp` shards the model with accelerate's FSDP plugin; a run where accelerate
  would not shard is refused (`mtl.training.launch.sharding`).
- `check_same_run()` all-gathers a fingerprint of the config and the loader's schedule: ranks that
  would train different things (and desynchronise or hang) are refused with one MtlError.
- `Tracer` writes `trace_rank<r>.jsonl` (`trainer.trace=true`): one line per optimizer step with
  the tasks, example ids and loss of each micro-batch and a hash of the parameters.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from mtl.artifacts import job_folder_name
from mtl.batching.collators import task_rows
from mtl.errors import MtlError, env_rank
from mtl.training.launch.nodes import check_nodes
from mtl.training.launch.sharding import ShardingAccelerator, check_strategy, fsdp_plugin

LAUNCH_TIME_ENV = "MTL_LAUNCH_TIME"
_launch_time: datetime | None = None


def env_world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def launch_time() -> datetime:
    """The launch's clock: `MTL_LAUNCH_TIME` when set (rank 0's, shared), else this process's
    first call to it (one value per process, so run and sweep folders agree)."""
    global _launch_time
    if _launch_time is None:
        stamp = os.environ.get(LAUNCH_TIME_ENV)
        _launch_time = datetime.fromisoformat(stamp) if stamp else datetime.now()
    return _launch_time


OmegaConf.register_new_resolver(
    "mtl_now", lambda pattern: launch_time().strftime(pattern), replace=True
)
OmegaConf.register_new_resolver("mtl_job_name", job_folder_name, replace=True)  # sweep jobs


def start_launch(timeout_s: float = 600.0) -> None:
    """Before Hydra: under a launcher, start the process group and share rank 0's launch time;
    on ranks other than 0, leave Hydra's files and log file to rank 0 (command-line overrides).
    `run` later sets the group's timeout to `trainer.dist_timeout_s`."""
    import torch.distributed as dist

    if env_world_size() <= 1:
        return
    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            backend = "cpu:gloo,cuda:nccl"
        else:
            backend = "gloo"
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    stamp = [launch_time().isoformat() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(stamp, src=0)
    global _launch_time
    _launch_time = None
    os.environ[LAUNCH_TIME_ENV] = stamp[0]
    if dist.get_rank() != 0:
        sys.argv += ["hydra.output_subdir=null", "hydra/job_logging=stdout"]


def launch_barrier() -> None:
    """Under a launcher (after `start_launch`), wait until every process has got here."""
    import torch.distributed as dist

    if env_world_size() > 1 and dist.is_initialized():
        dist.barrier()


def launcher_world_size() -> int:
    """How many processes the launcher started: torchrun's and accelerate's `WORLD_SIZE`, or an
    MPI launcher's size (the variables accelerate reads for a multi-CPU run)."""
    for name in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        if os.environ.get(name):
            return int(os.environ[name])
    return 1


def has_distributed_device() -> bool:
    """Whether accelerate can put several processes on a device here: the devices its
    `PartialState` tries for a launch (CUDA, XPU with xccl, NPU, HPU, MLU, MUSA, SDAA, Neuron,
    XLA). Without one it makes a multi-process run only when told `cpu=True`."""
    from accelerate import utils

    if torch.cuda.is_available():
        return True
    if utils.is_xpu_available() and utils.is_xccl_available():
        return True
    others = ["is_torch_xla_available", "is_npu_available", "is_hpu_available", "is_mlu_available"]
    others += ["is_musa_available", "is_sdaa_available", "is_neuron_available"]  # newer releases
    return any(getattr(utils, name, lambda: False)() for name in others)


def make_accelerator(trainer, run_dir: Path, *, log_with_wandb: bool):
    """The run's `Accelerator` from the trainer settings (`mtl.config.TrainerConfig`): one
    process of the launcher's run, on CPU with `trainer.cpu` or where no device can hold the
    launcher's processes. MtlError (one line) when accelerate sees another process count, when
    it would not run `trainer.strategy=fsdp` as FSDP, or when the nodes disagree on the launch
    or the run folder (`mtl.training.launch.nodes.check_nodes`)."""
    from accelerate import DistributedDataParallelKwargs
    from accelerate.state import AcceleratorState
    from accelerate.utils import InitProcessGroupKwargs

    export_slurm_env()
    # One process may train several runs (a Hydra multirun's jobs, a notebook): accelerate keeps
    # the first run's precision process-wide and refuses another. The process state (device,
    # process group) stays.
    AcceleratorState._reset_state()  # tests/test_layout.py: ALLOWED_PRIVATE_READS
    world = launcher_world_size()
    accelerator = ShardingAccelerator(
        # Without cpu=True, accelerate runs each process of a CPU-only launch on its own.
        cpu=trainer.cpu or (world > 1 and not has_distributed_device()),
        mixed_precision=trainer.mixed_precision,
        # Gradient accumulation is done in the loop (it knows where an epoch ends), and the
        # schedule counts optimizer steps: step it once per optimizer step, not once per process.
        step_scheduler_with_optimizer=False,
        log_with="wandb" if log_with_wandb else None,
        project_dir=str(run_dir),
        fsdp_plugin=fsdp_plugin() if trainer.strategy == "fsdp" else None,
        kwargs_handlers=[
            # Single-task batches leave the other heads without gradients.
            DistributedDataParallelKwargs(find_unused_parameters=True),
            InitProcessGroupKwargs(timeout=timedelta(seconds=trainer.dist_timeout_s)),
        ],
    )
    check_world_size(accelerator.num_processes, world, accelerator.distributed_type.value)
    check_strategy(trainer.strategy, accelerator.distributed_type.value)
    set_timeout(trainer.dist_timeout_s)  # also when train.py started the process group
    check_nodes(accelerator, run_dir)
    if trainer.mixed_precision == "fp16" and not accelerator.native_amp and env_rank() == 0:
        print(  # accelerate runs fp16 on a CPU in fp32 without a word
            f"mtl: trainer.mixed_precision=fp16 needs a GPU; on {accelerator.device.type} this "
            "run trains in fp32 (give trainer.mixed_precision=bf16 for mixed precision here, "
            "or no)",
            file=sys.stderr,
        )
    return accelerator


def check_world_size(processes: int, world: int, distributed_type: str) -> None:
    """Refuse a run whose processes would each train on their own (or in a group of another
    size) than the launch: each would log every step and write its own summary."""
    if processes == world:
        return
    raise MtlError(
        f"accelerate sees {processes} process(es) ({distributed_type}) but the launcher started "
        f"{world}; set trainer.cpu=true to run the {world} processes on CPU, or "
        f"launch one process per device (--nproc_per_node / --num_processes)",
        all_ranks=True,
    )


def export_slurm_env() -> None:
    """Inside a SLURM job step of several tasks started by hydra-submitit-launcher (no torchrun),
    turn SLURM's task variables into torch's (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT)
    with submitit's helper, so that accelerate starts DDP. Not exercised by the tests here."""
    if int(os.environ.get("SLURM_NTASKS", "1")) <= 1 or "WORLD_SIZE" in os.environ:
        return
    try:
        from submitit.helpers import TorchDistributedEnvironment
    except ImportError:
        return
    TorchDistributedEnvironment().export()


def set_timeout(seconds: float) -> None:
    """A collective that waits longer than this fails instead of hanging (peer gone or stuck)."""
    import torch.distributed as dist

    if dist.is_initialized():
        from torch.distributed.distributed_c10d import _set_pg_timeout

        _set_pg_timeout(timedelta(seconds=seconds))


def fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def check_same_run(accelerator, config: dict, loader) -> None:
    """Refuse (MtlError on every rank) when ranks would not take the same steps on the same
    tasks: a config that differs by rank (e.g. a seed read from the environment), different data
    sizes, or a loader whose schedule differs. Costs one small all-gather at start."""
    if accelerator.num_processes <= 1:
        return
    from accelerate.utils import gather_object

    config = {k: v for k, v in config.items() if k != "output_dir"}
    parts = {
        "config": fingerprint(config),
        "batches per task": dict(zip(loader.names, map(int, loader.sizes), strict=True)),
        "schedule": fingerprint(loader.schedule(loader.epoch).tolist(), len(loader)),
    }
    everyone = gather_object([parts])
    for key in parts:
        values = [p[key] for p in everyone]
        if any(v != values[0] for v in values):
            by_rank = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
            raise MtlError(
                f"the {accelerator.num_processes} processes disagree on the {key} ({by_rank}); "
                "every rank must get the same config and data (no rank-dependent options), "
                "or the ranks would train different tasks per step and desynchronise or hang",
                all_ranks=True,
            )


def param_hash(model: torch.nn.Module) -> str:
    """sha256 of every parameter's bytes, in order: equal on two ranks iff bitwise equal."""
    digest = hashlib.sha256()
    for param in model.parameters():
        if hasattr(param, "full_tensor"):  # a shard of a parameter (FSDP): a collective
            param = param.full_tensor()
        digest.update(param.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def batch_examples(batch: dict) -> dict[str, list[int]]:
    """Task -> example ids of a single-task or mixed batch."""
    ids = batch.get("example_ids")
    if ids is None:
        return {}
    return {
        name: (ids if rows is None else ids[rows]).tolist()
        for name, rows in task_rows(batch).items()
    }


class Tracer:
    """`trace_rank<r>.jsonl` in the run folder: a header line (world size, rank, train sizes),
    then per optimizer step {step, epoch, micro: [{tasks, example_ids, loss}], param_hash}.
    A hook of the loop (`mtl.training.hooks`). Tracing syncs with the device every micro-batch:
    for tests and debugging only."""

    def __init__(self, run_dir: Path, accelerator, train_sizes: dict[str, int]):
        self.path = Path(run_dir) / f"trace_rank{accelerator.process_index}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.micro: list[dict] = []
        header = {
            "header": True,
            "world": accelerator.num_processes,
            "rank": accelerator.process_index,
            "train_sizes": train_sizes,
        }
        self._write(header)

    def _write(self, row: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")

    def on_micro_step(self, run, progress, batch: dict, loss: torch.Tensor) -> None:
        examples = batch_examples(batch)
        self.micro.append({"tasks": list(examples), "example_ids": examples, "loss": float(loss)})

    def on_step_end(self, run, progress) -> None:
        model = run.accelerator.unwrap_model(run.model)
        step, epoch = progress.state.step, progress.state.epoch
        self._write(
            {"step": step, "epoch": epoch, "micro": self.micro, "param_hash": param_hash(model)}
        )
        self.micro = []
