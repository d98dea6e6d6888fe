"""Several processes and nodes: the launch (`distributed`: process group, one run folder per
launch, the same run on every rank, the per-step tracer), node checks (`nodes`), FSDP
(`sharding`). Imports only `mtl.training.state` of training."""
