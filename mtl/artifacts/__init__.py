"""What mtl keeps on disk, in one package: where things are (`layout`: the run folder's
`RunLayout`, mtl's config folder, export markers, sweep job names), reading back what mtl wrote
(`files`: weights, digests, the line for a damaged file), and writing whole or not at all, never
over what a command did not make (`writes`)."""

from mtl.artifacts.files import (
    check_digests,
    damaged,
    digests_of,
    export_files,
    file_digest,
    first_unlike,
    read_weights,
)
from mtl.artifacts.layout import (
    HEADS_FILE,
    HYDRA_SPECIAL,
    JOB_NAME_LENGTH,
    TASKS_FILE,
    RunLayout,
    config_dir,
    is_export,
    job_folder_name,
    resume_override,
    step_name,
)
from mtl.artifacts.writes import (
    NO_SPACE_ERRNOS,
    NO_SPACE_TEXTS,
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    check_target,
    check_writable,
    fsync,
    no_space,
    ordinary_modes,
    out_of_space,
    umask,
    write_file,
    write_folder,
)

__all__ = [
    "HEADS_FILE",
    "HYDRA_SPECIAL",
    "JOB_NAME_LENGTH",
    "NO_SPACE_ERRNOS",
    "NO_SPACE_TEXTS",
    "RENAME_EXCHANGE",
    "RENAME_NOREPLACE",
    "RunLayout",
    "TASKS_FILE",
    "check_digests",
    "check_target",
    "check_writable",
    "config_dir",
    "damaged",
    "digests_of",
    "export_files",
    "file_digest",
    "first_unlike",
    "fsync",
    "is_export",
    "job_folder_name",
    "no_space",
    "ordinary_modes",
    "out_of_space",
    "read_weights",
    "resume_override",
    "step_name",
    "umask",
    "write_file",
    "write_folder",
]
