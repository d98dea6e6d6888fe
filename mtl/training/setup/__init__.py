"""Setting up a run: what it builds once (`run.Run`, `run.build_run`) from the composed config and
the parts `mtl.builders` makes, the optimizer (`optim`) and the speed settings (`speed`: compile,
loader settings). May import every other part of `mtl.training` but the loop."""
