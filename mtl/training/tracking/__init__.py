"""What a run logs: metrics.jsonl and W&B (`logger`), the logged window (`window`), reading a
run's `.wandb` files back (`wandb_file`). Imports only `mtl.training.state` of training."""
