"""Bad input to `mtl-train`, group by group: each case ends with status 2 and one line
`mtl: error: ...` on stderr that names the thing and the fix, no traceback, and leaves no run
folder behind. The CLI runs in-process (`mtl.cli.train` with `sys.argv`), from a project folder
of its own with a `conf/` of task files and data a user could get wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtl.config.checks import has_wandb_credentials
from tests.conftest import file_digests

ROWS = [f"{'good fine nice' if i % 2 else 'bad poor sad'} row {i},{i % 2}" for i in range(80)]
FILES = {
    "data/ok.csv": "\n".join(["text,label", *ROWS]) + "\n",
    "data/empty.csv": "",
    "data/header.csv": "text,label\n",
    "data/five_labels.csv": "\n".join(["text,label", *[f"row {i},{i % 5}" for i in range(80)]]),
    "data/unlabelled.csv": "\n".join(["text,id", *[f"row {i},{i}" for i in range(20)]]) + "\n",
    "data/twice.csv": "\n".join(["text,label,label", *[f"{r},0" for r in ROWS]]) + "\n",
    "data/one_class.csv": "\n".join(["text,label", *[f"row {i},pos" for i in range(80)]]) + "\n",
    "data/constant.csv": "\n".join(["text,score", *[f"row {i},1.5" for i in range(40)]]) + "\n",
    "data/same_set.jsonl": "".join(
        json.dumps({"text": f"row {i}", "tags": ["a", "b"]}) + "\n" for i in range(40)
    ),
    "data/first_choice.jsonl": "".join(
        json.dumps({"text": f"row {i}", "choices": ["yes", "no"], "label": 0}) + "\n"
        for i in range(40)
    ),
    "not_a_model/notes.txt": "a folder, not a model",
}
# labels that teach nothing, one task type each (task name -> its file)
UNTAUGHT = {
    "constant": "type: regression\nsource: {path: data/constant.csv}\nlabel_column: score\n",
    "same_set": "type: multi_label_classification\nsource: {path: data/same_set.jsonl}\n"
    "label_column: tags\n",
    "first_choice": "type: multiple_choice\nsource: {path: data/first_choice.jsonl}\n"
    "choices_column: choices\n",
}
TASK = (
    "# @package task.{name}\ntype: sequence_classification\nsource: {source}\n"
    "label_names: [neg, pos]\nbatch_size: 8\nmax_length: 16\n"
)
TASKS = {
    "missing_file": "{path: data/nope.csv}",
    "empty_file": "{path: data/empty.csv}",
    "header_only": "{path: data/header.csv}",
    "five_labels": "{path: data/five_labels.csv}",
    "with_test": "{train: data/ok.csv, test: data/unlabelled.csv}",
    "twice": "{path: data/twice.csv}",
    "one_class": "{path: data/one_class.csv}",
}


@pytest.fixture
def project(tmp_path, monkeypatch):
    for path, text in FILES.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    (tmp_path / "conf" / "task").mkdir(parents=True)
    for name, source in TASKS.items():
        (tmp_path / "conf" / "task" / f"{name}.yaml").write_text(
            TASK.format(name=name, source=source)
        )
    for name, body in UNTAUGHT.items():
        (tmp_path / "conf" / "task" / f"{name}.yaml").write_text(f"# @package task.{name}\n{body}")
    (tmp_path / "conf" / "task" / "no_package.yaml").write_text(
        "type: sequence_classification\nsource: {path: data/ok.csv}\n"
    )
    (tmp_path / "conf" / "sampler").mkdir()
    (tmp_path / "conf" / "sampler" / "no_partial.yaml").write_text(
        "_target_: mtl.samplers.RandomBatchSampler\ndrop_last: false\n"
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def mtl_train(project, train_here):
    """`mtl_train(*overrides)`: run `mtl-train --config-dir conf task=[synthetic_cls] debug=fast
    *overrides` in-process; returns (exit status, stderr)."""

    def run(*overrides: str) -> tuple[int, str]:
        return train_here("--config-dir", "conf", "task=[synthetic_cls]", "debug=fast", *overrides)

    return run


def one_error_line(status: int, err: str) -> str:
    assert status == 2, err[-2000:]
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("mtl: error: ")]
    assert len(errors) == 1 and errors[0] == lines[-1], err
    return errors[0].removeprefix("mtl: error: ")


def nothing_left(project: Path) -> None:
    assert not (project / "outputs").exists(), sorted(
        str(p.relative_to(project)) for p in (project / "outputs").rglob("*")
    )


# (overrides, what the line must say): every case names the key or file and the fix.
CASES = [
    # trainer
    (["+trainer.lrr=0.1"], ["unknown key trainer.lrr", "did you mean lr?"]),
    (["trainer.lr=-1"], ["trainer.lr=-1.0 must be > 0"]),
    (["trainer.head_lr=0"], ["trainer.head_lr=0.0 must be > 0"]),
    (["trainer.epochs=0"], ["trainer.epochs=0 must be >= 1"]),
    (["trainer.grad_accum=0"], ["trainer.grad_accum=0 must be >= 1"]),
    (["trainer.eval_batch_size=-1"], ["trainer.eval_batch_size=-1 must be >= 1"]),
    (["trainer.max_steps=0"], ["trainer.max_steps=0 must be >= 1"]),
    (["trainer.keep_last=0"], ["trainer.keep_last=0 must be >= 1"]),
    (["trainer.warmup_ratio=1.5"], ["trainer.warmup_ratio=1.5 must be in [0, 1)"]),
    (["trainer.mixed_precision=fp8"], ["trainer.mixed_precision='fp8' is not one of no"]),
    (["trainer.monitor_mode=up"], ["trainer.monitor_mode='up' is not one of max, min"]),
    (["trainer.max_grad_norm=-1"], ["trainer.max_grad_norm=-1.0 must be > 0", "null"]),
    (["trainer.weight_decay=-0.1"], ["trainer.weight_decay=-0.1 must be >= 0"]),
    (["trainer.epochs=abc"], ["bad value for trainer.epochs", "'abc'"]),
    (["trainer.lr=fast"], ["bad value for trainer.lr", "'fast'"]),
    # model
    (["+model.foo=1"], ["unknown key model.foo", "ModelConfig has"]),
    (["model.head_dropout=2"], ["model.head_dropout=2.0 must be in [0, 1)"]),
    (["model.peft={r:0}"], ["model.peft.r=0 must be an integer >= 1"]),
    (["model.peft=dora"], ["model.peft=dora is not a method mtl knows; use model.peft=lora"]),
    (["model.peft={rank:4}"], ["model.peft.rank is not a LoRA option; use r, alpha, dropout"]),
    (["model.peft={per_task:yes}"], ["model.peft.per_task=yes must be true or false"]),
    (["model.peft={alpha:abc}"], ["model.peft.alpha='abc' must be a number > 0"]),
    (["model.peft={r:true}"], ["model.peft.r=True must be an integer >= 1"]),
    (["model.peft={target_modules:[1]}"], ["model.peft.target_modules=[1] must be a module name"]),
    (["model.peft={_target_:os.system}"], ["model.peft._target_='os.system' is a function, not"]),
    (
        ["model.peft={target_modules:[nope]}"],
        ["model.peft: Target modules {'nope'} not found", "linear layers are dense, key, query"],
    ),
    (["+model.loss_weights.nope=1"], ["model.loss_weights names unknown task(s) ['nope']"]),
    (["model.name_or_path=not_a_model"], ["model.name_or_path: tokenizer 'not_a_model'"]),
    (["model.name_or_path=/no/such/model"], ["model.name_or_path: tokenizer '/no/such/model'"]),
    (["model.tokenizer=not_a_model"], ["model.tokenizer: tokenizer 'not_a_model'"]),
    (["model.config.hidden_size=abc"], ["model.config:", "hidden_size"]),
    # logger, data, seed, top level
    (["logger.backend=tensorboard"], ["logger.backend='tensorboard' is not one of wandb, none"]),
    (["+logger.foo=1"], ["unknown key logger.foo", "LoggerConfig has"]),
    (["data.max_examples=0"], ["data.max_examples=0 must be >= 1"]),
    (["+data.max_example=5"], ["unknown key data.max_example", "did you mean max_examples?"]),
    (["data.num_workers=-1"], ["data.num_workers=-1 must be >= 0"]),
    (["seed=abc"], ["bad value for seed"]),
    (["+sed=1"], ["unknown key sed", "did you mean seed?"]),
    # task
    (["task=[]"], ["no task selected", "task=[name,...]"]),
    (["task=[synthetic_cls,synthetic_cls]"], ["task synthetic_cls given twice"]),
    (["+task.synthetic_cls.text_colum=x"], ["unknown key task.synthetic_cls.text_colum"]),
    (["task.synthetic_cls.max_length=0"], ["task.synthetic_cls.max_length=0 must be >= 2"]),
    (["task.synthetic_cls.batch_size=0"], ["task.synthetic_cls.batch_size=0 must be >= 1"]),
    (["task.synthetic_cls.dev_fraction=1"], ["task.synthetic_cls.dev_fraction=1.0 must be in"]),
    (["task.synthetic_cls.type=nope"], ["task.synthetic_cls.type='nope' is not a task type"]),
    (["task.synthetic_cls.metrics=[nope]"], ["nope", "accuracy"]),
    (["task.synthetic_cls.metrics=[]"], ["task.synthetic_cls.metrics=[] names no metric"]),
    (["task.synthetic_cls.label_names=[]"], ["task.synthetic_cls.label_names=[] names no label"]),
    (["task.synthetic_cls.type=mtl.nope.Cls"], ["type='mtl.nope.Cls': mtl has no 'nope'"]),
    (["task=[no_package]"], ["task/no_package.yaml", "'# @package task.no_package'"]),
    (["task=[missing_file]"], ["data/nope.csv"]),
    (["task=[empty_file]"], ["empty_file", "data/empty.csv"]),
    (["task=[header_only]"], ["header_only", "train split has 0 rows"]),
    (["task=[five_labels]"], ["five_labels", "label_names"]),
    (["task=[twice]"], ["data/twice.csv: the header names column 'label' twice (columns 2 and 3)"]),
    (
        ["task=[one_class]", "task.one_class.label_names=null"],
        [
            "task 'one_class', train split (64 sampled rows: data.max_examples)",
            "'pos', one class",
        ],
    ),
    (
        [
            "task=[one_class]",
            "task.one_class.label_names=null",
            "+task.one_class.max_train_examples=20",
        ],
        [
            "task 'one_class', train split (20 sampled rows: task.one_class.max_train_examples)",
            "'pos', one class",
        ],
    ),
    (["task=[constant]"], ["every value in column 'score' is 1.5", "constant target"]),
    (["task=[same_set]"], ["every row in column 'tags' has the label set ['a', 'b']"]),
    (["task=[first_choice]"], ["every row's answer (column 'label') is choice 0"]),
    # a key its own task file does not write is added with + (the file names no type schema)
    (["task=[with_test]", "+task.with_test.text_column=txt"], ["'txt' missing from the train"]),
    # loader and sampler (their classes' arguments)
    (["loader.weighting=heavy"], ["weighting: got 'heavy'; use one of proportional"]),
    (["sampler.sort_bs_num=0"], ["sampler: sort_bs_num: got 0; use an integer >= 1"]),
    # mixtures: a temperature at either end, stages, caps
    (["loader.temperature_end=0"], ["temperature_end: got 0.0; use a number > 0"]),
    (["loader.weighting=temperature", "loader.temperature=-1"], ["temperature: got -1"]),
    (
        ["loader.stages=[{until:0.75},{until:0.25},{}]"],
        ["stages[1].until: 0.25 (step 1) does not come after 0.75 (step 3)"],
    ),
    (["loader.stages=[{until:100000},{}]"], ["past the run's end"]),
    (["loader.max_passes=0"], ["max_passes: task", "use a number of passes > 0"]),
    (["loader.online={policy:exp3,update_every:50}"], ["above the run's", "give at most"]),
    (["loader.online={policy:dev_gap,update_every:2}"], ["give trainer.eval_every=<steps>"]),
    (["loader.online={policy:exp3,update_every:0}"], ["update_every: got 0"]),
    (
        ["loader.online={policy:exp3,update_every:2,options:{exploration:1.5}}"],
        ["loader.online.exploration: got 1.5; with", "give a number in [0, 1/"],
    ),
    (
        ["loader.online={policy:os.system,update_every:2,options:{command:touch}}"],
        ["loader.online.policy='os.system' is a function, not a subclass of builtins.object"],
    ),
    (["loader.temperature_end=2"], ["temperature_end=2.0 moves the temperature of weighting="]),
    (
        ["loader.max_passes=1", "loader.steps_per_epoch=100000", "loader.exhaust=null"],
        ["every task in play has reached its cap"],
    ),
    (["loader.temperature_end=2", "loader.shape=steps"], ["shape: got 'steps'"]),
    (["loader.weightng=uniform"], ["unknown key loader.weightng", "did you mean weighting?"]),
    (["+loader.weightng=uniform"], ["unknown key loader.weightng", "did you mean weighting?"]),
    (
        ["loader._target_=mtl.loaders.RandomLoadr"],
        ["loader._target_='mtl.loaders.RandomLoadr'", "did you mean RandomLoader?"],
    ),
    (["sampler._target_=nope.Sampler"], ["sampler._target_='nope.Sampler'", "no module"]),
    (["sampler=no_partial"], ["sampler:", "_partial_: true"]),
    (["+sampler.sort_bs=3"], ["unknown key sampler.sort_bs", "did you mean sort_bs_num?"]),
    # hydra
    (["hydra/launcher=slurm"], ["pip install hydra-submitit-launcher"]),
    (["experiment=nope"], ["unknown experiment 'nope'; choose from bundled,"]),
    (["hparams_search=mixin"], ["unknown hparams_search 'mixin'; choose from mixing"]),
    (["debug=fats"], ["unknown debug 'fats'; choose from fast"]),
    (["hparams_search=mixing", "hydra.sweeper.n_trials=0"], ["hydra.sweeper.n_trials=0 must be"]),
    (["hparams_search=mixing", "hydra.sweeper.n_jobs=0"], ["hydra.sweeper.n_jobs=0 must be"]),
]


# Cases whose check is the same code as a case above them (another key's range, Literal, type,
# unknown key, optional group): `slow`, so the fast subset keeps one case of each check.
SAME_CHECK = {
    "trainer.head_lr=0",
    "trainer.epochs=0",
    "trainer.grad_accum=0",
    "trainer.eval_batch_size=-1",
    "trainer.max_steps=0",
    "trainer.keep_last=0",
    "trainer.warmup_ratio=1.5",
    "trainer.max_grad_norm=-1",
    "trainer.weight_decay=-0.1",
    "trainer.monitor_mode=up",
    "logger.backend=tensorboard",
    "trainer.lr=fast",
    "seed=abc",
    "+logger.foo=1",
    "+data.max_example=5",
    "data.num_workers=-1",
    "task.synthetic_cls.batch_size=0",
    "task.synthetic_cls.dev_fraction=1",
    "hparams_search=mixin",
    "debug=fats",
    "hparams_search=mixing hydra.sweeper.n_jobs=0",
    "+loader.weightng=uniform",
}


def case_param(overrides: list[str], expected: list[str]):
    name = " ".join(overrides)
    marks = [pytest.mark.slow] if name in SAME_CHECK else []
    return pytest.param(overrides, expected, id=name, marks=marks)


@pytest.mark.parametrize(("overrides", "expected"), [case_param(*case) for case in CASES])
def test_bad_input_gives_one_line_and_leaves_no_run_folder(project, mtl_train, overrides, expected):
    line = one_error_line(*mtl_train(*overrides))
    for part in expected:
        assert part in line, line
    nothing_left(project)


def test_online_logging_without_credentials_is_refused_up_front(project, mtl_train, monkeypatch):
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(project / "no_netrc"))
    line = one_error_line(*mtl_train("logger.backend=wandb", "logger.mode=online"))
    assert "logger.mode=online needs W&B credentials" in line
    assert "wandb login" in line and "logger.mode=offline" in line
    nothing_left(project)


def test_a_netrc_entry_for_the_wandb_host_counts_as_credentials(tmp_path, monkeypatch):
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    netrc = tmp_path / "netrc"
    netrc.write_text("machine example.org login user password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    assert not has_wandb_credentials()
    netrc.write_text(f"machine api.wandb.ai login user password {'a' * 40}\n")
    assert has_wandb_credentials()
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    monkeypatch.setenv("WANDB_API_KEY", "b" * 40)
    assert has_wandb_credentials()


def test_a_refused_run_keeps_a_users_folder(project, mtl_train):
    """A refused run removes only the folder it made itself (CASES above: the run folder and the
    date folder above it), never one that was there before, and writes nothing into that one
    (not even the empty log Hydra's logging opens at start)."""
    mine = project / "my_run"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    before = file_digests(mine)
    one_error_line(*mtl_train("trainer.epochs=0", f"hydra.run.dir={mine}"))
    assert file_digests(mine) == before
