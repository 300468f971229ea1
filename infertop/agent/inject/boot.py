"""The boot file and the bootstrap: what every transport gets into the target.

The boot file (mode 0600, in the private socket directory, owned by the target's user) holds the
payload with a deadline. The bootstrap, the ~250 bytes a transport hands to
``PyRun_SimpleString`` on the target's main thread, runs that file in a fresh namespace and
cannot raise::

    try:
     exec(compile(open("/tmp/infertop-UID/boot-PID-XXXX.py","rb").read(),...),
          {"__name__":"_infertop_agent","_infertop_free":(ADDR,SIZE,HOW)})
    except BaseException:
     pass
"""

from __future__ import annotations

import os
import stat


def bootstrap(boot_file: str, address: str, size: int, free_how: str) -> str:
    """The few lines PyRun_SimpleString runs on the main thread (they bind no names in
    ``__main__`` and cannot raise); the payload frees the ``size`` bytes at ``address`` (how:
    ``free_how``) as its first act."""
    if any(c in boot_file for c in '"\\\n%'):
        raise ValueError(f"unusable boot file path {boot_file!r}")
    return (
        "try:\n"
        f' exec(compile(open("{boot_file}","rb").read(),"<infertop-agent>","exec"),'
        f'{{"__name__":"_infertop_agent","_infertop_free":({address},{size:d},"{free_how}")}})\n'
        "except BaseException:\n"
        " pass\n"
    )


def payload_source(deadline: float, boot_file: str, idle_exit_s: float) -> str:
    """The boot file's text: the payload, to start in "injected" mode unless ``deadline``
    (``time.time()``) has passed."""
    # imported here: the payload is large (~60 ms to import) and the ptrace helper process,
    # which imports this package, never needs it
    from infertop.agent.payload import payload_source as source

    return source(
        mode="injected",
        deadline=deadline,
        boot_file=boot_file,
        idle_exit_s=idle_exit_s,
        free_region_from_bootstrap=True,
    )


def write_boot_file(path: str, source: str, uid: int, gid: int) -> None:
    """Create the boot file inside the checked socket directory, and only there: the directory
    is opened once without following a link and checked on that open handle, and the file is
    created relative to it, so its owner (another user, when root injects) cannot swap the
    directory for a link between the check and the write."""
    dfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        st = os.fstat(dfd)
        if st.st_uid != uid or stat.S_IMODE(st.st_mode) != 0o700:
            raise OSError(f"{os.path.dirname(path)} changed under us (owner or mode)")
        fd = os.open(os.path.basename(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     0o600, dir_fd=dfd)  # fmt: skip
    finally:
        os.close(dfd)
    try:
        os.write(fd, source.encode("utf-8"))
        if os.geteuid() != uid:
            os.fchown(fd, uid, gid)
    finally:
        os.close(fd)


def remove(path: str | None) -> None:
    """Unlink ``path`` if there is one; never raises."""
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass
