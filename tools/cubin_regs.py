#!/usr/bin/env python3
"""Registers a thread of each kernel in the JIT cache's cubins, as NVRTC compiled them (no GPU needed).

    rm -rf /tmp/kc && BITNET_CACHE_DIR=/tmp/kc build/bitnet kernels --arch sm_90 --cache
    tools/cubin_regs.py /tmp/kc [NAME_PART]

Reads each cache file's ELF image (after the cache header) and its .nv.info section's
EIATTR_REGCOUNT records. Local nvcc builds of the same source can differ by a few registers, and
some kernels sit at a cliff (the decode attention: at most 96 on sm_90), so check here.
"""
import glob
import os
import struct
import sys

EIATTR_REGCOUNT = 0x2F


def kernel_regs(path):
    d = open(path, 'rb').read()
    at = d.find(b'\x7fELF')
    if at < 0:
        return []
    d = d[at:]
    shoff = struct.unpack_from('<Q', d, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', d, 0x3A)
    secs = [struct.unpack_from('<IIQQQQIIQQ', d, shoff + i * shentsize) for i in range(shnum)]

    def name(off, base):
        return d[base + off:d.index(b'\0', base + off)].decode()

    by_name = {name(s[0], secs[shstrndx][4]): s for s in secs}
    symtab = by_name['.symtab']
    strtab = secs[symtab[6]]
    syms = [name(struct.unpack_from('<I', d, symtab[4] + i * 24)[0], strtab[4]) for i in range(symtab[5] // 24)]
    info = by_name.get('.nv.info')
    out, off = [], info[4] if info else 0
    end = off + (info[5] if info else 0)
    while off < end:
        fmt, attr, size = struct.unpack_from('<BBH', d, off)
        if fmt == 4:  # EIFMT_SVAL: a payload of size bytes
            if attr == EIATTR_REGCOUNT:
                sym, regs = struct.unpack_from('<II', d, off + 4)
                out.append((syms[sym], regs))
            off += 4 + size
        else:
            off += 4
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    part = sys.argv[2] if len(sys.argv) > 2 else ''
    for path in sorted(glob.glob(os.path.join(sys.argv[1], '*.bin'))):
        for kernel, regs in sorted(kernel_regs(path)):
            if part in kernel:
                print(f'{regs:4d}  {kernel}  ({os.path.basename(path)})')


if __name__ == '__main__':
    main()
