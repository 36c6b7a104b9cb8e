/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/store.h — libcairn's public face: the store handle, errors, cairn.conf, progress.
 * Included by cairn.h, whose comment gives the conventions every function
 * here keeps (errors, ids, handles).
 */
#ifndef CAIRN_STORE_H
#define CAIRN_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CAIRN_ID_LEN 64
typedef char cairn_id[CAIRN_ID_LEN + 1];
/* An OCI digest: "sha256:" and an id; a buffer for one and its NUL. */
#define CAIRN_DIGEST_LEN (7 + CAIRN_ID_LEN)
#define CAIRN_DIGEST_BUF 72 /* CAIRN_DIGEST_LEN + 1, rounded up */
/* The fewest hex digits an id prefix may have (what listings show). */
#define CAIRN_ID_PREFIX_MIN 3

/* Whether s is an id: exactly CAIRN_ID_LEN lowercase hex digits.
 * Returns true if it is. */
bool cairn_id_valid(const char *s);

typedef struct cairn_store cairn_store;

/* ---- the store --------------------------------------------------------- */

/* ---- configuration: cairn.conf (store/config.c) ------------------------ */

/* cairn.conf is read from two files, each optional, the system's first:
 * $CAIRN_CONFIG_SYSTEM (tests), else /etc/cairn/cairn.conf; then the
 * user's, ${XDG_CONFIG_HOME:-$HOME/.config}/cairn/cairn.conf. A key the
 * user's file sets wins over the system's. Its lines (strict: any other
 * line, an unknown key or a bad value is an error naming PATH:LINE):
 *   # a comment (also blank lines)
 *   store = DIR                 the store (an absolute path)
 *   pull-jobs = N               layers a pull fetches at once (1 to 64)
 *   [registry "HOST[:PORT]"]    what follows is about that registry:
 *   mirror = HOST[:PORT]        tried before it, in the order given; a
 *                               file's mirror lines replace another's
 *   insecure = true|false       no TLS checks; plain HTTP if no TLS
 * A value may be written in double quotes; a later line wins. */
struct cn_config_registry {
  char *host; /* "HOST[:PORT]" */
  char **mirrors;
  size_t n_mirrors;
  int mirrors_from; /* the file (index in paths) of the mirror lines, or -1 */
  bool insecure;
};
typedef struct cairn_config {
  char *paths[2];     /* the system file, the user's (NULL with no HOME) */
  bool read[2];       /* which of them were there and read */
  bool not_own;       /* the user's file is there but not the caller's: not read */
  char *store;        /* NULL if no file sets it */
  int store_from;     /* the file that set it (index in paths), or -1 */
  unsigned pull_jobs; /* 0 if no file sets it */
  int pull_jobs_from;
  struct cn_config_registry *registries;
  size_t n_registries;
  char why[4352]; /* after a failure: "PATH:LINE: WHY" (or "PATH: WHY") */
} cairn_config;

/* Reads both files into cfg (free it with cairn_config_free, also after a
 * failure); after a failure cfg->why says which file and why.
 * Returns 0; -EINVAL: a bad line; -errno: a file that is there but cannot be read. */
int cairn_config_load(cairn_config *cfg);
void cairn_config_free(cairn_config *cfg);

/* Writes the store directory the contract picks when none is given (no
 * --store): $CAIRN_STORE, else the store of cairn.conf (cfg: the user's,
 * else the system's), else /var/lib/cairn for root, else
 * ${XDG_DATA_HOME:-$HOME/.local/share}/cairn. In *origin (unless NULL)
 * which rule picked it, for a person: "CAIRN_STORE", the path of the
 * cairn.conf that set it, "the default for root", "XDG_DATA_HOME" or
 * "HOME (~/.local/share)" (it points into cfg or is static).
 * Returns 0; -ENOENT: no rule applies (not root, no HOME); -ENAMETOOLONG: it does not fit len. */
int cairn_store_dir_pick(const cairn_config *cfg, char *buf, size_t len, const char **origin);
/* The same with the cairn.conf it reads itself.
 * Returns 0; -EINVAL: a bad cairn.conf; else as cairn_config_load and cairn_store_dir_pick. */
int cairn_store_default_dir(char *buf, size_t len);

/* Opens (creating on first use, mode 0700) the store at dir, or at the
 * default when dir is NULL. On failure *out is still set to a handle that
 * only carries the error message (cairn_errmsg), or NULL on ENOMEM;
 * close it either way.
 * Returns 0; -EPROTO: the store's schema is newer than this cairn; -EBADMSG: a corrupt meta.db. */
int cairn_store_open(const char *dir, cairn_store **out);
/* How cairn_store_open_flags opens a store. */
enum {
  CAIRN_STORE_CREATE = 1u << 0, /* make it if there is none (commands that add to it) */
  /* as root, refuse (-EPERM) a store directory another user owns: its
   * files and symlinks are theirs to plant */
  CAIRN_STORE_OWN = 1u << 1,
  /* the database is opened by the first call that needs it, as
   * cairn_store_open_lazy's, and nothing is recovered */
  CAIRN_STORE_LAZY = 1u << 2,
};
/* Opens the store at dir (NULL: the default) as cairn_store_open does,
 * but without CAIRN_STORE_CREATE a missing store (no directory, or no
 * meta.db in it) is an error, "DIR: no store here (...)", and nothing is
 * made: commands that only read never leave a store behind.
 * Returns 0, or as cairn_store_open; -ENOENT: no store there (without CAIRN_STORE_CREATE);
 * -EPERM: as root, a store another user owns (CAIRN_STORE_OWN). */
