#!/usr/bin/env python3
"""Writes a gzip'd newc cpio archive (a Linux initramfs) of directory ROOT
to OUT: `mkinitramfs.py ROOT OUT`. Files, directories and symlinks, owned
by root, modes as on disk; no cpio tool needed."""

import gzip
import os
import stat
import sys


def header(ino, mode, size, nlink, namesize):
    fields = [ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, namesize, 0]
    return b"070701" + b"".join(b"%08X" % f for f in fields)


def pad(n):
    return b"\0" * ((4 - n % 4) % 4)


def main(root, out):
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames) + sorted(filenames):
            path = os.path.join(dirpath, name)
            entries.append((os.path.relpath(path, root), path))
    data = bytearray()
    for ino, (rel, path) in enumerate(entries, 1):
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            body = os.readlink(path).encode()
        elif stat.S_ISREG(st.st_mode):
            with open(path, "rb") as f:
                body = f.read()
        else:
            body = b""
        name = rel.encode() + b"\0"
        nlink = 2 if stat.S_ISDIR(st.st_mode) else 1
        h = header(ino, st.st_mode, len(body), nlink, len(name))
        data += h + name + pad(len(h) + len(name)) + body + pad(len(body))
    name = b"TRAILER!!!\0"
    h = header(0, 0, 0, 1, len(name))
    data += h + name + pad(len(h) + len(name))
    with gzip.open(out, "wb", compresslevel=1) as f:
        f.write(data)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
