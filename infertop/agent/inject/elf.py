"""Finding functions and data in a target's ELF files: the symbol tables of a library or
executable (``.dynsym``, then ``.symtab``) and where the target loaded it (its load bias).

Plain file reads (from here, or through ``/proc/PID/root`` for a target in a container); the
target is not touched.
"""

from __future__ import annotations

import os
import struct

from infertop.agent.inject.tracee import PtraceError
from infertop.procfs import Mapping


def elf_symbols(path: str, names: set[str]) -> dict[str, tuple[int, int]]:
    """{name: (st_value, st_info type)} for the wanted names, from .dynsym (then .symtab)."""
    found: dict[str, tuple[int, int]] = {}
    with open(path, "rb") as fh:
        ident = fh.read(64)
        if len(ident) < 64 or ident[:4] != b"\x7fELF":
            raise PtraceError(f"{path} is not an ELF file")
        if ident[4] != 2 or ident[5] != 1:
            raise PtraceError(f"{path} is not a 64-bit little-endian ELF file")
        (e_shoff,) = struct.unpack_from("<Q", ident, 40)
        e_shentsize, e_shnum = struct.unpack_from("<HH", ident, 58)
        if not e_shoff or not e_shnum:
            return found
        fh.seek(e_shoff)
        raw = fh.read(e_shentsize * e_shnum)
        sections = []
        for i in range(e_shnum):
            sh = struct.unpack_from("<IIQQQQIIQQ", raw, i * e_shentsize)
            sections.append(sh)  # name type flags addr offset size link info align entsize
        for wanted_type in (11, 2):  # SHT_DYNSYM, then SHT_SYMTAB
            for sh in sections:
                if sh[1] != wanted_type:
                    continue
                strtab = sections[sh[6]]
                fh.seek(strtab[4])
                strings = fh.read(strtab[5])
                fh.seek(sh[4])
                table = fh.read(sh[5])
                entsize = sh[9] or 24
                for off in range(0, len(table) - entsize + 1, entsize):
                    st_name, st_info, _other, st_shndx, st_value, _size = struct.unpack_from(
                        "<IBBHQQ", table, off
                    )
                    if not st_value or st_shndx == 0:
                        continue
                    end = strings.find(b"\0", st_name)
                    name = strings[st_name:end].decode("ascii", "replace")
                    if name in names and name not in found:
                        found[name] = (st_value, st_info & 0xF)
            if len(found) == len(names):
                break
    return found


def resolve(pid: int, path: str, names: set[str], mappings: list[Mapping]) -> dict[str, int]:
    """Absolute addresses, in process ``pid``, of the named functions/data of ``path``."""
    local = f"/proc/{pid:d}/root{path}"
    if not os.path.exists(local):
        local = path
    symbols = elf_symbols(local, names)
    bias = load_bias(local, path, mappings)
    out = {}
    for name, (value, typ) in symbols.items():
        if typ == 10:  # STT_GNU_IFUNC: the value is a resolver, not the function
            continue
        out[name] = bias + value
    return out


def load_bias(local: str, path: str, mappings: list[Mapping]) -> int:
    """Where ``path`` is loaded: its offset-0 mapping minus its lowest PT_LOAD address
    (``local`` is the same file as seen from here, e.g. through /proc/PID/root)."""
    starts = [m.start for m in mappings if m.path == path and m.offset == 0]
    if not starts:
        raise PtraceError(f"{path} has no offset-0 mapping")
    with open(local, "rb") as fh:
        hdr = fh.read(64)
        (e_phoff,) = struct.unpack_from("<Q", hdr, 32)
        e_phentsize, e_phnum = struct.unpack_from("<HH", hdr, 54)
        fh.seek(e_phoff)
        raw = fh.read(e_phentsize * e_phnum)
    lowest = None
    for i in range(e_phnum):
        p_type, _flags, _off, p_vaddr = struct.unpack_from("<IIQQ", raw, i * e_phentsize)
        if p_type == 1 and (lowest is None or p_vaddr < lowest):
            lowest = p_vaddr
    if lowest is None:
        raise PtraceError(f"{path} has no loadable segment")
    return min(starts) - (lowest & ~0xFFF)
