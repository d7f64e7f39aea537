"""What a shared library asks of the dynamic loader, read from its ELF file without loading it: DT_NEEDED, DT_SONAME,
DT_RPATH, DT_RUNPATH (32 and 64 bit, either byte order).

Side effects: reads the file (the header, the program headers, the dynamic segment and the strings it names: each read
bounded, never the whole file); never executes, maps or imports it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
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


# p_type, p_offset, p_vaddr, p_filesz: their places in a program header, by ELF class (the 64-bit one has p_flags second)
_PHDR_FIELDS = {1: (0, 1, 2, 4), 2: (0, 2, 3, 5)}


class _File(Record):
    """The file being read, for bounded reads that name it in their errors."""

    handle: BinaryIO
    path: str
    size: int

    def at(self, offset: int, length: int, what: str) -> bytes:
        return _read_at(self.handle, offset, length, self.size, self.path, what)


def _read(handle: BinaryIO, path: str, size: int) -> ElfInfo:
    file = _File(handle, path, size)
    elf_class, order = _identify(file)
    bits = 32 if elf_class == 1 else 64
    header_format, phdr_format, dyn_format = (order + f for f in _LAYOUTS[elf_class])
    machine, loads, dynamic = _segments(file, elf_class, header_format, phdr_format)
    if dynamic is None:
        return ElfInfo(path, bits, machine)  # statically linked: it asks the loader for nothing
    entries = _dynamic_entries(file, dynamic, dyn_format)
    named = [(tag, value) for tag, value in entries if tag in (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH)]
    if not named:
        return ElfInfo(path, bits, machine)
    string = _string_table(file, entries, loads)
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


def _identify(file: _File) -> tuple[int, str]:
    """e_ident: the ELF class (1: 32 bit, 2: 64 bit) and the struct byte order ("<" little, ">" big endian)."""
    ident = file.handle.read(16)
    if len(ident) < 16 or ident[:4] != MAGIC:
        raise ElfError(f"{file.path} is not an ELF file")
    if ident[4] not in _LAYOUTS:
        raise ElfError(f"{file.path} has an unknown ELF class ({ident[4]})")
    if ident[5] not in (1, 2):
        raise ElfError(f"{file.path} has an unknown ELF byte order ({ident[5]})")
    return ident[4], "<" if ident[5] == 1 else ">"


def _segments(file: _File, elf_class: int, header_format: str, phdr_format: str) -> tuple[int, list[tuple[int, int, int]], Optional[tuple[int, int]]]:
    """The header's e_machine, the loaded segments (vaddr, offset, filesz) and the dynamic segment (offset, filesz) or None."""
    path = file.path
    header = struct.unpack(header_format, file.at(16, struct.calcsize(header_format), "header"))
    e_type, machine, phoff, phentsize, phnum = header[0], header[1], header[4], header[8], header[9]
    if e_type not in (ET_EXEC, ET_DYN):
        raise ElfError(f"{path} is not a shared library or program (ELF type {e_type})")
    if phnum > MAX_PROGRAM_HEADERS:
        raise ElfError(f"{path} has {phnum} program headers, more than compat reads ({MAX_PROGRAM_HEADERS})")
    if phnum and phentsize < struct.calcsize(phdr_format):
        raise ElfError(f"{path} is damaged: its program headers are {phentsize} bytes, too small")
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: Optional[tuple[int, int]] = None  # (offset, filesz)
    table = file.at(phoff, phnum * phentsize, "program header table")
    for index in range(phnum):
        fields = struct.unpack_from(phdr_format, table, index * phentsize)
        p_type, p_offset, p_vaddr, p_filesz = (fields[i] for i in _PHDR_FIELDS[elf_class])
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC and dynamic is None:
            dynamic = (p_offset, p_filesz)
    return machine, loads, dynamic


def _dynamic_entries(file: _File, dynamic: tuple[int, int], dyn_format: str) -> list[tuple[int, int]]:
    """The dynamic section's (tag, value) entries up to DT_NULL, at most MAX_DYNAMIC_ENTRIES."""
    entry_size = struct.calcsize(dyn_format)
    count = min(dynamic[1] // entry_size, MAX_DYNAMIC_ENTRIES)
    raw = file.at(dynamic[0], count * entry_size, "dynamic section")
    entries: list[tuple[int, int]] = []
    for index in range(count):
        tag, value = struct.unpack_from(dyn_format, raw, index * entry_size)
        if tag == DT_NULL:
            break
        entries.append((tag, value))
    return entries


def _string_table(file: _File, entries: list[tuple[int, int]], loads: list[tuple[int, int, int]]) -> Callable[[int], str]:
    """A reader of the names in the dynamic string table (DT_STRTAB, DT_STRSZ): each read bounded by MAX_STRING."""
    path, size = file.path, file.size
    strtab = next((value for tag, value in entries if tag == DT_STRTAB), None)
    strsz = next((value for tag, value in entries if tag == DT_STRSZ), None)
    if strtab is None or strsz is None:
        raise ElfError(f"{path} is damaged: its dynamic section names libraries but has no string table")
    base = _file_offset(strtab, loads)
    if base is None:
        raise ElfError(f"{path} is damaged: its string table (address {strtab:#x}) is in no loaded segment")

    def string(index: int) -> str:
        if index >= strsz:
            raise ElfError(f"{path} is damaged: a name points past its string table")
        length = min(MAX_STRING + 1, strsz - index, max(0, size - (base + index)))
        data = file.at(base + index, length, "string table")
        end = data.find(b"\0")
        if end < 0:
            raise ElfError(f"{path} is damaged: a name in its string table is longer than {MAX_STRING} bytes or not terminated")
        return data[:end].decode("utf-8", "surrogateescape")

    return string


def _file_offset(address: int, loads: list[tuple[int, int, int]]) -> Optional[int]:
    for vaddr, offset, filesz in loads:
        if vaddr <= address < vaddr + filesz:
            return address - vaddr + offset
    return None
