"""The console scripts, one module each (`pyproject.toml` `[project.scripts]`): `mtl-train`
(`train`), `mtl-export`, `mtl-predict`, `mtl-report`, `mtl-workspace`, `mtl-dry-run`. Each parses
its arguments before it imports what it runs, so `--help` and argument errors answer at once."""
