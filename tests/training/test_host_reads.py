"""A training step reads no device value: on a GPU each read (`item`, `tolist`, `cpu`, `bool` of
a tensor, `nonzero`, a blocking copy to the device, ...) waits for every kernel queued before
it, and the step becomes the host's. Reads belong to a logged window, an evaluation, a
checkpoint, diagnostics, an online mixing policy's update (`PolicyFeed.after_step`, every
`update_every` steps) and packing's one check of the encoder. Named exceptions: on several
processes an aggregating balancer reads which tasks any process held (`TaskGradients`: one
process here); torchjd's aggregators read as they solve (UPGrad and DualProj project on the
host, MGDA iterates to a tolerance: `mtl.balancers.Aggregate` says so); a padded encoder call
(a batch with padding that packing does not take, or `model.pack=false`) is transformers' own,
whose mask making reads the mask (`masking_utils`; a batch without padding is given no mask).

On the CPU every tensor is a host tensor, so the test plays the GPU: `to_device` hands the step
copies of the batch's tensors (its "device" tensors) and the host originals as
`host_attention_mask` and `host_task_rows`, as it does off the CPU. A torch function mode
follows which tensors are the host's (the batch the loader made, and what is computed from host
tensors alone or made without a `device=`); every other tensor (parameters, gradients, losses,
the batch's device copies and what comes of them) is the device's, and a read of one from the
step (`Training.micro_step`, `optimizer_step`, `after_step`) is counted with where it came from.
"""

from __future__ import annotations

import sys
import weakref
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

import mtl.training.loop
from mtl.training.loop import run

SLOW = pytest.mark.slow  # in CI; out of the edit loop's fast subset

READS = {
    "item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__",
    "nonzero", "argwhere", "unique", "unique_consecutive", "masked_select", "equal", "allclose",
}  # fmt: skip
LOOP = str(Path(mtl.training.loop.__file__))
MIXING = str(Path(mtl.training.loop.__file__).with_name("mixing.py"))
PACKING = str(Path(mtl.training.loop.__file__).parents[1] / "models" / "packing.py")
COPIES = {"tensor", "as_tensor"}  # a factory that copies host values: given a device, it waits
STEP = {(LOOP, "micro_step"), (LOOP, "optimizer_step"), (LOOP, "after_step")}
ALLOWED = {
    (LOOP, "log_window"),
    (LOOP, "evaluate"),
    (LOOP, "checkpoint"),
    (LOOP, "diagnose"),
    (MIXING, "after_step"),  # an online policy's update: it returns at once between updates
    (PACKING, "check"),  # once a run: whether the encoder's packed call matches its padded one
}
MTL = str(Path(mtl.training.loop.__file__).parents[1])


class HostReads(TorchFunctionMode):
    """Counts the step's reads of device tensors (`reads`: (function, mtl file:line))."""

    def __init__(self, outside: tuple[str, ...] = ()):
        super().__init__()
        self.outside = outside
        self.host: dict[int, weakref.ref] = {}
        self.reads: list[tuple[str, str]] = []

    def mark_host(self, tree, host: bool = True) -> None:
        for value in tree_flatten(tree)[0]:
            if isinstance(value, torch.Tensor):
                key = id(value)
                if host:
                    self.host[key] = weakref.ref(value, lambda _, k=key: self.host.pop(k, None))
                else:
                    self.host.pop(key, None)

    def is_host(self, value: torch.Tensor) -> bool:
        ref = self.host.get(id(value))
        return ref is not None and ref() is value

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        tensors = [v for v in tree_flatten((args, kwargs))[0] if isinstance(v, torch.Tensor)]
        on_device = [t for t in tensors if not self.is_host(t)]
        if self.waits(name, args, kwargs, bool(on_device), tensors) and in_step(self.outside):
            self.reads.append((name, caller()))
        out = func(*args, **kwargs)
        if not on_device and "device" not in kwargs:  # from host values alone: the host's
            self.mark_host(out)
        return out

    @staticmethod
    def waits(name: str, args, kwargs, on_device: bool, tensors: list) -> bool:
        """Whether the call waits for the device: a read of a device tensor, or a copy of
        host values to the device that is not asynchronous. Here the device is the CPU too:
        `.to("cpu")` is written for the host, `.to(<a device>)` for the device."""
        if name in COPIES:
            return kwargs.get("device") is not None and not tensors
        if not tensors:
            return False
        if name in READS:
            return on_device
        if name == "to":
            targets = [
                t for t in (*args[1:], kwargs.get("device")) if isinstance(t, str | torch.device)
            ]
            if on_device:
                return any(t == "cpu" for t in targets)  # to the host
            return bool(targets) and not kwargs.get("non_blocking", False)  # a blocking copy
        if name == "__getitem__" and on_device:  # a boolean mask as the index: a count
            index = args[1] if len(args) > 1 else None
            parts = index if isinstance(index, tuple) else (index,)
            return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts)
        return False


