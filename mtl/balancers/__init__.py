"""Balancers: how the tasks' losses of a step become one update of the shared encoder.

`balancer=<name>` picks `conf/balancer/<name>.yaml`, which names the class by `_target_`:
loss weightings (`Sum`, the default; `Uncertainty`; `DWA`) and gradient aggregations through
torchjd (`Aggregate`). A user's own balancer subclasses `Balancer` (docs/extending.md).
"""

from mtl.balancers.aggregate import Aggregate
from mtl.balancers.base import Balancer
from mtl.balancers.weighting import DWA, Sum, Uncertainty

__all__ = ["DWA", "Aggregate", "Balancer", "Sum", "Uncertainty"]
