"""``--push URL`` and its options, shared by ``record`` and ``watch`` (docs/export.md, "Push to
a backend"). Credentials may come from the environment so that they stay out of ``ps``."""

from __future__ import annotations

import argparse
import os
import urllib.parse
from typing import TYPE_CHECKING

from infertop.errors import UsageError

if TYPE_CHECKING:
    from infertop.push.live import PushOptions

ENV_TENANT = "INFERTOP_PUSH_TENANT"
ENV_USER = "INFERTOP_PUSH_USER"
ENV_TOKEN = "INFERTOP_PUSH_TOKEN"


def add_push_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "push to a profiling backend",
        "one pprof of the CPU samples per interval, per process, labelled by stage and thread",
    )
    g.add_argument(
        "--push", metavar="URL",
        help="send profiles to the backend at URL, e.g. http://pyroscope:4040 (the request "
        "path is added); never holds up the sampling",
    )  # fmt: skip
    g.add_argument(
        "--push-to", choices=("pyroscope", "parca"), default="pyroscope",
        help="the backend's API: pyroscope (push.v1.PusherService/Push, the default) or parca "
        "(profiles/writeraw)",
    )  # fmt: skip
    g.add_argument(
        "--push-otlp", metavar="URL",
        help="experimental: send OTLP profiles (ExportProfilesServiceRequest, protobuf) to "
        "URL/v1development/profiles, e.g. an OpenTelemetry Collector at http://otel:4318; "
        "instead of --push",
    )  # fmt: skip
    g.add_argument(
        "--push-interval", type=float, default=15.0, metavar="S",
        help="one profile every S seconds (default 15)",
    )  # fmt: skip
    g.add_argument(
        "--service", metavar="NAME",
        help="the service_name label (default: the target's script or module, e.g. serve)",
    )  # fmt: skip
    g.add_argument(
        "--push-label", action="append", default=[], metavar="NAME=VALUE",
        help="one more series label, repeatable, e.g. --push-label env=prod (keep them few "
        "and steady: the stage is a sample label already)",
    )  # fmt: skip
    g.add_argument(
        "--push-tenant", metavar="ID",
        help=f"X-Scope-OrgID of a multi-tenant backend (or {ENV_TENANT})",
    )  # fmt: skip
    g.add_argument(
        "--push-user", metavar="USER:PASSWORD",
        help=f"basic auth (or {ENV_USER}, which keeps it out of ps)",
    )  # fmt: skip
    g.add_argument("--push-token", metavar="TOKEN", help=f"bearer auth (or {ENV_TOKEN})")
    g.add_argument(
        "--push-spool", metavar="DIR",
        help="where profiles wait while the backend is down (default "
        "~/.cache/infertop/push-spool; 'none': keep none, drop what the queue cannot hold)",
    )  # fmt: skip
    g.add_argument(
        "--push-spool-mb", type=float, default=64.0, metavar="MB",
        help="the spool's size limit; past it the oldest profiles go (default 64)",
    )  # fmt: skip


def push_options(args: argparse.Namespace) -> PushOptions | None:
    """The push asked for, checked (one usage error each), or None without ``--push``."""
    if getattr(args, "push", None) and getattr(args, "push_otlp", None):
        raise UsageError(
            "--push and --push-otlp both given", "one backend per run: give one of them"
        )
    if not getattr(args, "push", None) and not getattr(args, "push_otlp", None):
        for flag in ("service", "push_tenant", "push_user", "push_token", "push_spool"):
            if getattr(args, flag, None):
                raise UsageError(
                    f"--{flag.replace('_', '-')} needs --push URL (or --push-otlp URL)",
                    "e.g. --push http://pyroscope:4040",
                )
        return None
    # imported here: the push (urllib, the pprof builder) loads only when asked for
    from infertop.push.backends import Endpoint, label_name
    from infertop.push.live import MIB, PushOptions
    from infertop.push.spool import default_folder

    kind = "otlp" if args.push_otlp else args.push_to
    if kind == "otlp":
        from infertop.push.otlp import available

        missing = available()
        if missing is not None:
            raise UsageError(missing, "or push to Pyroscope or Parca with --push URL")
    url = (args.push_otlp or args.push).strip()
    flag = "--push-otlp" if args.push_otlp else "--push"
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise UsageError(f"{flag} {url!r} is not an http(s) URL", "e.g. http://pyroscope:4040")
    if not 1 <= args.push_interval <= 3600:
        raise UsageError(f"--push-interval {args.push_interval:g} is out of range", "use 1..3600 s")
    if args.push_spool_mb <= 0:
        raise UsageError("--push-spool-mb must be positive", "or --push-spool none")
    labels = []
    for text in args.push_label:
        name, eq, value = text.partition("=")
        if not eq or not name.strip() or not value:
            raise UsageError(
                f"--push-label {text!r} is not NAME=VALUE", "e.g. --push-label env=prod"
            )
        labels.append((label_name(name), value))
    basic = args.push_user or os.environ.get(ENV_USER) or None
    if basic is not None and ":" not in basic:
        raise UsageError("--push-user takes USER:PASSWORD", f"or set {ENV_USER}=USER:PASSWORD")
    spool = args.push_spool or default_folder()
    if spool.lower() != "none":
        try:
            os.makedirs(spool, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"cannot create --push-spool {spool}: {exc.strerror or exc}",
                "give --push-spool a folder you can write to, or --push-spool none",
            ) from None
        if not os.access(spool, os.W_OK | os.X_OK):
            raise UsageError(
                f"cannot write to --push-spool {spool}",
                "give --push-spool a folder you can write to, or --push-spool none",
            )
    endpoint = Endpoint.of(
        kind,
        url,
        tenant=args.push_tenant or os.environ.get(ENV_TENANT) or None,
        basic=basic,
        token=args.push_token or os.environ.get(ENV_TOKEN) or None,
    )
    return PushOptions(
        endpoint=endpoint,
        interval_s=args.push_interval,
        service=args.service,
        labels=tuple(labels),
        spool_dir=None if spool.lower() == "none" else spool,
        spool_bytes=int(args.push_spool_mb * MIB),
    )
