"""The agent's socket: listening, one client at a time, the protocol's messages and commands."""

from __future__ import annotations

import os
import select
import socket
import sys
import threading
import time

# -- imported as a module (payload_source leaves these lines out) --
from infertop.agent.payload.constants import (
    AGENT_NAME,
    DEFAULT_CONFIG,
    LIMITS,
    MAX_STAGE_FUNCTIONS,
    MODEL_SCAN_IDLE_S,
    MODEL_SCAN_S,
    SEND_TIMEOUT_S,
)
from infertop.agent.payload.generation import find_generation_codes, transformers_warning
from infertop.agent.payload.monitor import _Monitor
from infertop.agent.payload.safe_reads import CollectorOff
from infertop.agent.payload.stages import (
    _CALL_FILTERS,
    _RETURN_FILTERS,
    BODY_FILTERS,
    MAX_MODEL_CODES,
    find_known_codes,
    find_model_codes,
    find_stage_codes,
    models_on_stacks,
    parse_stage_patterns,
)
from infertop.agent.payload.window import _cuda_in_use, _torch
from infertop.agent.protocol import (
    FrameDecoder,
    ProtocolError,
    encode_msg,
    ensure_socket_dir,
    is_stale_socket,
    peer_allowed,
    peer_uid,
    socket_path,
    sweep_stale_sockets,
)

# -- end --


