/* SPDX-License-Identifier: Apache-2.0 */
/*
 * version.h — the version cairn, cairn-pin and cairnfs print: CMake's
 * project(VERSION), plus `git describe --always --dirty` when the build
 * was configured in a git checkout (CMakeLists.txt passes both to
 * version.c as compile definitions).
 */
#ifndef CAIRN_VERSION_H
#define CAIRN_VERSION_H

/* Prints "PROG VERSION" (and " (git DESCRIBE)") on stdout. */
void version_print(void);
/* The parts of it: "0.1.0", and the git describe ("" if none). */
const char *version_number(void);
const char *version_git(void);

#endif
