"""The packages: mtl's own, and the top-level conf/ shipped inside the wheel as mtl.conf (the rest
of the metadata is in pyproject.toml). Every folder of conf/ is listed as a package of its own,
so setuptools ships its YAML files without a warning per folder."""

from pathlib import Path

from setuptools import find_packages, setup

CONF = Path(__file__).resolve().parent / "conf"
conf_packages = ["mtl.conf"] + [
    "mtl.conf." + ".".join(d.relative_to(CONF).parts)
    for d in sorted(CONF.rglob("*"))
    if d.is_dir() and "__pycache__" not in d.parts
]

setup(
    packages=[*find_packages(include=["mtl", "mtl.*"]), *conf_packages],
    package_dir={"mtl.conf": "conf"},
)
