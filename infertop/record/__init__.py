"""The .infertop recording: format, writer, readers, import of traces and rank directories, merge
(layer: record, above analysis). Import the modules by name."""

__all__ = [
    "clock",
    "format",
    "gpu_format",
    "import_kineto",
    "import_ranks",
    "importer",
    "merge",
    "merge_gpu",
    "reader",
    "references",
    "remap",
    "stream",
    "writer",
]
