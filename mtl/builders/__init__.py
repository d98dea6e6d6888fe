"""Builders: where the composed config becomes objects, for training and for loading a trained
model alike: the tasks and tokenizer (`tasks`), the per-task and composite loaders (`loaders`),
the model (`model`), any `_target_` node (`instantiate`), and where a run's trained weights are
(`weights`). It imports the layers below it (data, config, loaders, samplers, balancers, task
types, models) and nothing of training, inference or the command line."""
