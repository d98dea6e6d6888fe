"""The packages: mtl's own, and the top-level conf/ shipped inside the wheel as conf/ (the rest
of the metadata is in pyproject.toml)."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["mtl", "mtl.*"]), "mtl.conf"],
    package_dir={"mtl.conf": "conf"},
)
