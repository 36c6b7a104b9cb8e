# SPDX-License-Identifier: Apache-2.0
"""mixed_content.py — file contents for the benchmarks' images, as the
scripts that import it (PYTHONPATH=bench) draw them: half random bytes,
which do not compress, half lines of random words, which do; every
draw from the random.Random given, so an image of a seed is the same
from one run to the next."""


class Mixed:
    """Mixed(rnd)(n): n bytes of content, drawn from rnd (its word list
    drawn first, as it is made)."""

    def __init__(self, rnd):
        self.rnd = rnd
        self.words = [bytes(rnd.choice(b"abcdefghijklmnopqrstuvwxyz")
                            for _ in range(rnd.randint(2, 9))) for _ in range(2000)]

    def __call__(self, n):
        if self.rnd.random() < 0.5:
            return self.rnd.randbytes(n)
        out = bytearray()
        while len(out) < n:
            out += b" ".join(self.rnd.choices(self.words, k=64)) + b"\n"
        return bytes(out[:n])
