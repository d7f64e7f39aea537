"""What a shared library asks of the dynamic loader, read from its ELF file without loading it: DT_NEEDED, DT_SONAME,
DT_RPATH, DT_RUNPATH (32 and 64 bit, either byte order).

Side effects: reads the file (the header, the program headers, the dynamic segment and the strings it names: each read
bounded, never the whole file); never executes, maps or imports it.
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO, Optional

from ..record import Record

MAGIC = b"\x7fELF"
MAX_PROGRAM_HEADERS = 512  # real libraries have about ten
MAX_DYNAMIC_ENTRIES = 4096  # real libraries have about forty
MAX_STRING = 4096  # bytes of one name or path list (PATH_MAX)

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29
ET_EXEC, ET_DYN = 2, 3

# (header after e_ident, program header, dynamic entry) by ELF class
_LAYOUTS = {
    1: ("HHIIIIIHHHHHH", "IIIIIIII", "iI"),  # 32 bit: p_type p_offset p_vaddr p_paddr p_filesz p_memsz p_flags p_align
    2: ("HHIQQQIHHHHHH", "IIQQQQQQ", "qQ"),  # 64 bit: p_type p_flags p_offset p_vaddr p_paddr p_filesz p_memsz p_align
}


class ElfError(ValueError):
    """The file is not an ELF shared object compat can read (a sentence naming the file and what is wrong)."""


class ElfInfo(Record):
    path: str
    bits: int  # 32 or 64
    machine: int  # e_machine (62: x86-64)
    needed: tuple[str, ...] = ()
    soname: Optional[str] = None
    rpath: tuple[str, ...] = ()  # DT_RPATH entries as written ($ORIGIN not expanded)
    runpath: tuple[str, ...] = ()  # DT_RUNPATH entries as written
    has_runpath: bool = False  # a DT_RUNPATH entry exists (even an empty one): the loader then ignores every DT_RPATH

    @property
    def identity(self) -> tuple[int, int]:
        """What the loader compares before it takes a library for an object: ELF class and machine."""
        return self.bits, self.machine


def elf_identity(path: str) -> Optional[tuple[int, int]]:
    """(bits, machine) of an ELF file, or None for anything else (missing, unreadable, not ELF)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != MAGIC or head[4] not in _LAYOUTS or head[5] not in (1, 2):
        return None
    order = "<" if head[5] == 1 else ">"
    return (32 if head[4] == 1 else 64), struct.unpack(order + "H", head[18:20])[0]


def read_elf(path: str) -> ElfInfo:
    """The dynamic section's names of ``path``; ElfError when it is not a readable ELF file."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            return _read(handle, path, size)
    except OSError as exc:
        raise ElfError(f"{path} cannot be read ({exc.strerror or exc})") from None
    except struct.error as exc:
        raise ElfError(f"{path} is not a complete ELF file ({exc})") from None


def _read_at(handle: BinaryIO, offset: int, length: int, size: int, path: str, what: str) -> bytes:
    if offset < 0 or length < 0 or offset + length > size:
        raise ElfError(f"{path} is damaged: its {what} lies outside the file")
    handle.seek(offset)
    data = handle.read(length)
    if len(data) != length:
        raise ElfError(f"{path} is damaged: its {what} is cut short")
    return data


def _read(handle: BinaryIO, path: str, size: int) -> ElfInfo:
    ident = handle.read(16)
    if len(ident) < 16 or ident[:4] != MAGIC:
        raise ElfError(f"{path} is not an ELF file")
    if ident[4] not in _LAYOUTS:
        raise ElfError(f"{path} has an unknown ELF class ({ident[4]})")
    if ident[5] not in (1, 2):
        raise ElfError(f"{path} has an unknown ELF byte order ({ident[5]})")
    bits = 32 if ident[4] == 1 else 64
    order = "<" if ident[5] == 1 else ">"
    header_format, phdr_format, dyn_format = (order + f for f in _LAYOUTS[ident[4]])
    header = struct.unpack(header_format, _read_at(handle, 16, struct.calcsize(header_format), size, path, "header"))
    e_type, machine, phoff, phentsize, phnum = header[0], header[1], header[4], header[8], header[9]
    if e_type not in (ET_EXEC, ET_DYN):
        raise ElfError(f"{path} is not a shared library or program (ELF type {e_type})")
    if phnum > MAX_PROGRAM_HEADERS:
        raise ElfError(f"{path} has {phnum} program headers, more than compat reads ({MAX_PROGRAM_HEADERS})")
    if phnum and phentsize < struct.calcsize(phdr_format):
        raise ElfError(f"{path} is damaged: its program headers are {phentsize} bytes, too small")
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: Optional[tuple[int, int]] = None  # (offset, filesz)
    table = _read_at(handle, phoff, phnum * phentsize, size, path, "program header table")
    for index in range(phnum):
        fields = struct.unpack_from(phdr_format, table, index * phentsize)
        if bits == 64:
            p_type, p_offset, p_vaddr, p_filesz = fields[0], fields[2], fields[3], fields[5]
        else:
            p_type, p_offset, p_vaddr, p_filesz = fields[0], fields[1], fields[2], fields[4]
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC and dynamic is None:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return ElfInfo(path, bits, machine)  # statically linked: it asks the loader for nothing
    entry_size = struct.calcsize(dyn_format)
    count = min(dynamic[1] // entry_size, MAX_DYNAMIC_ENTRIES)
    raw = _read_at(handle, dynamic[0], count * entry_size, size, path, "dynamic section")
    entries: list[tuple[int, int]] = []
    for index in range(count):
        tag, value = struct.unpack_from(dyn_format, raw, index * entry_size)
        if tag == DT_NULL:
            break
        entries.append((tag, value))
    strtab = next((value for tag, value in entries if tag == DT_STRTAB), None)
    strsz = next((value for tag, value in entries if tag == DT_STRSZ), None)
    named = [(tag, value) for tag, value in entries if tag in (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH)]
    if not named:
        return ElfInfo(path, bits, machine)
    if strtab is None or strsz is None:
        raise ElfError(f"{path} is damaged: its dynamic section names libraries but has no string table")
    base = _file_offset(strtab, loads)
    if base is None:
        raise ElfError(f"{path} is damaged: its string table (address {strtab:#x}) is in no loaded segment")

    def string(index: int) -> str:
        if index >= strsz:
            raise ElfError(f"{path} is damaged: a name points past its string table")
        length = min(MAX_STRING + 1, strsz - index, max(0, size - (base + index)))
        data = _read_at(handle, base + index, length, size, path, "string table")
        end = data.find(b"\0")
        if end < 0:
            raise ElfError(f"{path} is damaged: a name in its string table is longer than {MAX_STRING} bytes or not terminated")
        return data[:end].decode("utf-8", "surrogateescape")

    needed, rpath, runpath = [], [], []
    soname = None
    has_runpath = False
    for tag, value in named:
        text = string(value)
        if tag == DT_NEEDED:
            needed.append(text)
        elif tag == DT_SONAME:
            soname = text
        elif tag == DT_RPATH:
            rpath += [e for e in text.split(":") if e]
        else:
            has_runpath = True
            runpath += [e for e in text.split(":") if e]
    return ElfInfo(path, bits, machine, tuple(needed), soname, tuple(rpath), tuple(runpath), has_runpath)


def _file_offset(address: int, loads: list[tuple[int, int, int]]) -> Optional[int]:
    for vaddr, offset, filesz in loads:
        if vaddr <= address < vaddr + filesz:
            return address - vaddr + offset
    return None
