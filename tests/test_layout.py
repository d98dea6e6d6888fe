"""The shape of the package: the layering contract, few top-level modules, short functions, few
function-level imports of mtl's own modules (each saying why), no private attribute read across
modules. Each check lists its offenders."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mtl"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

MAX_TOP_MODULES = 6
MAX_FUNCTION_LINES = 60
MAX_LOCAL_IMPORTS = 9  # each a command's --help answering before torch is imported


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def parsed() -> list[tuple[str, list[str], ast.Module]]:
    """(path relative to the checkout, lines, tree) of every module in mtl/."""
    out = []
    for path in sources():
        text = path.read_text()
        out.append((str(path.relative_to(ROOT)), text.splitlines(), ast.parse(text)))
    return out


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """`lint-imports` on the package under `root`, with the contract of `root`/pyproject.toml."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True, text=True
    )


# -- the layering contract --------------------------------------------------------------------


def test_layering_contract_is_kept():
    result = lint_imports(ROOT)
    broken = result.stdout[result.stdout.find("Broken contracts") :]
    assert result.returncode == 0, broken[-3000:] + result.stderr[-2000:]
    assert "BROKEN" not in result.stdout


def test_an_upward_import_breaks_the_layering_contract(tmp_path):
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copytree(PACKAGE, tmp_path / "mtl", ignore=shutil.ignore_patterns("__pycache__"))
    errors = tmp_path / "mtl" / "errors.py"
    errors.write_text(errors.read_text() + "\nimport mtl.cli  # noqa: E402,F401\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout
    assert "mtl.errors is not allowed to import mtl.cli" in result.stdout, result.stdout
    assert "- mtl.errors -> mtl.cli" in result.stdout, result.stdout


def test_every_subpackage_has_a_layer():
    text = (ROOT / "pyproject.toml").read_text()
    layers = re.search(r"^layers = \[(.*?)^\]", text, re.S | re.M)
    assert layers, "no layers in [tool.importlinter] of pyproject.toml"
    named = set(re.findall(r"mtl\.(\w+)", layers.group(1)))
    parts = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    parts |= {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "testing"}
    assert parts <= named, f"not in the layering contract: {sorted(parts - named)}"


# -- the shape --------------------------------------------------------------------------------


def test_at_most_six_modules_directly_under_mtl():
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= MAX_TOP_MODULES, f"{len(modules)} modules in mtl/: {modules}"


def function_lengths() -> list[tuple[int, str]]:
    """(lines, where) of every function in mtl/, decorators excluded."""
    found = []
    for name, _, tree in parsed():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                found.append((lines, f"{name}:{node.lineno} {node.name} ({lines} lines)"))
    return found


def test_no_function_over_60_lines():
    long = [where for lines, where in sorted(function_lengths()) if lines > MAX_FUNCTION_LINES]
    assert not long, f"{len(long)} functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def local_imports() -> list[tuple[str, bool]]:
    """(where, has a comment) of each import of mtl's own modules inside a function in mtl/.
    The comment is on the import's first line or the line above it."""
    found = []
    for name, lines, tree in parsed():
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if own_import(node):
                    above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                    why = "#" in lines[node.lineno - 1] or above.startswith("#")
                    found.append((f"{name}:{node.lineno} {lines[node.lineno - 1].strip()}", why))
    return sorted(set(found))


def own_import(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(alias.name == "mtl" or alias.name.startswith("mtl.") for alias in node.names)
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        return node.level > 0 or module == "mtl" or module.startswith("mtl.")
    return False


def test_few_function_level_imports_of_mtl():
    found = [where for where, _ in local_imports()]
    assert len(found) <= MAX_LOCAL_IMPORTS, (
        f"{len(found)} imports of mtl's own modules inside functions (at most "
        f"{MAX_LOCAL_IMPORTS}):\n" + "\n".join(found)
    )


def test_each_function_level_import_of_mtl_says_why():
    silent = [where for where, why in local_imports() if not why]
    assert not silent, "function-level imports of mtl with no comment saying why:\n" + "\n".join(
        silent
    )


# Private attributes of other libraries mtl reads on purpose, each because no public API does it.
ALLOWED_PRIVATE_READS = {
    # accelerate keeps one precision per process and has no public reset: the jobs of a Hydra
    # multirun (one process) each set their own `trainer.mixed_precision` (`make_accelerator`).
    "AcceleratorState._reset_state",
}


def private_reads() -> list[str]:
    """Where a module reads `x._name` of an object other than self/cls (dunders and Hydra's
    `_key_` config keys allowed)."""
    found = []
    for name, _, tree in parsed():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
                continue
            if node.attr.endswith("_"):  # a dunder, or a Hydra config key such as `_target_`
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if ast.unparse(node) in ALLOWED_PRIVATE_READS:
                continue
            found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_no_module_reads_another_objects_private_attributes():
    found = private_reads()
    assert not found, f"{len(found)} private attributes read:\n" + "\n".join(found)


def private_imports() -> list[str]:
    """Where a module imports a private name or module (`from a._b import c`, `from a import _b`)
    of another module, in mtl or outside it."""
    found = []
    for name, lines, tree in parsed():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                names = [*(node.module or "").split("."), *(a.name for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [part for a in node.names for part in a.name.split(".")]
            else:
                continue
            if any(part.startswith("_") and not part.endswith("__") for part in names):
                found.append(f"{name}:{node.lineno} {lines[node.lineno - 1].strip()}")
    return found


# Private names of other libraries mtl uses on purpose, each because no public API does it.
ALLOWED_PRIVATE_IMPORTS = {
    # The default process group may be started before the config is read (`start_launch`);
    # torch has no public call that changes its timeout afterwards (`trainer.dist_timeout_s`).
    "from torch.distributed.distributed_c10d import _set_pg_timeout",
    # torch.compile has no public count of the graphs it compiled (`compile/graphs`,
    # `compile/recompiles` of trainer.compile).
    "from torch._dynamo.utils import counters",
}


def test_no_module_imports_private_names():
    found = [f for f in private_imports() if f.split(" ", 1)[1] not in ALLOWED_PRIVATE_IMPORTS]
    assert not found, f"{len(found)} private names imported:\n" + "\n".join(found)
