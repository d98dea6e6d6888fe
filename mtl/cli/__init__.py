"""The console scripts, one module each (`pyproject.toml` `[project.scripts]`): `mtl-train`
(`entry`, whose `--help` answers at once, then `train`), `mtl-export`, `mtl-predict`,
`mtl-report`, `mtl-workspace`, `mtl-dry-run`. Each parses
its arguments before it imports what it runs, so `--help` and argument errors answer at once."""