class _ServingMixin:
    """The listening socket and the one client: accepting, reading, sending, the commands."""

    def _init_serving(self):
        self.config = dict(DEFAULT_CONFIG)
        self.path = None
        self.listener = None
        self.client = None
        self.decoder = None
        self.session = False  # a client configured or started something
        self.idle_since = time.monotonic()
        self.statuses_sent = set()
        self.pattern_codes = {}  # the user's stage rules' functions (configure)
        self.model_codes = []  # the models' forwards timed (configure, then _tick_models)
        self.next_model_scan = float("inf")

    def open(self):
        # the socket folder is shared by every agent and injector of this user, and each one
        # removes it when it is empty on its way out: one may do so between our making sure
        # of it and our bind. Then the bind finds no folder: make sure of it again.
        for attempt in range(5):
            try:
                return self._open_once()
            except FileNotFoundError:
                if attempt == 4:
                    raise

    def _open_once(self):
        uid = os.geteuid()
        sweep_stale_sockets(ensure_socket_dir(uid))  # what killed agents left behind
        path = socket_path(os.getpid(), uid)
        if os.path.exists(path) or os.path.islink(path):
            if os.path.islink(path) or not is_stale_socket(path):
                raise RuntimeError("%s is in use by another agent" % path)
            os.unlink(path)
        # bind under a temporary name and rename: the socket appears already listening, 0600
        tmp = "%s.%d.tmp" % (path, threading.get_native_id())
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            sock.bind(tmp)
            os.chmod(tmp, 0o600)
            sock.listen(4)
            sock.setblocking(False)
            os.rename(tmp, path)
        except BaseException:
            sock.close()
            for p in (tmp, path):
                try:
                    os.unlink(p)
                except OSError:
                    pass
            raise
        self.listener = sock
        self.path = path

    # -- connections --------------------------------------------------------------------------

    def _accept(self):
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
        try:
            uid = peer_uid(conn)
        except OSError:
            uid = -1
        if not peer_allowed(uid):
            conn.close()  # not ours to talk to: no reply at all
            return
        if self.client is not None:
            probe = select.poll()
            probe.register(self.client.fileno(), select.POLLIN)
            if probe.poll(0):
                self._read_client()  # maybe it has just gone
        if self.client is not None:
            try:
                conn.settimeout(0.2)
                try:
                    conn.recv(4096)  # its hello first: closing on unread data resets the peer
                except OSError:
                    pass
                conn.settimeout(1.0)
                conn.sendall(encode_msg({"type": "error", "message": "another client is connected"}))
            except Exception:
                pass
            conn.close()
            return
        conn.settimeout(SEND_TIMEOUT_S)
        self.client = conn
        self.decoder = FrameDecoder()
        self.session = False

    def _read_client(self):
        try:
            data = self.client.recv(65536)
        except socket.timeout:
            return
        except OSError:
            data = b""
        if not data:
            self._client_gone()
            return
        try:
            messages = self.decoder.feed(data)
        except ProtocolError as exc:
            self._send({"type": "error", "message": "protocol error: %s" % exc})
            self._client_gone()
            return
        for msg in messages:
            if self.client is None:
                return
            self._handle(msg)

    def _send(self, obj):
        client = self.client
        if client is None:
            return False
        try:
            data = encode_msg(obj)
        except ProtocolError:
            return False
        try:
            client.sendall(data)
        except OSError:
            self._client_gone()
            return False
        return True

    def _close_client(self):
        client, self.client = self.client, None
        self.decoder = None
        self._end_snapshots()  # a recording stops with its client; uncollected files go
        self.idle_since = time.monotonic()
        if client is not None:
            try:
                client.close()
            except OSError:
                pass

    def _client_gone(self):
        """Leaving without detach counts as detach once the client configured or started
        something; a client that only said hello (a probe) just goes."""
        if self.session:
            self._detach()
        else:
            self._close_client()

    # -- commands -----------------------------------------------------------------------------

    def _handle(self, msg):
        cmd = msg.get("cmd")
        if cmd == "hello":
            self._send(self._hello())
        elif cmd == "configure":
            self.session = True
            try:
                self._configure(msg)
            except ValueError as exc:
                self._send({"type": "error", "message": "configure: %s" % exc})
                return
            self._send({"type": "ok", "cmd": "configure", "config": dict(self.config)})
        elif cmd == "start":
            self.session = True
            self._send({"type": "ok", "cmd": "start"})
            self._start()
        elif cmd == "stop":
            self.started = False
            if self.window is not None:
                self._end_window(send=self.client is not None)
            self._stop_collection()
            self._send({"type": "ok", "cmd": "stop"})
        elif cmd == "profile_now":
            started, why = self._profile_now()
            reply = {"type": "ok", "cmd": "profile_now", "started": started}
            if why:
                reply["reason"] = why
            self._send(reply)
        elif cmd == "memory_snapshot":
            self._memory_snapshot_cmd(msg)
        elif cmd == "oom_snapshot":
            self._oom_snapshot_cmd(msg)
        elif cmd == "detach":
            self._send({"type": "ok", "cmd": "detach"})
            self._detach()
        else:
            self._send({"type": "error", "message": "unknown command %r" % (cmd,)})

    def _hello(self):
        torch = _torch()
        if torch is not None and not self.kineto_ready:
            self.prepare_torch(on_this_thread=False)
        return {
            "type": "hello",
            "agent": AGENT_NAME,
            "pid": os.getpid(),
            "python": "%d.%d.%d" % sys.version_info[:3],
            "torch": getattr(torch, "__version__", None) if torch is not None else None,
            "cuda": _cuda_in_use(torch) if torch is not None else False,
            "armed": self.mode == "armed",
            "monitoring": _Monitor.available(),
            # how stage functions are timed: sys.monitoring (3.12+), else wrapped in place
            "timer": "monitoring" if _Monitor.available() else "wrappers",
            "all_threads": bool(self.all_threads),
            "agent_tid": self.thread.native_id if self.thread is not None else None,
        }

    def _configure(self, msg):
        new = dict(self.config)
        for key in ("window_s", "period_s", "call_sample_hz"):
            if key in msg:
                value = msg[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                    raise ValueError("%s must be a number" % key)
                lo, hi = LIMITS[key]
                new[key] = float(min(max(value, lo), hi))
        if "max_events" in msg:
            value = msg["max_events"]
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError("max_events must be an integer")
            lo, hi = LIMITS["max_events"]
            new["max_events"] = int(min(max(value, lo), hi))
        for key in ("pauses", "known_entry_points", "profile_memory"):
            if key in msg:
                if not isinstance(msg[key], bool):
                    raise ValueError("%s must be true or false" % key)
                new[key] = msg[key]
        if "record_shapes" in msg:
            if not isinstance(msg["record_shapes"], bool):
                raise ValueError("record_shapes must be true or false")
            new["record_shapes"] = msg["record_shapes"]
        patterns = None
        if "stage_functions" in msg:
            patterns = parse_stage_patterns(msg["stage_functions"])
            new["stage_functions"] = [list(p) for p in msg["stage_functions"]]
        if "generate_functions" in msg:
            items = msg["generate_functions"]
            if not isinstance(items, list) or not all(isinstance(x, str) and x for x in items):
                raise ValueError("generate_functions must be a list of patterns")
            parse_stage_patterns([["decode", x] for x in items])  # the same FILE:FUNC syntax
            new["generate_functions"] = list(items)
            if patterns is None:
                patterns = parse_stage_patterns(new["stage_functions"])
        if new["period_s"] < new["window_s"]:
            new["period_s"] = new["window_s"]
        self.config = new
        if patterns is not None:
            self.pattern_codes = find_stage_codes(patterns)
            try:
                models = find_model_codes()
            except Exception:  # an odd object in the heap: no model timed, the rest is
                models = []
            self.model_codes = list(models)
            self._set_codes()

    def _set_codes(self):
        """Time the user's rules' functions (``pattern_codes``), the generation calls, the
        known entry points and the models' forwards (``model_codes``): (re)starts the
        monitor on them."""
        new = self.config
        codes = dict(self.pattern_codes)
        models = self.model_codes
        filters, returns, bodies = {}, {}, set()
        gen_codes = self._generation_codes(new, models)
        for code, kind in gen_codes.items():
            if kind == "call" and code not in codes:
                codes[code] = "forward"  # a named loop: its prefill and decode spans
        if new.get("known_entry_points", True):
            for code, (stage, filt) in find_known_codes(models).items():
                if code not in codes:  # the user's rule for it wins
                    codes[code] = stage
                    if filt in _CALL_FILTERS:
                        filters[code] = _CALL_FILTERS[filt]
                    elif filt in _RETURN_FILTERS:
                        returns[code] = _RETURN_FILTERS[filt]
                    if filt in BODY_FILTERS:
                        bodies.add(code)
        if len(codes) > MAX_STAGE_FUNCTIONS:
            # a pattern such as "*" would time every call in the target
            self._status_once(
                "monitoring",
                "off",
                "stage rules match %d functions (more than %d): not timing them; "
                "make the patterns narrower" % (len(codes), MAX_STAGE_FUNCTIONS),
            )
            codes = {}
        was_running = self.monitor is not None
        if was_running:
            self._stop_monitor()
        self.stage_codes = codes
        self.stage_filters = {c: f for c, f in filters.items() if c in codes}
        self.stage_returns = {c: f for c, f in returns.items() if c in codes}
        self.stage_bodies = {c for c in bodies if c in codes}
        self.generation_codes = gen_codes if codes else {}
        if was_running or (self.started and codes):
            self._start_monitor()

    def _tick_models(self, now):
        """Every MODEL_SCAN_S: a model's forward running on a thread that is not timed yet (a
        model in a frozen heap, or built after the configuration) is timed from now on. One
        ``sys._current_frames()`` and a walk of each stack's code objects."""
        if now < self.next_model_scan:
            return
        self.next_model_scan = now + MODEL_SCAN_S
        if (not self.config.get("known_entry_points", True)
                or "torch.nn.modules.module" not in sys.modules
                or len(self.model_codes) >= MAX_MODEL_CODES):  # fmt: skip
            # nothing to scan for (a process without torch: an API server, a tokenizer
            # worker): a look a second, not ten, each of which takes the GIL from the target
            self.next_model_scan = now + MODEL_SCAN_IDLE_S
            return
        own = self.thread.ident if self.thread is not None else None
        with CollectorOff():  # safe_reads.py
            frames = sys._current_frames()
            try:
                found = models_on_stacks(frames, ignore=(own,))
            finally:
                frames = None
        new = [c for c in found if c not in self.model_codes and c not in self.stage_codes]
        if new:
            self.model_codes = self.model_codes + new[: MAX_MODEL_CODES - len(self.model_codes)]
            self._set_codes()

    def _generation_codes(self, config, models):
        """{code: kind} the generation tracker follows (generation.py): Hugging Face
        ``generate`` and its parts where known entry points are on, the user's
        ``generate_functions``, and the ``models``' forwards inside either."""
        user = parse_stage_patterns([["decode", x] for x in config.get("generate_functions") or []])
        known = config.get("known_entry_points", True)
        if not user and not known:
            return {}
        codes = find_generation_codes(user, models, known)
        warning = transformers_warning(codes) if known else None
        if warning:
            self._status_once("generation", "running", warning)
        if not any(k == "call" for k in codes.values()):
            return {}  # no generation to follow: the forwards need not be watched for one
        return codes

    def _status_once(self, key, state, message):
        if key in self.statuses_sent:
            return
        self.statuses_sent.add(key)
        self._send({"type": "status", "state": state, "message": message})
