"""The pprof profile format (``perftools.profiles``, profile.proto) as protobuf message classes.

The messages are declared here, field for field after the published profile.proto (names,
numbers and types), as a descriptor the ``protobuf`` package turns into classes at import: the
encoding is the protobuf library's, and no protoc step is needed at install. Only the fields
infertop writes or a reader needs are declared; a field a newer profile.proto adds is skipped
by readers of this one, as protobuf does with unknown fields.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "perftools.profiles"

_T = descriptor_pb2.FieldDescriptorProto
_INT64, _UINT64, _STRING, _BOOL, _MSG = (
    _T.TYPE_INT64, _T.TYPE_UINT64, _T.TYPE_STRING, _T.TYPE_BOOL, _T.TYPE_MESSAGE,
)  # fmt: skip

#: message -> (field, number, type, repeated, message type)
_MESSAGES: dict[str, tuple[tuple[str, int, int, bool, str], ...]] = {
    "Profile": (
        ("sample_type", 1, _MSG, True, "ValueType"),
        ("sample", 2, _MSG, True, "Sample"),
        ("mapping", 3, _MSG, True, "Mapping"),
        ("location", 4, _MSG, True, "Location"),
        ("function", 5, _MSG, True, "Function"),
        ("string_table", 6, _STRING, True, ""),
        ("drop_frames", 7, _INT64, False, ""),
        ("keep_frames", 8, _INT64, False, ""),
        ("time_nanos", 9, _INT64, False, ""),
        ("duration_nanos", 10, _INT64, False, ""),
        ("period_type", 11, _MSG, False, "ValueType"),
        ("period", 12, _INT64, False, ""),
        ("comment", 13, _INT64, True, ""),
        ("default_sample_type", 14, _INT64, False, ""),
    ),
    "ValueType": (("type", 1, _INT64, False, ""), ("unit", 2, _INT64, False, "")),
    "Sample": (
        ("location_id", 1, _UINT64, True, ""),
        ("value", 2, _INT64, True, ""),
        ("label", 3, _MSG, True, "Label"),
    ),
    "Label": (
        ("key", 1, _INT64, False, ""),
        ("str", 2, _INT64, False, ""),
        ("num", 3, _INT64, False, ""),
        ("num_unit", 4, _INT64, False, ""),
    ),
    "Mapping": (
        ("id", 1, _UINT64, False, ""),
        ("memory_start", 2, _UINT64, False, ""),
        ("memory_limit", 3, _UINT64, False, ""),
        ("file_offset", 4, _UINT64, False, ""),
        ("filename", 5, _INT64, False, ""),
        ("build_id", 6, _INT64, False, ""),
        ("has_functions", 7, _BOOL, False, ""),
        ("has_filenames", 8, _BOOL, False, ""),
        ("has_line_numbers", 9, _BOOL, False, ""),
        ("has_inline_frames", 10, _BOOL, False, ""),
    ),
    "Location": (
        ("id", 1, _UINT64, False, ""),
        ("mapping_id", 2, _UINT64, False, ""),
        ("address", 3, _UINT64, False, ""),
        ("line", 4, _MSG, True, "Line"),
        ("is_folded", 5, _BOOL, False, ""),
    ),
    "Line": (("function_id", 1, _UINT64, False, ""), ("line", 2, _INT64, False, "")),
    "Function": (
        ("id", 1, _UINT64, False, ""),
        ("name", 2, _INT64, False, ""),
        ("system_name", 3, _INT64, False, ""),
        ("filename", 4, _INT64, False, ""),
        ("start_line", 5, _INT64, False, ""),
    ),
}


def _file() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(
        name="infertop/perftools_profile.proto", package=PACKAGE, syntax="proto3"
    )
    for name, fields in _MESSAGES.items():
        msg = fd.message_type.add(name=name)
        for fname, number, ftype, repeated, ref in fields:
            f = msg.field.add(name=fname, number=number, type=ftype, json_name=_camel(fname))
            f.label = _T.LABEL_REPEATED if repeated else _T.LABEL_OPTIONAL
            if ref:
                f.type_name = f".{PACKAGE}.{ref}"
    return fd


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_file())


def _cls(name: str):  # noqa: ANN202 - a generated message class
    return message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))


Profile = _cls("Profile")
ValueType = _cls("ValueType")
Sample = _cls("Sample")
Label = _cls("Label")
Mapping = _cls("Mapping")
Location = _cls("Location")
Line = _cls("Line")
Function = _cls("Function")
