#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""churn.py DIR N: N cycles of create, write, close and unlink of one file
in DIR (a long-running mount's churn of short-lived files)."""
import os
import sys


def main():
    d, n = sys.argv[1], int(sys.argv[2])
    for k in range(n):
        p = os.path.join(d, "c%d" % (k % 64))
        fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.write(fd, b"x")
        os.close(fd)
        os.unlink(p)


if __name__ == "__main__":
    main()
