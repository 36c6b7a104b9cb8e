/* SPDX-License-Identifier: Apache-2.0 */
/*
 * self.h — this program's own binary (/proc/self/exe) and the programs
 * beside it: how cairn finds cairnfs and the full cairn, cairnfs its own
 * binary and cairn, the snapshotter cairnfs and cairn, in a build tree as
 * in an install, wherever it was moved to.
 */
#ifndef CAIRN_SELF_H
#define CAIRN_SELF_H

#include <stdbool.h>
#include <stddef.h>

/* The path of this program's binary in out, as /proc/self/exe reads (with
 * " (deleted)" after it once an upgrade replaced the file): 0, or a
 * negative errno (-ENAMETOOLONG if it does not fit in len). */
int self_exe(char *out, size_t len);
/* The program name (a path from this program's directory: "cairnfs",
 * "../../bin/cairnfs") as a path in out, and true, if it is there and
 * executable; else fallback in out (a name for a PATH search, an install
 * path), and false. */
bool self_sibling(const char *name, const char *fallback, char *out, size_t len);

#endif