def frames():
    frame = sys._getframe(2)
    while frame is not None:
        yield frame.f_code.co_filename, frame.f_code.co_name, frame.f_lineno
        frame = frame.f_back


def in_step(outside: tuple[str, ...] = ()) -> bool:
    """Whether the call is the step's (not a window's, nor in a named library's code)."""
    found = False
    for file, name, _ in frames():
        if (file, name) in ALLOWED or any(part in file for part in outside):
            return False
        found = found or (file, name) in STEP
    return found


def caller() -> str:
    for file, name, line in frames():
        if file.startswith(MTL) and not file.endswith("test_host_reads.py"):
            return f"{Path(file).relative_to(Path(MTL).parent)}:{line} {name}"
    return "?"


@pytest.fixture
def reads(monkeypatch):
    """`reads(cfg)`: train `cfg` as on a GPU (`to_device` above); the step's device reads."""

    def train(cfg, outside: tuple[str, ...] = ()) -> list[tuple[str, str]]:
        mode = HostReads((PADDED_CALL, *outside))

        def to_device(batch: dict, device) -> dict:
            mode.mark_host(batch)  # the loader's tensors are on the host
            moved = {k: v for k, v in batch.items()}
            for key, value in batch.items():
                copy = [v.clone() if isinstance(v, torch.Tensor) else v for v in [value]]
                if isinstance(value, dict):
                    copy = [{k: t.clone() for k, t in value.items()}]
                mode.mark_host(copy, host=False)
                moved[key] = copy[0]
            moved["host_attention_mask"] = batch["attention_mask"]
            if isinstance(batch.get("task_rows"), dict):
                moved["host_task_rows"] = batch["task_rows"]
            return moved

        from_numpy = torch.from_numpy

        def host_from_numpy(array):  # a view of host memory
            tensor = from_numpy(array)
            mode.mark_host(tensor)
            return tensor

        monkeypatch.setattr(mtl.training.loop, "to_device", to_device)
        monkeypatch.setattr(torch, "from_numpy", host_from_numpy)
        with mode:
            run(cfg)
        return mode.reads

    return train


WINDOWS = [
    "trainer.epochs=3",
    "trainer.max_steps=8",
    "trainer.log_every=3",
    "trainer.checkpoint_every=4",
]
PADDED_CALL = "/transformers/masking_utils"  # transformers' padded call: named above
# {run: (overrides, libraries whose reads are named above)}
RUNS = {
    "mixup-block_shuffle-upgrad": (
        ["loader=mixup", "sampler=block_shuffle", "balancer=upgrad"], ("/torchjd/",),
    ),
    "random-token_budget-dwa-online": [
        "loader=random", "sampler=token_budget", "balancer=dwa", "balancer.window=2",
        "loader.online={policy:exp3,update_every:2}",
    ],
    "mixup-unpacked-mgda": (
        ["loader=mixup", "model.pack=false", "balancer=mgda"], ("/torchjd/",),
    ),
    "round_robin-uncertainty-lora": [
        "loader=round_robin", "balancer=uncertainty", "model.peft=lora", "trainer.grad_accum=3",
    ],
    "mixup-weighted-lora_per_task": [
        "loader=mixup", "loader.weighting=uniform", "model.peft={per_task:true}",
    ],
    "sequential-sum-diagnostics": [
        "loader=sequential", "trainer.diagnose_every=2", "trainer.eval_every=4",
    ],
}  # fmt: skip


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=() if i == 0 else SLOW) for i, n in enumerate(RUNS)]
)
def test_a_step_reads_no_device_value(make_cfg, reads, name):
    overrides, outside = RUNS[name] if isinstance(RUNS[name], tuple) else (RUNS[name], ())
    found = reads(make_cfg(*WINDOWS, *overrides), outside)
    listed = "\n".join(f"{name} at {where}" for name, where in sorted(set(found)))
    assert not found, f"{len(found)} device reads in the step:\n{listed}"


def test_the_mode_counts_a_read_put_back_in_the_step(make_cfg, reads, monkeypatch):
    """What the test above says of a step that reads its losses at each micro-step."""
    from mtl.training.tracking.window import Window

    original = Window.add_losses

    def reading(self, task_losses):
        original(self, task_losses)
        self.loss_sums.sum().item()

    monkeypatch.setattr(Window, "add_losses", reading)
    found = reads(make_cfg(*WINDOWS, "loader=round_robin"))
    assert len(found) == 8 and {name for name, _ in found} == {"item"}, found
