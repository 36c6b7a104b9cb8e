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

/* The path of this program's binary in out, as /proc/self/exe reads but
 * without the " (deleted)" it ends in once an upgrade replaced the file
 * (self_exe_undeleted): the path to exec to run the binary there now, the
 * upgraded one. 0, or a negative errno (-ENAMETOOLONG if it does not fit
 * in len). */
int self_exe(char *out, size_t len);
/* Cuts " (deleted)" off the end of path, a readlink of /proc/PID/exe whose
 * file was replaced or removed: "/x/cairn (deleted)" becomes "/x/cairn". A
 * path without it is left as it is. */
void self_exe_undeleted(char *path);
/* The program name (a path from this program's directory: "cairnfs",
 * "../../bin/cairnfs") as a path in out, and true, if it is there and
 * executable; else fallback in out (a name for a PATH search, an install
 * path), and false. */
bool self_sibling(const char *name, const char *fallback, char *out, size_t len);
/* The path of prog, a program of cairn's libexec (the full "cairn",
 * "cairn-snapshotter-idle"), in out: the build tree's (BIN/libexec/cairn/),
 * else our install's (BIN/../LIBEXECDIR/cairn/, wherever the install was
 * moved to), and true; else the configured prefix's, and false. */
bool self_libexec(const char *prog, char *out, size_t len);

#endif
