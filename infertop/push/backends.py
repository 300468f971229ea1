"""What each backend takes: the URL path, the JSON body around the gzipped pprof, the headers.

- Pyroscope: ``POST {URL}/push.v1.PusherService/Push``, the Connect protocol's JSON form of
  push.proto's ``PushRequest``: ``{"series": [{"labels": [{"name", "value"}],
  "samples": [{"rawProfile": BASE64, "ID": UUID}]}]}``; the tenant in ``X-Scope-OrgID``.
- OTLP (experimental): ``POST {URL}/v1development/profiles``, an ``ExportProfilesServiceRequest``
  in protobuf (push/otlp.py).
- Parca: ``POST {URL}/profiles/writeraw``, the HTTP form of
  ``parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw``: ``{"series": [{"labels":
  {"labels": [{"name", "value"}]}, "samples": [{"rawProfile": BASE64}]}], "normalized": true}``.

Series labels are few and steady (``__name__``, ``service_name``, ``host``, ``pid`` and the
user's ``--push-label``): the stage and thread are the pprof samples' labels, never series
labels, so a backend's series count does not grow with them.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from infertop import __version__

KINDS = ("pyroscope", "parca", "otlp")
PATHS = {
    "pyroscope": "/push.v1.PusherService/Push",
    "parca": "/profiles/writeraw",
    "otlp": "/v1development/profiles",  # experimental: see push/otlp.py
}
PROFILE_NAME = "process_cpu"

_BAD_NAME = re.compile(r"[^A-Za-z0-9_]")

Labels = tuple[tuple[str, str], ...]


def label_name(name: str) -> str:
    """A label name both backends accept: letters, digits and ``_``, not starting with a digit
    (``pod-name`` -> ``pod_name``)."""
    out = _BAD_NAME.sub("_", name.strip()) or "_"
    return "_" + out if out[0].isdigit() else out


@dataclass(frozen=True)
class Endpoint:
    """Where profiles go and how to be let in. ``url`` is the full request URL."""

    kind: str
    url: str
    tenant: str | None = None
    basic: str | None = None  # "user:password"
    token: str | None = None  # bearer
    headers: tuple[tuple[str, str], ...] = field(default=())

    @classmethod
    def of(cls, kind: str, base: str, **kw: str | None) -> Endpoint:
        """``base`` as the user gave it (``http://host:4040``); the backend's path is added
        unless it is there already."""
        path = PATHS[kind]
        url = base.rstrip("/")
        if not url.endswith(path):
            url += path
        return cls(kind, url, **kw)  # type: ignore[arg-type]

    def request_headers(self) -> dict[str, str]:
        """The headers of every request: the auth ones are added here, at send time, and so
        never reach the spool on disk."""
        content = "application/x-protobuf" if self.kind == "otlp" else "application/json"
        h = {"Content-Type": content, "User-Agent": f"infertop/{__version__}"}
        if self.kind == "pyroscope":
            h["Connect-Protocol-Version"] = "1"
        if self.tenant:
            h["X-Scope-OrgID"] = self.tenant
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        elif self.basic:
            h["Authorization"] = "Basic " + base64.b64encode(self.basic.encode()).decode()
        h.update(self.headers)
        return h


@dataclass(frozen=True)
class Series:
    """One series of one request: its labels and the gzipped pprof of one interval."""

    labels: Labels
    profile: bytes


def encode(kind: str, series: Sequence[Series]) -> bytes:
    """The request body for ``kind`` holding ``series``."""
    if kind == "otlp":
        from infertop.push import otlp  # the opentelemetry-proto package: only when asked for

        return otlp.encode([(s.labels, s.profile) for s in series])
    out: list[dict[str, object]] = []
    for s in series:
        labels = [{"name": label_name(k), "value": v} for k, v in s.labels]
        raw = base64.b64encode(s.profile).decode("ascii")
        if kind == "pyroscope":
            out.append(
                {"labels": labels, "samples": [{"rawProfile": raw, "ID": str(uuid.uuid4())}]}
            )
        else:
            out.append({"labels": {"labels": labels}, "samples": [{"rawProfile": raw}]})
    doc: dict[str, object] = {"series": out}
    if kind == "parca":
        doc["normalized"] = True  # no addresses to normalize: the frames are Python's
    return json.dumps(doc, separators=(",", ":")).encode()


def series_labels(service: str, host: str, pid: int, extra: Labels = ()) -> Labels:
    """A process's series labels, ``__name__`` first; ``extra`` cannot replace those four."""
    own = (("__name__", PROFILE_NAME), ("service_name", service), ("host", host), ("pid", str(pid)))
    taken = {k for k, _ in own}
    return own + tuple((label_name(k), v) for k, v in extra if label_name(k) not in taken)
