"""OTLP profiles (experimental: the signal is in development): ``--push-otlp URL`` sends
``POST URL/v1development/profiles``, an ``ExportProfilesServiceRequest`` (protobuf, from the
``opentelemetry-proto`` package) per interval.

Each process's pprof of the interval becomes one ``ResourceProfiles``: the series labels are
its resource attributes (``service.name``, ``host.name``, ``process.pid`` and the
``--push-label`` ones), one ``Profile`` of ``cpu``/``nanoseconds`` samples whose attributes
are the pprof's sample labels (``stage``, ``thread``). The request's ``ProfilesDictionary``
holds the strings, functions, locations, stacks and attributes of all of them, each once, with
the zero value first in every table as the format requires.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Sequence

from infertop import __version__
from infertop.model import pprof_schema as pb

#: the package that holds the compiled definitions (``pip install 'infertop[otlp]'``)
PACKAGE = "opentelemetry-proto"
CONTENT_TYPE = "application/x-protobuf"

#: series label -> resource attribute (OpenTelemetry's semantic conventions)
RESOURCE_KEYS = {"service_name": "service.name", "host": "host.name", "pid": "process.pid"}


def available() -> str | None:
    """None when the definitions can be imported, else what to do."""
    try:
        import opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2  # noqa: F401
    except ImportError:
        return f"--push-otlp needs the {PACKAGE} package: pip install 'infertop[otlp]'"
    return None


class _Dictionary:
    """The request's tables, each item interned once (index 0: the zero value)."""

    def __init__(self, pd) -> None:  # pd: profiles_pb2 (the module)
        self.pd = pd
        self.d = pd.ProfilesDictionary()
        self.d.string_table.append("")
        self.d.mapping_table.add()
        self.d.location_table.add()
        self.d.function_table.add()
        self.d.link_table.add()
        self.d.attribute_table.add()
        self.d.stack_table.add()
        self._strings: dict[str, int] = {"": 0}
        self._functions: dict[tuple[int, int, int], int] = {}
        self._locations: dict[tuple[int, int, int], int] = {}
        self._stacks: dict[tuple[int, ...], int] = {}
        self._attrs: dict[tuple[str, str], int] = {}
        self.mapping = 0

    def s(self, text: str) -> int:
        i = self._strings.get(text)
        if i is None:
            i = self._strings[text] = len(self.d.string_table)
            self.d.string_table.append(text)
        return i

    def mapping_of(self, filename: str) -> int:
        if not self.mapping:
            self.d.mapping_table.add(filename_strindex=self.s(filename))
            self.mapping = 1
        return self.mapping

    def function(self, name: str, system_name: str, filename: str) -> int:
        key = (self.s(name), self.s(system_name), self.s(filename))
        i = self._functions.get(key)
        if i is None:
            i = self._functions[key] = len(self.d.function_table)
            self.d.function_table.add(
                name_strindex=key[0], system_name_strindex=key[1], filename_strindex=key[2]
            )
        return i

    def location(self, mapping: int, function: int, line: int) -> int:
        key = (mapping, function, line)
        i = self._locations.get(key)
        if i is None:
            i = self._locations[key] = len(self.d.location_table)
            loc = self.d.location_table.add(mapping_index=mapping)
            loc.lines.add(function_index=function, line=line)
        return i

    def stack(self, locations: tuple[int, ...]) -> int:
        i = self._stacks.get(locations)
        if i is None:
            i = self._stacks[locations] = len(self.d.stack_table)
            self.d.stack_table.add(location_indices=locations)
        return i

    def attribute(self, key: str, value: str) -> int:
        i = self._attrs.get((key, value))
        if i is None:
            i = self._attrs[(key, value)] = len(self.d.attribute_table)
            kv = self.d.attribute_table.add(key_strindex=self.s(key))
            kv.value.string_value = value
        return i


def _profile(dic: _Dictionary, raw: bytes, out) -> None:
    """The samples of one gzipped pprof (as ``CpuProfile`` writes it) into ``out``, an OTLP
    ``Profile``: its ``cpu``/``nanoseconds`` values, or the first type when there is none."""
    p = pb.Profile.FromString(gzip.decompress(raw))
    st = list(p.string_table)

    def text(i: int) -> str:
        return st[i] if 0 <= i < len(st) else ""

    types = [(text(t.type), text(t.unit)) for t in p.sample_type]
    col = types.index(("cpu", "nanoseconds")) if ("cpu", "nanoseconds") in types else 0
    out.sample_type.type_strindex = dic.s(types[col][0] if types else "cpu")
    out.sample_type.unit_strindex = dic.s(types[col][1] if types else "nanoseconds")
    out.period_type.type_strindex = dic.s(text(p.period_type.type))
    out.period_type.unit_strindex = dic.s(text(p.period_type.unit))
    out.period = p.period
    out.time_unix_nano = p.time_nanos
    out.duration_nano = p.duration_nanos
    out.profile_id = os.urandom(16)
    mapping = dic.mapping_of(text(p.mapping[0].filename) if p.mapping else "python")
    funcs = {
        f.id: dic.function(text(f.name), text(f.system_name), text(f.filename)) for f in p.function
    }
    locs = {}
    for loc in p.location:
        line = loc.line[0] if loc.line else None
        fid = funcs.get(line.function_id, 0) if line is not None else 0
        locs[loc.id] = dic.location(mapping, fid, line.line if line is not None else 0)
    for s in p.sample:
        attrs = [dic.attribute(text(lab.key), text(lab.str)) for lab in s.label if lab.str]
        out.samples.add(
            stack_index=dic.stack(tuple(locs.get(i, 0) for i in s.location_id)),
            attribute_indices=attrs,
            values=[s.value[col]] if len(s.value) > col else [],
        )


def encode(series: Sequence[tuple[tuple[tuple[str, str], ...], bytes]]) -> bytes:
    """An ``ExportProfilesServiceRequest`` of ``series``: (series labels, gzipped pprof) each."""
    from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
    from opentelemetry.proto.profiles.v1development import profiles_pb2 as pd

    req = svc.ExportProfilesServiceRequest()
    dic = _Dictionary(pd)
    for labels, raw in series:
        rp = req.resource_profiles.add()
        for k, v in labels:
            if k == "__name__":
                continue  # the profile's type says what it is
            attr = rp.resource.attributes.add(key=RESOURCE_KEYS.get(k, k))
            if k == "pid" and v.isdigit():
                attr.value.int_value = int(v)
            else:
                attr.value.string_value = v
        sp = rp.scope_profiles.add()
        sp.scope.name = "infertop"
        sp.scope.version = __version__
        _profile(dic, raw, sp.profiles.add())
    req.dictionary.CopyFrom(dic.d)
    return req.SerializeToString()
