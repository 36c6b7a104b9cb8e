/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cleanup.h — cleanup attributes for cairn's C code, libcairn and the front
 * ends alike, kept out of the public headers (as composefs keeps them in
 * its private lcfs-utils.h), since they need <dirent.h>, <stdio.h>,
 * <stdlib.h> and <unistd.h>.
 */
#ifndef CAIRN_CLEANUP_H
#define CAIRN_CLEANUP_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* A variable declared
 * with one is released when it goes out of scope (free, close, fclose,
 * closedir; NULL and -1 are left alone). */
static inline void cairn_freep(void *p) { free(*(void **)p); }
static inline void cairn_closep(int *fd) {
  if (*fd >= 0) close(*fd);
}
static inline void cairn_fclosep(FILE **f) {
  if (*f) fclose(*f);
}
static inline void cairn_closedirp(DIR **d) {
  if (*d) closedir(*d);
}
#define cairn_autofree __attribute__((cleanup(cairn_freep)))
#define cairn_autoclose __attribute__((cleanup(cairn_closep)))
#define cairn_autofclose __attribute__((cleanup(cairn_fclosep)))
#define cairn_autoclosedir __attribute__((cleanup(cairn_closedirp)))

#endif