int cairn_store_open_flags(const char *dir, unsigned flags, cairn_store **out);
/* Whether a store could be made at dir, which has none: it can if its
 * nearest existing ancestor is a directory this process may write into;
 * that ancestor in blocker (len bytes).
 * Returns 0: it can; -EACCES: the ancestor may not be written; -ENOTDIR: it is no directory. */
int cairn_store_creatable(const char *dir, char *blocker, size_t len);
/* Whether opening st made the store (it was not there).
 * Returns true if it did. */
bool cairn_store_created(const cairn_store *st);
void cairn_store_close(cairn_store *st);
/* The same for a process that may ask the database nothing (a mount's
 * server): it is opened by the first call that needs it. Nothing is
 * recovered (an interrupted import's files: the next cairn_store_open).
 * Returns 0; -errno: the directory cannot be made or opened (the database's come with its
 * first use). */
int cairn_store_open_lazy(const char *dir, cairn_store **out);
/* cairn_store_open_lazy with cairn_store_open_flags's flags.
 * Returns 0, or as cairn_store_open_flags. */
int cairn_store_open_lazy_flags(const char *dir, unsigned flags, cairn_store **out);
/* For a process that holds a store open for long and rarely asks it
 * anything (a mount's supervisor and server): closes the database
 * connection, which the next call that needs it opens again, and gives
 * the freed memory back to the system (its heap stays private to each of
 * a host's hundreds of mounts otherwise). Not inside a transaction. */
void cairn_store_idle(cairn_store *st);
/* The store's directory, its real absolute path.
 * Returns a string st owns. */
const char *cairn_store_dir(const cairn_store *st);
/* What opening the store changed that the person should hear of (its
 * files made private in a directory others may enter).
 * Returns a string st owns; NULL: nothing to say. */
const char *cairn_store_notice(const cairn_store *st);
/* The WHY of st's last failure (cairn.h's Conventions).
 * Returns a string st owns ("" if none); "out of memory" for a NULL st (a failed open). */
const char *cairn_errmsg(const cairn_store *st);
/* For code built on this header (store/remote/): records the WHY of a failure
 * on st (printf-style). A NULL st records nothing (a caller that only wants
 * the code).
 * Returns err, a negative errno. */
int cairn_fail(cairn_store *st, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Whether pid runs (a zombie waiting for its reaper does not) and, if
 * name is given, its command name is name.
 * Returns true if both hold. */
bool cairn_process_running(pid_t pid, const char *name);

/* The contract's exit codes, by name. */
enum cairn_exit {
  CAIRN_EXIT_OK = 0,
  CAIRN_EXIT_FAILURE = 1,
  CAIRN_EXIT_USAGE = 2,     /* bad usage or argument (-EINVAL) */
  CAIRN_EXIT_NOT_FOUND = 3, /* -ENOENT */
  CAIRN_EXIT_BUSY = 4,      /* pinned or busy (-EBUSY) */
  CAIRN_EXIT_INTEGRITY = 5, /* -EBADMSG */
};
/* bytes as a person reads it, as every table and report line says sizes:
 * "512 B", "131.4 MiB" (powers of 1024, one decimal). */
void cairn_human_size(uint64_t bytes, char *buf, size_t len);
/* The Levenshtein distance of a and b.
 * Returns the distance; SIZE_MAX: a or b is longer than 256 characters. */
size_t cairn_edit_distance(const char *a, const char *b);
/* Whether cand is near enough to what was typed to be suggested ("did you
 * mean cand?"): at most 2 edits, and a third of typed's length.
 * Returns true if it is. */
bool cairn_near(const char *typed, const char *cand);

/* Maps a negative errno returned by libcairn (or 0) to the contract's exit code.
 * Returns the enum cairn_exit (cairn.h's table: anything else is CAIRN_EXIT_FAILURE). */
int cairn_exit_code(int err);

/* How far a long call has got, for a front end's progress display; libcairn
 * itself never prints. Import and a pull's storing (a layer read: bytes of
 * the input, compressed, as read), export (file data written) and gc (its
 * steps, one after the other) call the hook of their handle. */
typedef struct cairn_progress {
  const char *step; /* what is being done, for a person: "storing", "writing", ... */
  uint64_t done;    /* bytes (or things) done so far */
  uint64_t total;   /* all there are; 0 if unknown (a pipe) */
  bool bytes;       /* done and total count bytes, else things */
  bool finished;    /* the step's last call: it succeeded */
} cairn_progress;
typedef void (*cairn_progress_fn)(const cairn_progress *p, void *arg);
/* Sets the hook st's calls report their progress through (NULL: none). It
 * is called on the calling thread as often as every 256 KiB moved, so a
 * display limits its own redraws. */
void cairn_store_set_progress(cairn_store *st, cairn_progress_fn fn, void *arg);

/* ---- files in other users' directories (store/remote/file_put.c) -------- */

#define CAIRN_PUT_NOREPLACE 1u /* fail -EEXIST if name is there */
/* Writes len bytes (of mem, or of src_fd from offset 0 when src_fd >= 0)
 * to dirfd/name, replacing it whole: through a new file of mode (less the
 * umask) under a random name made with O_CREAT|O_EXCL|O_NOFOLLOW, fsynced
 * and renamed over name, so a file or symlink someone planted in dirfd can
 * make it fail, never redirect it.
 * Returns 0; -EEXIST: name is there (CAIRN_PUT_NOREPLACE); -errno: the file system's. */
int cairn_file_put_at(int dirfd, const char *name, int src_fd, const void *mem, uint64_t len,
                      mode_t mode, unsigned flags);

#ifdef __cplusplus
}
#endif

#endif
