"""Online mixing's state as a checkpoint holds it, checked before a resume uses it: the
weights, the epoch's plan (its start weights and each update's slot, number and weights), and
the built-in policies' own figures. Anything else is `BadState`, one line naming what."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from mtl.errors import BadState
from mtl.values import is_int, is_number


def finite_figures(state: Any, key: str) -> dict[str, float]:
    """`state[key]` as {task: finite number}; `BadState` naming the key otherwise."""
    value = state.get(key) if isinstance(state, Mapping) else None
    if not isinstance(value, Mapping):
        raise BadState(f"the policy's {key} are {value!r}, not {{task: number}}")
    out = {}
    for name, figure in value.items():
        if not is_number(figure) or not math.isfinite(figure):
            raise BadState(f"the policy's {key} for task {name!r} is {figure!r}, not a number")
        out[str(name)] = float(figure)
    return out


def state_count(state: Any, key: str) -> int:
    """`state[key]` as an integer >= 0; `BadState` naming the key otherwise."""
    value = state.get(key) if isinstance(state, Mapping) else None
    if not is_int(value) or value < 0:
        raise BadState(f"{key} is {value!r}, not an integer >= 0")
    return int(value)


def checked_state(state: Any, n: int, slots: int) -> tuple[np.ndarray, int, dict[str, Any]]:
    """(weights, updates, plan) of `OnlineMixing.state_dict`'s `state` for `n` tasks and epochs
    of `slots` slots, checked for type, shape and range (`BadState` naming what is wrong):
    weights of every task, finite, >= 0 and summing to 1; the plan's updates inside the epoch,
    in order, numbered within the run's count."""
    if not isinstance(state, Mapping):
        raise BadState(f"the state is {type(state).__name__}, not a mapping")
    weights = np.array(_weights(state.get("weights"), n, "weights"))
    updates = state_count(state, "updates")
    plan = state.get("plan")
    if not isinstance(plan, Mapping) or not isinstance(plan.get("updates"), list):
        raise BadState(f"the plan is {plan!r}, not {{epoch, start, updates}}")
    epoch = plan.get("epoch")
    if not is_int(epoch) or epoch < -1:
        raise BadState(f"the plan's epoch is {epoch!r}, not an integer >= -1")
    start = plan.get("start")
    start = [] if epoch < 0 and start == [] else _weights(start, n, "start weights")
    events, last = [], (0, 0)
    for event in plan["updates"]:
        if not isinstance(event, (list, tuple)) or len(event) != 3:
            raise BadState(f"an update of the plan is {event!r}, not [slot, number, weights]")
        at, index = event[0], event[1]
        ok = is_int(at) and is_int(index)
        if not (ok and last[0] <= at < slots and 0 < at and last[1] < index <= updates):
            raise BadState(
                f"an update of the plan is at slot {at!r}, number {index!r}; the epoch has "
                f"{slots} slots and the run {updates} updates, each later than the one before"
            )
        events.append([int(at), int(index), _weights(event[2], n, "update's weights")])
        last = (at, index)
    return weights, updates, {"epoch": int(epoch), "start": start, "updates": events}


def _weights(value: Any, n: int, what: str) -> list[float]:
    """`value` as the weights of `n` tasks, finite, >= 0 and summing to 1 (as `checked_weights`
    makes them), or `BadState` naming `what`."""
    ok = isinstance(value, (list, tuple)) and len(value) == n and all(map(is_number, value))
    if ok:
        ok = all(math.isfinite(v) and v >= 0 for v in value) and abs(sum(value) - 1) < 1e-6
    if not ok:
        raise BadState(f"the {what} are {value!r}, not {n} numbers >= 0 summing to 1")
    return [float(v) for v in value]
