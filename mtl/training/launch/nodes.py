"""A launch over several nodes (`torchrun --nnodes N` on each node, or `srun torchrun ...`): the
checks `make_accelerator` makes once at start, so that a launch the nodes disagree on stops
with one line on every rank instead of training wrongly or hanging at the end.

- The nodes agree on the launch: torchrun's agents agree on the processes (a node started with
  another `--nproc_per_node` only makes the world larger, which is a valid run), but a node
  started with another `--nnodes` still gets workers, which train and then wait at torchrun's
  exit barrier for a node that never comes. Each process's `GROUP_WORLD_SIZE` (the `--nnodes`
  its node was started with) is compared across ranks.
- The run folder is shared: rank 0 writes a marker with a token of this launch into it, and the
  first process of every node reads it back. A node that does not see it has another folder at
  that path (a local disk, or another working directory for the relative default `outputs/`):
  its checkpoint files and traces would be written where no other node can read them, and a
  resume would miss them. The marker is removed once every node has looked.
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path

from mtl.errors import MtlError

SHARED_MARKER = ".mtl-launch"


def check_nodes(accelerator, run_dir: Path) -> None:
    """Refuse (MtlError on every rank) a launch whose nodes were started with different node
    counts, or whose run folder a node does not share with rank 0. A collective: call it on
    every rank, once the process group runs; free for a single process."""
    if accelerator.num_processes <= 1:
        return
    from accelerate.utils import broadcast_object_list, gather_object

    token = [secrets.token_hex(8) if accelerator.is_main_process else None]
    broadcast_object_list(token, from_process=0)
    marker = Path(run_dir) / SHARED_MARKER
    if accelerator.is_main_process:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(token[0])
    accelerator.wait_for_everyone()
    view = {
        "rank": accelerator.process_index,
        "host": socket.gethostname(),
        "node": os.environ.get("GROUP_RANK"),
        "nodes": os.environ.get("GROUP_WORLD_SIZE"),
        "sees": not accelerator.is_local_main_process or _reads(marker) == token[0],
        "folder": str(Path(run_dir).absolute()),
    }
    views = gather_object([view])
    if accelerator.is_main_process:
        marker.unlink(missing_ok=True)
    _check_node_counts(views)
    _check_shared(views, accelerator.num_processes)


def _reads(marker: Path) -> str | None:
    try:
        return marker.read_text()
    except OSError:
        return None


def _check_node_counts(views: list[dict]) -> None:
    counts = {v["nodes"] for v in views if v["nodes"] is not None}
    if len(counts) <= 1:
        return
    by_node = {}
    for v in views:
        by_node.setdefault(v["node"], f"node {v['node']} ({v['host']}): --nnodes {v['nodes']}")
    raise MtlError(
        f"the nodes were started for different launches ({', '.join(by_node.values())}); "
        "start every node with the same --nnodes and a --node_rank below it",
        all_ranks=True,
    )


def _check_shared(views: list[dict], processes: int) -> None:
    blind = [v for v in views if not v["sees"]]
    if not blind:
        return
    first = blind[0]
    raise MtlError(
        f"the run folder is not shared: rank {first['rank']} on {first['host']} does not see "
        f"what rank 0 wrote to {views[0]['folder']} (it has {first['folder']}); a launch of "
        f"{processes} processes needs one run folder every node mounts at the same path: put "
        "it on a shared filesystem (hydra.run.dir=/shared/path) and start every node there",
        all_ranks=True,
    )
