/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn.h — the one public header of libcairn, the cairn layer store.
 *
 * Everything about the store lives behind this header: opening it, layers
 * and their file trees, content-addressed blobs, images and names, pins,
 * mount records, rm / gc / fsck. Front ends (tools/, fs/) only call these.
 * Over 1,000 lines: it is the library's whole face, in one file so that a
 * front end includes one header and scripts/check-layers.sh reads one;
 * its sections ("---- NAME") each hold a subsystem.
 *
 * Conventions
 * - Functions return 0 (or a count) on success and a negative errno on
 *   failure. The meaning a front end maps to exit codes:
 *     -ENOENT   not found                       (exit 3)
 *     -EBUSY    pinned or busy                   (exit 4)
 *     -EBADMSG  integrity: digest mismatch, corrupt/truncated/unsafe input
 *                                                (exit 5)
 *     -EINVAL   bad argument (bad reference, ambiguous prefix)  (exit 2)
 *     anything else                              (exit 1)
 *   A sentence for a person about the last failure (the WHY) is kept per
 *   store handle: cairn_errmsg(). It never ends in a newline. Every call
 *   that takes a handle and can fail starts by clearing it and sets it on
 *   every failure; cleanup calls (void) leave it as it is. A callback's
 *   non-zero return is passed back as it is, with whatever WHY the
 *   callback recorded (cairn_fail).
 * - Ids are lowercase sha256 hex strings (64 chars, no "sha256:" prefix):
 *   a layer is named by its OCI diff_id, an image by the sha256 of its
 *   config.
 * - A store handle is not thread-safe (cairn_blob_open excepted); use one
 *   handle per thread.
 *   Several processes may use one store at once.
 * - A struct is a typedef of its tag's name (cairn_pin_rec is struct
 *   cairn_pin_rec), but for the three named as the function that fills
 *   them: struct cn_config_registry, struct cairn_df, struct
 *   cairn_store_info. An enum is named by its tag (enum cairn_pin_kind).
 */
#ifndef CAIRN_H
#define CAIRN_H

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

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

/* True if s is an id: exactly CAIRN_ID_LEN lowercase hex digits. */
bool cairn_id_valid(const char *s);
/* The id form of a raw sha256 digest: its 32 bytes as lowercase hex. */
void cn_sha256_hex(const unsigned char digest[32], cairn_id out);

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
 *   insecure = true|false       talk plain HTTP to it (no TLS)
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
  char *store;        /* NULL if no file sets it */
  int store_from;     /* the file that set it (index in paths), or -1 */
  unsigned pull_jobs; /* 0 if no file sets it */
  int pull_jobs_from;
  struct cn_config_registry *registries;
  size_t n_registries;
  char why[4352]; /* after a failure: "PATH:LINE: WHY" (or "PATH: WHY") */
} cairn_config;

/* Reads both files into cfg (free it with cairn_config_free, also after a
 * failure). -EINVAL for a bad line, -errno for a file that is there but
 * cannot be read; cfg->why says which and why. */
int cairn_config_load(cairn_config *cfg);
void cairn_config_free(cairn_config *cfg);
/* The [registry "host"] section of cfg, or NULL. */
const struct cn_config_registry *cn_config_registry(const cairn_config *cfg,
                                                          const char *host);

/* Writes the store directory the contract picks when none is given (no
 * --store): $CAIRN_STORE, else the store of cairn.conf (cfg: the user's,
 * else the system's), else /var/lib/cairn for root, else
 * ${XDG_DATA_HOME:-$HOME/.local/share}/cairn. In *origin (unless NULL)
 * which rule picked it, for a person: "CAIRN_STORE", the path of the
 * cairn.conf that set it, "the default for root", "XDG_DATA_HOME" or
 * "HOME (~/.local/share)" (it points into cfg or is static). */
int cairn_store_dir_pick(const cairn_config *cfg, char *buf, size_t len, const char **origin);
/* The same with the cairn.conf it reads itself; -EINVAL if it is bad. */
int cairn_store_default_dir(char *buf, size_t len);

/* Opens (creating on first use, mode 0700) the store at dir, or at the
 * default when dir is NULL. On failure *out is still set to a handle that
 * only carries the error message (cairn_errmsg), or NULL on ENOMEM;
 * close it either way. */
int cairn_store_open(const char *dir, cairn_store **out);
/* How cairn_store_open_flags opens a store. */
enum {
  CAIRN_STORE_CREATE = 1u << 0, /* make it if there is none (commands that add to it) */
};
/* Opens the store at dir (NULL: the default) as cairn_store_open does,
 * but without CAIRN_STORE_CREATE a missing store (no directory, or no
 * meta.db in it) is -ENOENT, "DIR: no store here (...)", and nothing is
 * made: commands that only read never leave a store behind. */
int cairn_store_open_flags(const char *dir, unsigned flags, cairn_store **out);
/* True if opening st made the store (it was not there). */
bool cairn_store_created(const cairn_store *st);
void cairn_store_close(cairn_store *st);
/* The same for a process that may ask the database nothing (a mount's
 * server): it is opened by the first call that needs it. Nothing is
 * recovered (an interrupted import's files: the next cairn_store_open). */
int cairn_store_open_lazy(const char *dir, cairn_store **out);
/* For a process that holds a store open for long and rarely asks it
 * anything (a mount's supervisor and server): closes the database
 * connection, which the next call that needs it opens again, and gives
 * the freed memory back to the system (its heap stays private to each of
 * a host's hundreds of mounts otherwise). Not inside a transaction. */
void cairn_store_idle(cairn_store *st);
const char *cairn_store_dir(const cairn_store *st);
/* What opening the store changed that the person should hear of (its
 * files made private in a directory others may enter), or NULL. */
const char *cairn_store_notice(const cairn_store *st);
const char *cairn_errmsg(const cairn_store *st);
/* For code built on this header (store/remote/): records the WHY of a failure
 * on st (printf-style) and returns err, a negative errno. A NULL st records
 * nothing (a caller that only wants the code). */
int cairn_fail(cairn_store *st, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Puts context before the WHY st holds: "CONTEXT: WHY" (strerror(-err) when
 * st holds none); returns err. The context is formatted before the WHY is
 * read, so its arguments may not point into cairn_errmsg(st). */
int cn_fail_context(cairn_store *st, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* True while pid runs (a zombie waiting for its reaper does not) and, if
 * name is given, its command name is name. */
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
/* The Levenshtein distance of a and b (SIZE_MAX past 256 characters). */
size_t cairn_edit_distance(const char *a, const char *b);
/* Whether cand is near enough to what was typed to be suggested ("did you
 * mean cand?"): at most 2 edits, and a third of typed's length. */
bool cairn_near(const char *typed, const char *cand);

/* Maps a negative errno returned by libcairn to the contract's exit code. */
int cairn_exit_code(int err);

/* Cleanup attributes for C code built on this header: a variable declared
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

/* ---- references -------------------------------------------------------- */

/* Normalizes a NAME[:TAG] (tag defaults to "latest"); -EINVAL if invalid. */
int cairn_name_normalize(const char *name, char *out, size_t len);

/* Resolves a name, full id or unambiguous id prefix (>= 12 hex digits,
 * optional "sha256:") to an image id. */
int cairn_image_resolve(cairn_store *st, const char *ref, cairn_id id);

/* ---- pins -------------------------------------------------------------- */

enum cairn_pin_kind { CAIRN_PIN_IMAGE = 0, CAIRN_PIN_LAYER = 1 };

/* A set of shared pins held by this process. Released (and annotations
 * dropped) by cairn_pinset_release, or by the kernel when the process
 * dies. The pin fds are inherited by children unless cloexec is asked. */
typedef struct cairn_pinset cairn_pinset;

cairn_pinset *cairn_pinset_new(const char *purpose, bool cloexec);
void cairn_pinset_release(cairn_store *st, cairn_pinset *ps);

/* Takes a shared pin on one target (blocking while a deleter holds the
 * exclusive lock, which is brief). Idempotent within a set. The target
 * need not exist yet (a pull pins a layer before it checks for it). */
int cn_pin_take(cairn_store *st, cairn_pinset *ps, enum cairn_pin_kind kind, const char *id);

/* Pins an image and every one of its layers, and writes the annotations
 * of every pin of ps not yet annotated (those cairn_pin_image_early took).
 * -ENOENT if the image is gone. */
int cairn_pin_image(cairn_store *st, cairn_pinset *ps, const char *image_id);

/* A mount's pins without SQLite (refs.c): resolves ref by STORE/refs (a
 * name, or an id prefix, as cairn_image_resolve would), starts reading the
 * image's index, and takes the locks of the image's pin and its layers'
 * into ps, without annotations; id gets the image. 1 if it did: the image
 * was in the file again once its pin was held, so it exists and stays
 * (its deleter rewrites the file before it lets go of the pin); 0 if the
 * file does not say, or the image has no index (ps may hold some locks:
 * release it), or a negative errno. cairn_pin_image on the same ps later
 * writes the annotations. */
int cairn_pin_image_early(cairn_store *st, cairn_pinset *ps, const char *ref, cairn_id id);
/* Writes STORE/refs if there is none (a store from before it, a crash),
 * unless a writer holds it, which writes it then. */
void cairn_refs_repair(cairn_store *st);

/* True if any process holds a pin on the target. */
bool cn_pin_is_held(cairn_store *st, enum cairn_pin_kind kind, const char *id);

/* Waits until the image (and its live mounts) has no pins; timeout_ms < 0
 * waits for ever. -ETIMEDOUT when time runs out. */
int cairn_pin_wait_free(cairn_store *st, const char *image_id, int64_t timeout_ms);

/* One pin as a listing shows it: an annotation (who pins and why), or a
 * kernel lock on a pin file that no annotation explains. Strings are valid
 * only during the callback. */
typedef struct cairn_pin_rec {
  enum cairn_pin_kind kind;
  const char *target;  /* image or layer id */
  pid_t pid;           /* the process that took the lock */
  const char *command; /* pid's command, or "HEIR (inherited)" (see held_by) */
  const char *purpose; /* "" for a lock with no annotation */
  int64_t since;       /* seconds since the epoch; 0 for a lock with no annotation */
  bool stale;          /* an annotation whose lock is gone */
  /* The locker exited but its lock lives on in what inherited its fd:
   * held_by lists the live processes with the pin file open (maybe none). */
  bool locker_gone;
  const pid_t *held_by;
  size_t n_held_by;
} cairn_pin_rec;
typedef int (*cairn_pin_fn)(const cairn_pin_rec *p, void *arg);

/* Calls fn for every pin annotation and every kernel lock on a pin file
 * that has none, target by target; filter_id (image or layer id, or NULL)
 * narrows it. Stale annotations are reported, not deleted: see
 * cairn_pins_clean_stale. A non-zero return of fn stops and is returned. */
int cairn_pins_foreach(cairn_store *st, const char *filter_id, cairn_pin_fn fn, void *arg);
/* As cairn_pins_foreach, for a listing that can take its rows back: while
 * the host's locks are read (cairn_pins_prefetch), fn is given the rows as
 * they are if every annotation has its lock and every lock its annotation
 * (the common case: a listing costs little more than that read). If the
 * locks say otherwise (a stale pin, an unexplained lock), undo(arg) is
 * called, and fn is given every row again. */
int cairn_pins_foreach_ahead(cairn_store *st, const char *filter_id, cairn_pin_fn fn,
                             void (*undo)(void *arg), void *arg);
/* Starts reading the host's locks (/proc/locks) on a thread, for the next
 * cairn_pins_foreach, which starts it itself otherwise: a listing calls it
 * first and asks the store its other questions meanwhile. */
void cairn_pins_prefetch(cairn_store *st);

/* Deletes the annotations whose lock is gone; returns how many. */
int cairn_pins_clean_stale(cairn_store *st);

/* A one-line description of who holds pins on the target, such as
 * "pid 42 (sleep) hold; pid 51 (cairnfs) mount /mnt/x". */
char *cairn_pin_holders(cairn_store *st, enum cairn_pin_kind kind, const char *id);

/* ---- layers, entries, blobs ------------------------------------------ */

enum cairn_entry_type {
  CAIRN_REG = 0,
  CAIRN_DIR = 1,
  CAIRN_SYMLINK = 2,
  CAIRN_HARDLINK = 3, /* target: path of the first name in the same layer */
  CAIRN_CHR = 4,
  CAIRN_BLK = 5,
  CAIRN_FIFO = 6,
  CAIRN_SOCK = 7,
  CAIRN_WHITEOUT = 8, /* path is "dir/.wh.NAME" as in the tar */
  CAIRN_OPAQUE = 9,   /* path is "dir/.wh..wh..opq" as in the tar */
};

typedef struct cairn_xattr {
  const char *name;
  const void *value;
  size_t len;
} cairn_xattr;

/* One entry of a layer, as the tar gave it. path is relative with no
 * leading "./" or "/", no "." / ".." components, no trailing slash; the
 * layer root itself is "". Strings are valid only during the callback. */
typedef struct cairn_entry {
  const char *path;
  enum cairn_entry_type type;
  uint32_t mode; /* permission bits incl. setuid/setgid/sticky (07777) */
  uint32_t uid, gid;
  uint64_t size; /* regular files */
  int64_t mtime_sec;
  uint32_t mtime_nsec;
  uint64_t rdev;      /* devices */
  const char *target; /* symlink target, or hardlink's first name */
  const char *blob;   /* regular files with size > 0: blob name; a file of a
                         partial layer not fetched yet: "sha256:HEX" of its
                         content (cairn_blob_is_pending) */
  const cairn_xattr *xattrs;
  size_t n_xattrs;
} cairn_entry;

typedef int (*cairn_entry_fn)(const cairn_entry *e, void *arg);

/* Calls fn for every entry of the layer in path order; a non-zero return
 * of fn stops the walk and is returned. */
int cn_layer_foreach(cairn_store *st, const char *diff_id, cairn_entry_fn fn, void *arg);

/* Reads the ordered layer ids (bottom first) of an image. */
int cn_image_layers(cairn_store *st, const char *image_id, char ***ids, size_t *n);
void cn_strv_free(char **v, size_t n);

/* 1 if stored, 0 if not, negative on error. */
int cn_layer_exists(cairn_store *st, const char *diff_id);
/* The zero bytes the last cn_layer_ingest on st added after its stream
 * to prove the expected diff_id (a tar whose record padding its blob
 * dropped, as podman 4.3's zstd:chunked writer does; they are kept in the
 * layer's exact tar), or 0. */
uint64_t cairn_layer_ingest_padding(const cairn_store *st);
/* Resolves a layer's full id or unambiguous id prefix (>= 12 hex digits,
 * optional "sha256:"), the rule images follow too: -ENOENT "no such
 * layer", -EINVAL if the prefix is ambiguous. */
int cairn_layer_resolve(cairn_store *st, const char *ref, cairn_id id);

/* Opens a blob read-only (O_RDONLY|O_CLOEXEC); returns an fd or -errno.
 * Unlike the rest of the API it may be called from several threads on one
 * handle: it only opens a file below the store, and records no WHY (the
 * -errno is all it says). */
int cairn_blob_open(cairn_store *st, const char *blob);

/* Fills path with the blob's file name in the store. */
int cn_blob_path(cairn_store *st, const char *blob, char *path, size_t len);

/* Finds the blob holding the content whose sha256 is sha256 (64 hex
 * digits, optionally "sha256:"; of the whole content, as a layer's TOC
 * names a file's): 1 with its name in blob (len bytes; 48 always fit)
 * and *size (may be NULL) set, 0 if the store holds no such content,
 * -EINVAL for a malformed digest. A hint, not a reference: the blob may
 * be gone after a gc, so what records a layer looks it up again. */
int cn_blob_find_sha256(cairn_store *st, const char *sha256, char *blob, size_t len,
                         uint64_t *size);

/* ---- partial layers: lazy pulls (store/lazy.c) ------------------------- */

/* A blob name that is a pending file's "sha256:HEX" (a lazily pulled file
 * not fetched yet), not a stored blob's. */
bool cairn_blob_is_pending(const char *blob);

/* Where a partial layer's files are fetched from. */
typedef struct cairn_lazy_source {
  const char *source;      /* the registry and repository, "HOST[:PORT]/REPO" */
  bool insecure;           /* plain HTTP */
  const char *digest;      /* the layer blob's "sha256:HEX" */
  const char *media_type;  /* the blob's */
  uint64_t size;           /* the blob's */
  const char *annotations; /* the manifest descriptor's annotations (JSON) */
  const char *toc_digest;  /* "sha256:HEX" of the kept TOC's bytes */
} cairn_lazy_source;

/* Records layer diff_id (pinned by the caller) from its TOC: entries in any
 * order; a regular file of size > 0 gives its content's "sha256:HEX" as
 * blob. A file whose content the store holds is linked to that blob; every
 * other becomes a pending file (*pending counts them), and the layer is
 * partial until the last arrives. The TOC's bytes (toc, toc_len; checked
 * against src->toc_digest by the caller) are kept as STORE/toc/HEX of
 * src->digest. 0 also when the layer is stored already and reusable
 * (cairn_layer_reusable); 2 when it is stored unproven from another blob
 * (or refuted): nothing recorded, the caller pulls it in full. */
int cn_layer_record_partial(cairn_store *st, const char *diff_id, const cairn_entry *entries,
                               size_t n, const cairn_lazy_source *src, const void *toc,
                               size_t toc_len, size_t *pending);

/* Whether a pull may reuse stored layer diff_id for a layer of blob
 * digest whose annotations are annotations (compact JSON, keys sorted, as
 * lazy pulls keep them; NULLs for a pull that is not lazy): 0 not stored;
 * 1 stored and reusable (its diff_id proven, or a lazy pull's of that very
 * blob and TOC); 2 stored but not to be reused: a lazy pull's of another
 * blob whose diff_id is not proven yet, or refuted (a pull stores it in
 * full, which proves it and replaces the unproven rows). */
int cairn_layer_reusable(cairn_store *st, const char *diff_id, const char *digest,
                         const char *annotations);
/* The diff_ids (hex; cn_strv_free) of image_id's layers a lazy pull
 * recorded whose diff_id is not proven yet (or refuted), in layer order. */
int cairn_image_unverified(cairn_store *st, const char *image_id, char ***diff_ids, size_t *n);
/* Takes lazily pulled layer diff_id out of service: its rebuilt tar did not
 * hash to its diff_id (reason says how). Mounts and index builds of its
 * images refuse from now on; *images (malloc'd) names them, for the
 * caller to say. */
int cairn_layer_refute(cairn_store *st, const char *diff_id, const char *reason, char **images);

/* A pending file and its layer's source (cn_lazy_file_find). */
typedef struct cairn_lazy_file {
  char *layer_id, *path; /* one of the entries pending on that content */
  uint64_t size;
  char *source, *digest, *media_type, *annotations, *toc_digest; /* cairn_lazy_source's */
  bool insecure;
  uint64_t blob_size;
} cairn_lazy_file;
/* 1 and f (cleared by cn_lazy_file_clear) if a file of content sha256
 * ("sha256:HEX" or HEX) is pending, 0 if none is. */
int cn_lazy_file_find(cairn_store *st, const char *sha256, cairn_lazy_file *f);
void cn_lazy_file_clear(cairn_lazy_file *f);
/* The kept TOC of the layer blob digest ("sha256:HEX"): malloc'd. */
int cn_lazy_toc_read(cairn_store *st, const char *digest, void **buf, size_t *len);
/* Stores a fetched file: fd's content (size bytes, from offset 0; -1 if
 * the store should hold it already) as a blob, hashed again and refused
 * (-EBADMSG) unless it is sha256; then, in one transaction, every entry
 * pending on sha256 names it, and each layer left with no pending file is
 * complete (an image whose layers all are gets its index again, without
 * pending nodes). A content the store holds is not written again. blob
 * gets the blob's name. */
int cn_lazy_file_store(cairn_store *st, const char *sha256, int fd, uint64_t size,
                          char blob[48]);
/* The distinct contents ("sha256:HEX") of image_id's pending files, in
 * layer order (cn_strv_free). */
int cn_lazy_pending_list(cairn_store *st, const char *image_id, char ***sha256s, size_t *n);
/* Calls fn for every pending file of the store, by layer then path, with
 * its layer's source (f's strings valid during the call) and its content's
 * "sha256:HEX"; a non-zero return stops the walk and is returned. */
typedef int (*cairn_lazy_pending_fn)(const cairn_lazy_file *f, const char *sha256, void *arg);
int cn_lazy_pending_foreach(cairn_store *st, cairn_lazy_pending_fn fn, void *arg);
/* The access list of image_id (store/access.c): the paths (relative,
 * normalised) of the files a mount read first, in the order of their first
 * reads, as cairnfs -o record_access recorded them. _write replaces the
 * image's list with paths[0..n); _read gives it (cn_strv_free) and
 * returns 1, or 0 (*n 0) when the image has none; _count, the number of
 * paths (0: none), or -errno. */
int cairn_access_list_write(cairn_store *st, const char *image_id, const char *const *paths,
                            size_t n);
int cn_access_list_read(cairn_store *st, const char *image_id, char ***paths, size_t *n);
int cairn_access_list_count(cairn_store *st, const char *image_id);
/* How many files (and bytes) of image_id are pending (each layer's). */
int cairn_image_pending(cairn_store *st, const char *image_id, uint64_t *files, uint64_t *bytes);
/* Unlinks the kept TOCs no partial layer names any more: those of layers a
 * fill completed, left by a crash between its commit and their unlink
 * (gc sweeps them too). Only when the store lock is free (else 0, left
 * to gc). */
int cn_lazy_tidy(cairn_store *st);

/* A lazily pulled layer whose files are all stored is complete but keeps
 * its source and TOC until it is finished: its exact tar recorded, as a
 * full pull records it (cn_lazy_finish_layer). The complete layers of
 * image_id not finished yet, in layer order (cn_strv_free). */
int cn_lazy_unfinished(cairn_store *st, const char *image_id, char ***diff_ids, size_t *n);
/* f (path "", size 0; cn_lazy_file_clear) and 1 if layer diff_id has a
 * source row and is partial, 2 if complete (not finished); 0 if no row. */
int cn_lazy_source_get(cairn_store *st, const char *diff_id, cairn_lazy_file *f);
/* Drops the source row (and the TOC) of layer diff_id, which must be
 * complete (-EINVAL if it is not), and sets its size to its tar record's,
 * once the ingest of its tar recorded it (or found it cannot, as for a
 * full pull): the lazy pull leaves no trace. 0 also when it has no
 * source row (finished already). */
int cn_lazy_layer_finished(cairn_store *st, const char *diff_id);
/* Finishes layer diff_id, complete and not finished yet (store/remote/partial.c):
 * the layer's tar rebuilt from the registry's bytes between the stored
 * files' frames (the tar headers) and the stored files, ingested (the
 * diff_id checked, the exact tar recorded), then cn_lazy_layer_finished;
 * when the rebuild fails, or with whole, the blob is fetched in full and
 * kept as a full pull keeps it (cn_layer_blob_keep: cairnfs --als serves
 * it). log (may be NULL) hears what it did. 0 also when there is nothing
 * to finish. */
int cn_lazy_finish_layer(cairn_store *st, const char *diff_id, bool whole,
                            void (*log)(const char *line, void *arg), void *arg);
/* cn_lazy_finish_layer for each unfinished layer of image_id. */
int cn_lazy_finish_image(cairn_store *st, const char *image_id, bool whole,
                            void (*log)(const char *line, void *arg), void *arg);

/* Fetches the pending file of content sha256 from its layer's registry
 * (store/remote/lazy.c): its chunks by one range request, each decompressed
 * and checked against its digest in the kept TOC, the whole against
 * sha256, before cn_lazy_file_store records it; blob gets its name.
 * A content the store holds already is only named. -EBADMSG when the
 * fetched bytes are not what the TOC says, -ENOENT when nothing is pending
 * on sha256 and the store lacks it, else the registry's failure (after the
 * pull's bounded retries). May be called from several threads, each with
 * its own handle. */
int cairn_lazy_fetch(cairn_store *st, const char *sha256, char blob[48]);
/* A long-lived fetcher of pending files (store/remote/fetcher.c: what
 * `cairn fill --serve` runs for a mount): up to `threads` fetches at once
 * (1 to 16), each thread with a store handle of its own on store_dir; each
 * is cairn_lazy_fetch's (the same lock, the same checks), except that the
 * kept TOC of a layer is read, checked and parsed once and kept in memory
 * (a few layers' at most) for the next fetches of the layer. done hears
 * each request's end, from a fetcher thread (one call at a time is not
 * promised): r 0 and text the blob's name, or a negative errno and text
 * the failure (one line). */
typedef struct cairn_lazy_fetcher cairn_lazy_fetcher;
typedef void (*cairn_lazy_fetched_fn)(const char *sha256, int r, const char *text, void *arg);
int cairn_lazy_fetcher_new(const char *store_dir, unsigned threads, cairn_lazy_fetched_fn done,
                           void *arg, cairn_lazy_fetcher **out);
/* Queues a fetch of content sha256 ("sha256:HEX" or HEX; copied); done is
 * called for it (a malformed one too). -ENOMEM when it cannot be queued. */
int cairn_lazy_fetcher_submit(cairn_lazy_fetcher *fx, const char *sha256);
/* Finishes the fetches queued, then frees fx. */
void cairn_lazy_fetcher_free(cairn_lazy_fetcher *fx);
/* The lock of the fetch of content sha256 ("sha256:HEX" or HEX) across
 * processes (store/lazy_lock.c: a lock file in STORE/tmp, flock'd): the
 * fetch and store of a pending file run under it, so a mount's first read,
 * a background fill and a second fill fetch it once; whoever takes it next
 * finds the file stored. wait: blocks until it is free; otherwise
 * -EWOULDBLOCK (no WHY recorded) while another holds it. Returns the lock
 * (an fd) for cn_lazy_unlock. cairn_lazy_fetch takes it. */
int cn_lazy_lock(cairn_store *st, const char *sha256, bool wait);
void cn_lazy_unlock(cairn_store *st, const char *sha256, int lock);
/* A test seam: a named point of a step (store/remote/ has no libcairn_store.h),
 * where a unit test's hook, or the crash-point injector
 * (tests/crash/inject.c, CAIRN_INJECT_POINTS=1), may act; nothing
 * otherwise. */
void cairn_test_point(cairn_store *st, const char *point);

/* ---- exact layers (store/tarsplit.c) ----------------------------------- */

/* Receives bytes; 0, or a negative errno that stops the writer. */
typedef int (*cairn_write_fn)(const void *buf, size_t len, void *arg);

/* Writes the layer's uncompressed tar exactly as it was imported or pulled
 * (its sha256 is diff_id) through fn, from the headers recorded at import
 * and the layer's blobs; *size gets its length (may be NULL). -ENODATA if
 * the layer was stored without that record (before cairn kept one, or a
 * tar it cannot describe); -EBADMSG if what it wrote does not hash to
 * diff_id (fn has seen the bytes then: discard them). */
int cn_layer_tar(cairn_store *st, const char *diff_id, cairn_write_fn fn, void *arg,
                    uint64_t *size);
/* 1 if the layer has its tar record, 0 if not, negative on error. */
int cn_layer_tar_recorded(cairn_store *st, const char *diff_id);

/* ---- import ------------------------------------------------------------ */

/* Reads one layer tar (plain, gzip or zstd, detected) from fd and stores
 * it once: blobs first, then the layer's metadata in one transaction.
 * The layer is pinned in ps (before it is looked up) and stays pinned;
 * ps may be NULL only with expected_diff_id, when the caller pinned that
 * layer already (a pull's download threads). If expected_diff_id is given,
 * a stream whose sha256 differs is -EBADMSG and nothing is committed.
 * diff_id_out receives the diff_id. */
int cn_layer_ingest(cairn_store *st, int fd, const char *expected_diff_id, cairn_pinset *ps,
                       cairn_id diff_id_out);

/* Builds the deterministic OCI config cairn import uses for these layers
 * (linux and the host's architecture, rootfs.diff_ids). Caller frees. */
char *cn_config_for_layers(const char *const *diff_ids, size_t n);

/* Commits an image: config JSON (whose rootfs.diff_ids must list exactly
 * these layers, or -EBADMSG), every layer already stored (callers keep them
 * pinned), and optionally a name that is (re)pointed at it. */
int cn_image_commit(cairn_store *st, const char *config, size_t config_len,
                       const char *const *diff_ids, size_t n, const char *name,
                       cairn_id image_id_out);

/* import NAME LAYER...: ingest each file (bottom first) then commit. A
 * path "-" is the standard input. */
int cn_import_files(cairn_store *st, const char *name, const char *const *paths, size_t n,
                       cairn_id image_id_out);
/* The same with podman import's --change instructions applied to the
 * image's config, each "KEY=VALUE" (or "KEY VALUE"): CMD and ENTRYPOINT (a
 * JSON array of strings, else a shell command: /bin/sh -c VALUE), ENV
 * K=V, WORKDIR, USER, LABEL K=V, EXPOSE PORT[/PROTO]..., STOPSIGNAL. A
 * change it does not take is -EINVAL before any layer is read. */
int cairn_import_files_changes(cairn_store *st, const char *name, const char *const *paths,
                               size_t n, const char *const *changes, size_t n_changes,
                               cairn_id image_id_out);

/* ---- listing ------------------------------------------------------------ */

/* What `cairn images`, `layers` and `inspect` show. Strings and arrays are
 * valid only during the callback; a non-zero return of fn stops the walk
 * and is returned. pinned: a process pins it, or (images) a live or
 * detached mount serves it. */
typedef struct cairn_image_rec {
  const char *id;
  const char *const *names; /* sorted */
  size_t n_names;
  unsigned layers;
  uint64_t size;
  int64_t created; /* seconds since the epoch: the config's "created", as podman
                    * shows it; if it has none, stored */
  int64_t stored;  /* when this store got the image */
  bool pinned;
  /* A lazy pull's (doc/lazy-pulls.md): the files of the image's layers
   * not fetched yet, and their bytes; 0 for a complete image. */
  uint64_t pending_files, pending_bytes;
  /* How many of its layers a lazy pull recorded whose diff_id no rebuilt
   * tar has proven yet (or refuted): 0 for an image all proven. */
  unsigned unverified;
} cairn_image_rec;
typedef int (*cairn_image_fn)(const cairn_image_rec *im, void *arg);
/* Newest first. */
int cairn_images_foreach(cairn_store *st, cairn_image_fn fn, void *arg);

/* Every name and what it names: fn(target, name) for each name of an image
 * (target: the image's id) and for each name of an image a layer is in
 * (target: the layer's id), by target then name; one query, however many
 * images. */
typedef int (*cairn_name_fn)(const char *target, const char *name, void *arg);
int cairn_names_foreach(cairn_store *st, cairn_name_fn fn, void *arg);

typedef struct cairn_layer_rec {
  const char *id;
  uint64_t size;
  uint64_t entries;
  unsigned images; /* how many images use it */
  bool pinned;
} cairn_layer_rec;
typedef int (*cairn_layer_rec_fn)(const cairn_layer_rec *l, void *arg);
/* Oldest first. */
int cairn_layers_foreach(cairn_store *st, cairn_layer_rec_fn fn, void *arg);

/* One image in full; its pins come from cairn_pins_foreach. */
typedef struct cairn_image_layer {
  const char *id;
  uint64_t size, entries;
} cairn_image_layer;
typedef struct cairn_image_info {
  cairn_image_rec image;
  const char *config;              /* the config JSON as stored */
  const cairn_image_layer *layers; /* bottom first */
  size_t n_layers;
} cairn_image_info;
typedef int (*cairn_inspect_fn)(const cairn_image_info *info, void *arg);
/* Calls fn once with the image; -ENOENT if there is none. */
int cairn_inspect(cairn_store *st, const char *image_id, cairn_inspect_fn fn, void *arg);

/* What `cairn df` shows: for images, layers and blobs, how many and how
 * many bytes, each thing counted once. shared: used by more than one image
 * (a blob: by more than one layer; an image: one with a layer another image
 * uses, its shared_bytes those layers'). reclaimable: what cairn gc would
 * free now (layers no image uses and no pin holds, the blobs only they or
 * no layer use; gc never removes an image). pinned: held by a pin or a live
 * mount, as `images` and `layers` say (blobs have no pins of their own).
 * A blob's bytes are those its file takes on disk (st_blocks * 512: a
 * sparse file's holes take none); images' and layers' are their tars'. */
typedef struct cairn_df_class {
  uint64_t count, bytes;
  uint64_t shared_count, shared_bytes;
  uint64_t reclaimable_count, reclaimable_bytes;
  uint64_t pinned_count, pinned_bytes;
} cairn_df_class;
struct cairn_df {
  cairn_df_class images, layers, blobs;
  /* The compressed layers pulls keep for podman's Additional Layer Store
   * (STORE/compressed): each goes with its layer, so it is shared, pinned
   * or reclaimable as its layer is. */
  cairn_df_class compressed;
  /* What lazy pulls have not fetched yet: the images with files pending,
   * those files (each layer's) and their bytes (not in any class above:
   * the store does not hold them). */
  uint64_t pending_images, pending_files, pending_bytes;
};
/* Fills df from one snapshot of the store. */
int cairn_df(cairn_store *st, struct cairn_df *df);

/* What `cairn info` says of a store: its schema version and how many
 * images, names, layers and blobs it holds. */
struct cairn_store_info {
  int schema_version;
  uint64_t images, names, layers, blobs;
};
int cairn_store_info(cairn_store *st, struct cairn_store_info *info);

/* Writes the image's merged root filesystem to fd as a tar (pax), the
 * image pinned meanwhile. */
int cairn_export(cairn_store *st, const char *image_id, int fd);

/* ---- removal and maintenance ------------------------------------------ */

/* Removes a name, or an image by id (ref as the user typed it). -EBUSY
 * naming the holders (cairn_errmsg) if the image is pinned or mounted, or
 * a --rw mount's upper layer is left on it. */
int cairn_rm(cairn_store *st, const char *ref);

/* Report of gc / fsck / rm: lines for a person, counts for tests. */
typedef struct cairn_report {
  char **lines;
  size_t n_lines;
  uint64_t layers, blobs, pins, bytes, problems;
} cairn_report;
void cairn_report_free(cairn_report *r);

/* cairn_rm, saying in rep what changed once done (also what it did before
 * a failure): "Untagged: NAME" for each name removed, "Deleted: ID" (full
 * id) for the image, then one line per layer it freed (as gc's). An image
 * with a --rw mount's upper layer left on it (kept or crashed) is -EBUSY
 * naming it, unless flags has CAIRN_RM_FORCE: the upper is dropped first
 * ("Dropped: upper ID of DIR (N entries, SIZE)"). */
#define CAIRN_RM_FORCE 1u
int cairn_rm_report(cairn_store *st, const char *ref, unsigned flags, cairn_report *rep);

/* Removes unreferenced, unpinned layers, blobs, pin files and stale
 * annotations/mount records; dry_run only reports. */
int cairn_gc(cairn_store *st, bool dry_run, cairn_report *r);

/* Verifies blobs and metadata. Incomplete work (orphan blobs of a crashed
 * import, stale records) is discarded first. Problems are counted in
 * r->problems and the call returns -EBADMSG; repair removes what is broken
 * (layers whose blobs are gone or corrupt, images using them). */
int cairn_fsck(cairn_store *st, bool repair, cairn_report *r);
/* fsck's check of the pending files against their layers' kept TOCs
 * (store/remote/lazy.c: the TOC parser is the pull's): each TOC parses and
 * matches the digest the pull verified, and lists each pending file as a
 * regular file of its size and sha256. Each problem is a line of r
 * (r->problems counts them); a negative errno if it could not look. */
int cairn_lazy_fsck(cairn_store *st, cairn_report *r);

/* ---- mounts ------------------------------------------------------------- */

/* The real absolute path of the mountpoint dir names, for every front end
 * alike (cairnfs records it, cairn mount / umount look it up): the parent
 * resolved with realpath, a symlink as last component followed here, the
 * last directory itself never asked (a dead daemon's mount answers stat and
 * realpath with ENOTCONN). PATH_MAX bytes of out are always enough. */
int cairn_mountpoint_resolve(const char *dir, char *out, size_t len);

/* Records that pid serves image at dir (resolved), a mount of device dev
 * ("maj:min", as in mountinfo). */
int cairn_mount_record(cairn_store *st, const char *dir, const char *image_id, pid_t pid,
                       const char *dev, bool rw);
/* A mount that records itself after it answered (cairnfs's fast way)
 * holds this (STORE/mounting.lock, shared) from before it pins until it
 * has recorded and annotated: readers of records and pins wait for it.
 * Returns the fd to pass to end, or a negative errno. */
int cairn_mount_pending_begin(cairn_store *st);
void cairn_mount_pending_end(int fd);
/* Forgets pid's record of dir (another daemon's record of dir stays). */
int cairn_mount_forget(cairn_store *st, const char *dir, pid_t pid);
/* A mount record. Its state is live (served here), detached (the daemon
 * serves it only in other mount namespaces, e.g. a container's, after a
 * host-side unmount), restarting (the daemon, cairnfs's supervisor, runs
 * and holds the session and the pins, but no server of it runs: requests
 * wait for the next one) or stale (the daemon is gone). Strings are valid
 * only during the callback. */
enum cairn_mount_state {
  CAIRN_MOUNT_LIVE = 0,
  CAIRN_MOUNT_DETACHED = 1,
  CAIRN_MOUNT_STALE = 2,
  CAIRN_MOUNT_RESTARTING = 3,
};
typedef struct cairn_mount_rec {
  const char *dir;
  const char *image;
  pid_t pid; /* the daemon (cairnfs's supervisor) */
  enum cairn_mount_state state;
  bool rw;
  const char *dev; /* "maj:min"; "" in a record of an older cairn */
} cairn_mount_rec;
typedef int (*cairn_mount_fn)(const cairn_mount_rec *m, void *arg);
/* Every mount record, by dir; a non-zero return of fn stops and is
 * returned. */
int cairn_mounts_foreach(cairn_store *st, cairn_mount_fn fn, void *arg);

/* What dir (absolute) is as a mount point now (store/mount.c). LIVE asks
 * the file system (statfs), so it waits for a live daemon's answer. */
enum cairn_mountpoint_state {
  CAIRN_MP_NONE = 0,  /* not a mount point */
  CAIRN_MP_LIVE = 1,  /* a cairnfs mount that answers */
  CAIRN_MP_STALE = 2, /* a cairnfs mount whose daemon is gone (ENOTCONN) */
  CAIRN_MP_OTHER = 3, /* something else is mounted there */
};
int cairn_mountpoint_state(const char *dir);

/* Unmounts the topmost mount at dir; lazy detaches it even while in use
 * (MNT_DETACH; a dead daemon's mount needs it). Not root: fusermount3 does
 * it for the user who mounted it. */
int cairn_mountpoint_unmount(const char *dir, bool lazy);

/* The device ("maj:min") of the cairnfs mount on top of dir in our mount
 * namespace, without asking the file system; -ENOENT if there is none. */
int cairn_mountpoint_dev(const char *dir, char *dev, size_t len);

/* Whether the process pid (a mount's daemon) still holds a flock(2) lock:
 * its pins, its upper layer's. It lets go of them as soon as its session
 * is over, before any bookkeeping; false once it is gone. */
bool cairn_mount_daemon_holds(pid_t pid);
/* Ends the FUSE connection of the mount of device dev ("maj:min") for
 * every mount namespace (fusectl's abort, mounted in a private namespace
 * of a child if it is not mounted): 0, -ENOENT if it is over already,
 * -EPERM if not allowed, or -errno. */
int cairn_mount_abort(const char *dev);

/* The processes whose mount namespaces hold the cairnfs mount of device
 * dev, one per namespace, as "pid 1234 (crun), pid 1240 (sh)" in *desc
 * (caller frees). Returns how many. */
int cairn_mount_holders(const char *dev, char **desc);
/* The processes of this namespace that use the mount at dir (an absolute
 * real path): a working directory, root or open file at or below it, as
 * "pid 1234 (sh), pid 1240 (less)" in *desc (at most 8 named; caller
 * frees). Read from /proc's links, never through the mount. Returns how
 * many. */
int cairn_mount_users(const char *dir, char **desc);

/* ---- pull -------------------------------------------------------------- */

/* The wait before retry number attempt (0 = the first retry): exponential
 * from base_ms, doubling per attempt up to cap_ms, with "equal jitter" (the
 * upper half of the current step is random, taken from rnd). Correct for
 * every attempt number, UINT_MAX included: no shift or multiply can wrap,
 * and the result is always in [base_ms, cap_ms] (base_ms > cap_ms is read
 * as base_ms == cap_ms). */
uint64_t cairn_backoff_ms(unsigned attempt, uint64_t base_ms, uint64_t cap_ms, uint64_t rnd);

enum cairn_pull_state {
  CAIRN_PULL_WAITING = 0, /* pinned, not started */
  CAIRN_PULL_FETCHING,    /* bytes are arriving */
  CAIRN_PULL_STORING,     /* verified blob is being ingested */
  CAIRN_PULL_REUSED,      /* was already in the store */
  CAIRN_PULL_DONE,        /* fetched, verified and stored */
};

/* One layer as a progress callback sees it. */
typedef struct cairn_pull_layer {
  const char *digest;  /* the blob's "sha256:..." */
  const char *diff_id; /* the layer id (hex) */
  uint64_t size;       /* the blob's size from its descriptor */
  uint64_t fetched;    /* bytes received so far (of this attempt) */
  uint64_t stored;     /* STORING: bytes of the blob ingested so far (of size) */
  enum cairn_pull_state state;
  /* STORING, DONE: pulled partially (doc/lazy-pulls.md): fetched is all that
   * came over the network for it (the TOC and the ranges of the files the
   * store lacked), against size; stored counts the rebuilt stream, which
   * is not size */
  bool partial;
} cairn_pull_layer;

typedef struct cairn_pull_opts {
  const char *platform; /* "OS/ARCH[/VARIANT]"; NULL is linux/amd64 */
  const char *creds;    /* "USER:PASS"; NULL reads auth.json files */
  bool insecure;        /* docker://: plain HTTP (and no TLS checks) to every host */
  /* docker://: cairn.conf (cairn_config_load), or NULL: the registry's
   * mirrors are tried first, in order, each until one gives the image's
   * manifest, which then serves the whole pull; a registry (or mirror) it
   * marks insecure is talked to in plain HTTP. */
  const cairn_config *config;
  /* docker://: a directory whose *.crt CAs are trusted besides the
   * system's; NULL looks in /etc/{containers,docker}/certs.d/HOST[:PORT] */
  const char *cert_dir;
  unsigned jobs; /* layers fetched at once; 0 is 3 */
  /* docker://: a zstd:chunked layer is recorded from its TOC alone, its
   * files fetched on first read or by cairn_fill (doc/lazy-pulls.md);
   * other layers are pulled in full, said once through log */
  bool lazy;
  unsigned attempts;                        /* tries per request; 0 is 6 */
  uint64_t backoff_base_ms, backoff_cap_ms; /* 0 is 200 / 10000 */
  /* Called on the calling thread a few times a second while layers move
   * and on every change of state; the array is valid during the call. */
  void (*progress)(const cairn_pull_layer *layers, size_t n, void *arg);
  /* One line per retried attempt (no newline); calls are serialized but
   * may come from any thread. */
  void (*log)(const char *line, void *arg);
  void *arg;
} cairn_pull_opts;

/* Pulls SOURCE ("oci:DIR[:REF]", "docker-archive:FILE",
 * "docker://HOST[:PORT]/REPO[:TAG|@sha256:HEX]") into the store and
 * commits it, named name (or a default name from the source when NULL:
 * HOST[:PORT]/REPO:TAG, the archive's first RepoTag, the OCI layout
 * entry's name annotation as podman reads it: io.containerd.image.name,
 * else org.opencontainers.image.ref.name, with "localhost/" when it names
 * no host and ":latest" when no tag; no name when it has none). Every layer is pinned before it is
 * looked up and stays pinned until the image is committed. Nothing is committed when any blob fails
 * its digest or size (-EBADMSG). -ENOENT when the source, manifest, platform or a blob is not
 * there, -EACCES when auth is refused. On failure cairn_errmsg(st) gives the reason. */
int cairn_pull(cairn_store *st, const char *source, const char *name, const cairn_pull_opts *opts,
               cairn_id image_id_out);

/* Fetches every pending file of image ref, holding the image's and its
 * layers' pins throughout (rm is refused meanwhile; pinned, when set, is
 * called once they are held): the files a prefetch landmark names first,
 * then the rest in layer and TOC order; files next to each other in a
 * layer's blob one range, several ranges one request, a few requests in
 * flight (store/remote/fill.c); each file verified as cairn_lazy_fetch
 * verifies it and stored alone, under its lock (cn_lazy_lock): a file
 * another process is fetching is not fetched again. A file that fails is
 * said through log and the rest are fetched. Resumable:
 * what a killed fill stored stays stored, the rest stays pending. image_id
 * gets the image. 0 when nothing is pending any more; otherwise the first
 * failure, with how many files failed. */
typedef struct cairn_fill_opts {
  void (*progress)(size_t done, size_t total, void *arg); /* files */
  void (*log)(const char *line, void *arg);
  void (*pinned)(void *arg);
  void *arg;
  bool keep_blobs;   /* finish each layer from its whole blob, kept (cairnfs --als) */
  const char *creds; /* "USER:PASS" for the layers' registries; NULL: auth.json's */
} cairn_fill_opts;
int cairn_fill(cairn_store *st, const char *image_ref, const cairn_fill_opts *opts,
               cairn_id image_id);

/* What push and export do first (store/remote/partial.c): an image a lazy
 * pull left with files not fetched yet, or layers without their exact tar
 * record, is filled (cairn_fill), said through log first ("ID was pulled
 * lazily: fetching its N files not fetched yet (SIZE) first, as cairn fill
 * does"). 0 also when there was nothing to do. */
int cairn_fill_lazy(cairn_store *st, const char *image_id, void (*log)(const char *line, void *arg),
                    void *arg);

/* ---- push (store/remote/push.c) ------------------------------------------ */

enum cairn_compress { CAIRN_COMPRESS_GZIP = 0, CAIRN_COMPRESS_ZSTD, CAIRN_COMPRESS_NONE };

/* A layer a pull kept (cn_layer_blobs_of: the compressed bytes as the
 * source's manifest named them) is sent as it is, with its digest, size and
 * media type (a Docker media type as its OCI equivalent): nothing is
 * compressed again, and a registry that has it in another repository
 * mounts it. A layer with no such blob (imported, committed) is compressed
 * anew, with compress. */
enum cairn_push_kept {
  CAIRN_PUSH_KEPT_ANY = 0, /* any kept blob, whatever its compression */
  CAIRN_PUSH_KEPT_SAME,    /* only a kept blob compressed with compress */
  CAIRN_PUSH_KEPT_NONE,    /* none: every layer compressed anew */
};

/* The layout of the layers written anew (push --format): PLAIN, one
 * compressed tar; ZSTD_CHUNKED and ESTARGZ, lazily pullable (every file's
 * data in frames of its own, a TOC; store/remote/chunked_write.c). A format
 * sets the compression (zstd, gzip) and writes every layer anew. eStargz's
 * TOC is an entry of the tar: its layers' diff_ids, and so the image id,
 * are not the image's (the config is sent with the new diff_ids). */
enum cairn_push_format {
  CAIRN_PUSH_FORMAT_PLAIN = 0,
  CAIRN_PUSH_FORMAT_ZSTD_CHUNKED,
  CAIRN_PUSH_FORMAT_ESTARGZ,
};

typedef struct cairn_push_opts {
  /* The network options as a pull takes them (creds, insecure, config,
   * cert_dir, attempts, backoff, log, arg), and its progress callback,
   * whose layers read: WAITING; STORING: the exact tar being rebuilt and
   * compressed (stored of size, the tar's size); FETCHING: being sent
   * (fetched of size, now the compressed size; digest set); REUSED: the
   * destination had it (or mounted it from another repository); DONE:
   * sent. platform and jobs are unused (layers go one at a time). */
  cairn_pull_opts net;
  enum cairn_compress compress;  /* the layers' compression; gzip by default */
  enum cairn_push_kept kept;     /* which blobs a pull kept are sent as they are */
  enum cairn_push_format format; /* PLAIN by default */
} cairn_push_opts;

/* Pushes the image ref (a name or id) to dest, "docker://HOST[:PORT]/REPO[:TAG]"
 * (the OCI distribution API: blobs the registry has are skipped, blobs of
 * another repository of the same registry the image was pulled from are
 * mounted, the rest uploaded; then an OCI manifest) or "oci:DIR[:TAG]" (an
 * OCI image layout, index.json's entry annotated with the tag; TAG is
 * "latest" if not given), "oci-archive:FILE[:TAG]" (that layout as a tar;
 * FILE replaced) or "docker-archive:FILE[:NAME[:TAG]]" (docker save's tar,
 * uncompressed layers; an existing FILE is -EEXIST; digest_out is then
 * "sha256:" and the image id). A layer a pull kept is sent as it was pulled
 * (opts->kept); any other is its exact tar (cn_layer_tar), compressed;
 * so the pushed image has the same diff_ids and, its config sent as
 * stored, the same id. The image and its layers are pinned for the whole
 * push. digest_out gets the manifest's digest. -ENOENT if there is no such
 * image, -ENODATA if a layer has no tar record. */
int cairn_push(cairn_store *st, const char *ref, const char *dest, const cairn_push_opts *opts,
               char digest_out[CAIRN_DIGEST_BUF]);

/* ---- merged tree (store/merge.c, tree.c, index.c) -------------------------
 * An image's root filesystem with its layers merged by the OCI rules,
 * read-only (safe to read from many threads). cairn_tree_build serves it
 * from the image's index file (STORE/index/ID), mapped shared: every mount
 * of an image reads the same page-cache pages, and nothing is allocated per
 * entry. The index is written when the image is committed, or on the first
 * build that finds none (or a corrupt one). Nodes and directory entries
 * are the index's own fixed-width records: they hold no pointers, only
 * offsets, which the cairn_tree_* accessors below turn into strings.
 * Inode numbers run 1..cairn_tree_count(), root = 1, stable for an image. */

typedef struct cairn_dirent {
  uint32_t name; /* cairn_tree_str */
  uint32_t ino;
} cairn_dirent;

typedef struct cairn_node {
  uint32_t mode; /* file type bits (S_IFMT) | 07777 */
  uint32_t uid, gid, nlink;
  uint64_t size; /* regular files; symlinks: length of target */
  uint64_t rdev;
  int64_t mtime_sec;
  uint32_t mtime_nsec;
  uint32_t parent; /* directories: parent's ino (root: 1) */
  uint32_t target; /* symlinks: cairn_tree_str */
  uint32_t blob;   /* regular files with size > 0: cairn_tree_str */
  uint32_t xattrs; /* cairn_tree_xattr */
  uint32_t n_xattrs;
  uint32_t children;   /* directories: cairn_tree_children */
  uint32_t n_children; /* sorted by name (strcmp) */
} cairn_node;

typedef struct cairn_tree cairn_tree;

int cairn_tree_build(cairn_store *st, const char *image_id, cairn_tree **out);
/* The same tree for serving (a mount): its index is checked lazily, the
 * header and root now (its checksum by fsck only), each node the first
 * time cairn_tree_node hands it out, so that opening it costs the same at
 * a thousand entries or a million. Everything a node that was handed out
 * refers to (strings, xattrs, children) was checked. */
int cairn_tree_open(cairn_store *st, const char *image_id, cairn_tree **out);
/* Starts reading the image's index in the background, if it has one, and
 * returns at once (true if it has one): a mount asks before it pins, so
 * that the disk reads the index while the pins are taken (cairn_tree_open
 * then waits less). */
bool cairn_tree_prefetch(cairn_store *st, const char *image_id);
void cairn_tree_free(cairn_tree *t);
size_t cairn_tree_count(const cairn_tree *t);
/* NULL if ino is out of range, or its node fails its checks (a corrupt
 * index opened by cairn_tree_open). */
const cairn_node *cairn_tree_node(const cairn_tree *t, uint64_t ino);
/* The nodes' sizes in 4 KiB blocks, summed (statfs): read from the
 * index's header, no node is read. */
uint64_t cairn_tree_blocks(const cairn_tree *t);
/* A string of the tree (a name, target or blob field): NULL for 0. */
const char *cairn_tree_str(const cairn_tree *t, uint32_t off);
/* The n_children entries of directory dir. */
const cairn_dirent *cairn_tree_children(const cairn_tree *t, const cairn_node *dir);
/* Extended attribute i (< n_xattrs) of n, pointing into the tree. */
cairn_xattr cairn_tree_xattr(const cairn_tree *t, const cairn_node *n, size_t i);
/* The entry named name in directory dir, or NULL. */
const cairn_dirent *cairn_tree_lookup(const cairn_tree *t, const cairn_node *dir, const char *name);

/* ---- runtime bundles (store/spec.c) ------------------------------------ */

/* What the caller changes of the image config before it is converted: each
 * NULL (or 0) keeps the image's. */
typedef struct cairn_spec_opts {
  const char *entrypoint;  /* replaces Entrypoint (and drops Cmd unless args) */
  const char *const *args; /* replace Cmd (when not NULL; n_args may be 0) */
  size_t n_args;
  const char *const *env; /* KEY=VALUE, each replacing the image's KEY */
  size_t n_env;
  const char *user;   /* replaces User: user, uid, user:group, uid:gid... */
  const char *rootfs; /* root.path; NULL is "rootfs" */
  bool terminal;      /* process.terminal (and TERM=xterm unless Env has it) */
  bool rw;            /* root.readonly false */
} cairn_spec_opts;

/* The OCI runtime config (a bundle's config.json) of an image, converted
 * from its config by the image-spec's conversion rules (store/spec.c says
 * how), in *json (caller frees). A User the image's /etc/passwd or
 * /etc/group does not know is -ENOENT; an image with no Entrypoint or Cmd
 * and no args given is -EINVAL. */
int cairn_runtime_spec(cairn_store *st, const char *image_id, const cairn_spec_opts *opts,
                       char **json);

/* ---- tag, history (store/tag.c, store/history.c) ----------------------- */

/* Names the image ref resolves to name too (NAME[:TAG], normalized); a
 * name that named another image moves. Its id in image_id_out. */
int cairn_tag(cairn_store *st, const char *ref, const char *name, cairn_id image_id_out);

/* One entry of an image config's history, as podman history shows it.
 * Strings are valid only during the callback. */
typedef struct cairn_history_rec {
  int64_t created;        /* seconds since the epoch; 0 if the entry has none */
  const char *created_by; /* "" if none; likewise comment and author */
  const char *comment;
  const char *author;
  const char *layer; /* the layer it made (diff_id), or NULL (empty_layer) */
  uint64_t size;     /* that layer's size; 0 without one */
  bool empty_layer;
} cairn_history_rec;
typedef int (*cairn_history_fn)(const cairn_history_rec *h, void *arg);
/* Calls fn for each history entry of the image, newest first (a config
 * without history: one bare entry per layer); a non-zero return of fn
 * stops and is returned. */
int cairn_history_foreach(cairn_store *st, const char *image_id, cairn_history_fn fn, void *arg);

/* ---- files in other users' directories (store/remote/file_put.c) -------- */

#define CAIRN_PUT_NOREPLACE 1u /* fail -EEXIST if name is there */
/* Writes len bytes (of mem, or of src_fd from offset 0 when src_fd >= 0)
 * to dirfd/name, replacing it whole: through a new file of mode (less the
 * umask) under a random name made with O_CREAT|O_EXCL|O_NOFOLLOW, fsynced
 * and renamed over name, so a file or symlink someone planted in dirfd can
 * make it fail, never redirect it. 0 or a negative errno. */
int cairn_file_put_at(int dirfd, const char *name, int src_fd, const void *mem, uint64_t len,
                      mode_t mode, unsigned flags);

/* ---- registry logins (store/remote/login.c) ------------------------------ */

/* The auth.json that login writes and pulls read first, as podman's:
 * $REGISTRY_AUTH_FILE, else $XDG_RUNTIME_DIR/containers/auth.json, else
 * /run/containers/UID/auth.json. Pulls then read
 * ${XDG_CONFIG_HOME:-~/.config}/containers/auth.json and
 * ${DOCKER_CONFIG:-~/.docker}/config.json. */
int cn_auth_file(char *buf, size_t len);

typedef struct cairn_login_opts {
  const char *authfile;       /* the file to write; NULL: cn_auth_file's */
  bool insecure;              /* plain HTTP (and no TLS checks) */
  const char *cert_dir;       /* CAs to trust besides the system's (as a pull's) */
  const cairn_config *config; /* cairn.conf: insecure registries; or NULL */
} cairn_login_opts;

/* Checks user/password against the registry's /v2/ (answering its Bearer
 * or Basic challenge, as a pull does), then records them for host
 * (HOST[:PORT]; a URL's scheme and path are dropped) in the auth file.
 * -EACCES when the registry refuses them; nothing is written then. */
int cairn_login(cairn_store *st, const char *host, const char *user, const char *password,
                const cairn_login_opts *opts);
/* Removes host's credentials from the auth file (authfile, or NULL for
 * cn_auth_file's); host NULL removes every one. -ENOENT if it has none
 * for host. */
int cairn_logout(cairn_store *st, const char *host, const char *authfile);
/* ---- writable mounts: upper layers (store/upper.c) ------------------------
 * A --rw mount writes its changes to a private directory of the store,
 * STORE/uppers/ID/ (root/ the changes, work/ the daemon's staging), made
 * 0700. The image's layers and blobs are never changed. */

/* Creates a fresh upper for image_id mounted at mountpoint: its id in
 * id_out, its directory in path, and in *lock_fd an fd on that directory
 * holding an exclusive flock, which the serving daemon keeps open for as
 * long as it runs (no live mount owns an upper whose lock is free). */
int cairn_upper_create(cairn_store *st, const char *image_id, const char *mountpoint,
                       cairn_id id_out, char *path, size_t len, int *lock_fd);
/* The same for cairn commit's move of a live mount off the upper from
 * onto image_id: the fresh upper names from (its info's "from" line), so
 * that a kill of the mount's supervisor during the move leaves one of the
 * two (cairn_uppers_foreach settles them, see cairn_upper_mark_moved). */
int cairn_upper_create_moved(cairn_store *st, const char *image_id, const char *mountpoint,
                             const char *from, cairn_id id_out, char *path, size_t len,
                             int *lock_fd);
/* The move's commit point for a crash of its supervisor (lock_fd: the
 * fresh upper's, from cairn_upper_create_moved): made once the fresh upper
 * and the new image hold the whole view, with no write running. Left by a
 * crash beside the upper it moved from, both unowned: marked, the fresh
 * upper is the mount's and the old one, whose changes the new image
 * holds, is dropped; unmarked, the fresh upper holds only copies of the
 * old one's files and is dropped. */
int cairn_upper_mark_moved(int lock_fd);
/* Opens the upper id again (cairn mount --rw --resume): its image in
 * image_out, its directory in path, its lock in *lock_fd; -EBUSY if a live
 * mount holds it. A keep mark is removed (the upper is in use again). */
int cairn_upper_open(cairn_store *st, const char *id, cairn_id image_out, char *path, size_t len,
                     int *lock_fd);
/* Marks the upper id kept (cairn umount --keep): gc leaves it and its
 * daemon does not drop it when it exits. */
int cairn_upper_keep(cairn_store *st, const char *id);
/* Records (drop) that cairn umount without --keep asked for the upper id
 * to go when its session ends, removing a keep mark (*was_kept says if
 * there was one); !drop undoes that (an unmount that failed), putting
 * back the keep mark if *was_kept. */
int cairn_upper_mark_drop(cairn_store *st, const char *id, bool drop, bool *was_kept);
/* At the end of the session of the upper id (dirfd: its directory): 1 if
 * discarded, as cairn umount asked (a drop mark, no keep mark), 0 if kept
 * (marked kept if it was not: nobody asked for it to go). */
int cairn_upper_session_end(cairn_store *st, const char *id, int dirfd);
/* Discards the upper id: renamed away at once (its daemon, on a clean
 * exit, still holding its lock), no longer listed nor resumable; its files
 * stay until cairn_upper_drop (cairn umount, once the daemon is gone) or
 * gc removes them. */
int cairn_upper_discard(cairn_store *st, const char *id);
/* Removes the upper id, discarded or not, and its files. */
int cairn_upper_drop(cairn_store *st, const char *id);
/* Removes the upper id if no live mount serves it and it holds no entry
 * (nothing uncommitted: a commit moved its mount onto it, or nothing was
 * changed): 1 if removed, 0 if kept, or -errno. */
int cairn_upper_drop_if_empty(cairn_store *st, const char *id);
/* One upper as listings show it. Strings are valid during the callback. */
typedef struct cairn_upper_rec {
  const char *id;
  const char *image; /* image id */
  const char *dir;   /* the mountpoint it was made for */
  int64_t created;   /* seconds since the epoch */
  bool live;         /* a running daemon holds its lock */
  bool kept;         /* kept by cairn umount --keep for a later --resume */
  uint64_t entries;  /* entries below root/ (whiteouts included) */
  uint64_t bytes;    /* their regular files' sizes */
} cairn_upper_rec;
typedef int (*cairn_upper_fn)(const cairn_upper_rec *u, void *arg);
/* Every complete upper of the store; a non-zero return of fn stops. */
int cairn_uppers_foreach(cairn_store *st, cairn_upper_fn fn, void *arg);
/* The id of the upper the --rw mount at dir (absolute, its root) serves
 * now, asked of its daemon (the trusted.cairn.upper xattr of its root;
 * root only): 0, or -ENODATA if dir's mount names none (a read-only
 * mount, an older cairnfs, no cairnfs mount), or -errno. Other uppers made
 * for dir may be live too: a mount of dir that umount detached while
 * another mount namespace (a container) holds it is served on. */
int cairn_upper_of_mount(const char *dir, cairn_id id_out);
/* lsetxattr(path, name, set) or, set NULL, lgetxattr into buf (len bytes,
 * under 4 KiB), asked by a child holding none of the caller's fds and
 * awaited at most timeout_s seconds: a FUSE request a dead server read is
 * waited for uninterruptibly until a server answers or the session ends.
 * The value's length (0 for a set), -errno, or -ETIMEDOUT (the child waits
 * on; init reaps it). The ask of cairn_upper_of_mount (2 s) and commit's
 * move. */
int cairn_xattr_bounded(const char *path, const char *name, const char *set, char *buf, size_t len,
                        int timeout_s);
/* cairn commit's freeze of the live --rw mount at dir (absolute, its
 * root) serving upper: its daemon holds every request that changes the
 * view (writes, creates, renames, ...; reads go on) until the move
 * (cairn_mount_move_frozen) or cairn_mount_thaw, or until the process
 * that holds the freeze dies, or for a bound (cairnfs's, 60 s) at most;
 * then writes run and the move is refused. Asked by a child that holds
 * the freeze for as long as the caller lives (it exits when hold_fd, the
 * caller's end of a pipe, closes: a caller killed ends the freeze).
 * Awaited at most timeout_s seconds. 0 (frozen: hold_fd and pid set),
 * -ENOTSUP if dir's daemon cannot freeze (an older cairnfs), -EBUSY if
 * another freeze holds it, -ETIMEDOUT, or -errno. */
typedef struct cairn_freeze {
  int hold_fd;
  pid_t pid;
} cairn_freeze;
int cairn_mount_freeze(const char *dir, const char *upper, int timeout_s, cairn_freeze *f);
/* The move of the frozen mount at dir (serving upper) onto image (a fresh,
 * empty upper), then the thaw: 0, -EBUSY if the freeze ended (its bound,
 * a restart of the daemon: the mount stays on its image and upper, which
 * hold every write), -ETIMEDOUT, or -errno. */
int cairn_mount_move_frozen(const char *dir, const char *upper, const char *image, int timeout_s);
/* Ends a freeze (ask: tells the daemon; else only lets the holder go, the
 * daemon having thawed). */
void cairn_mount_thaw(const char *dir, const char *upper, cairn_freeze *f, bool ask);

/* cairn commit (store/commit.c): the upper upper_id as a new OCI layer
 * (.wh. whiteouts, .wh..wh..opq opaque markers, imported like any layer:
 * deduplicated, its diff_id in layer_out) on top of the upper's image, and
 * a new image (image_out) named name (or none if NULL), whose config is
 * the image's plus the layer and a history entry (comment, if any). The
 * upper and the image are only read. */
int cairn_commit(cairn_store *st, const char *upper_id, const char *name, const char *comment,
                 cairn_id image_out, cairn_id layer_out);
/* cairn_commit, saying in rep (if not NULL) what it left out: one line
 * per socket ("/PATH: a socket, not committed"). Sparse files whose holes
 * come to more than a layer holds (64 GiB) fail it, -EBADMSG, naming the
 * file and its owner. */
struct cairn_report;
int cairn_commit_report(cairn_store *st, const char *upper_id, const char *name,
                        const char *comment, cairn_id image_out, cairn_id layer_out,
                        struct cairn_report *rep);

/* ---- podman's Additional Layer Store (store/als.c) --------------------- */

/* What a pull keeps of a layer it downloaded, so that a containers/storage
 * Additional Layer Store can hand the layer to podman by the digest of its
 * manifest: the compressed blob's digest, media type and size against the
 * layer's diff_id, and the compressed bytes themselves (STORE/compressed/HEX,
 * removed with the layer). */
typedef struct cairn_layer_blob {
  char digest[CAIRN_DIGEST_LEN + 1]; /* the manifest's (compressed) digest */
  cairn_id diff_id;
  char media_type[128];
  uint64_t size; /* compressed */
} cairn_layer_blob;

/* Records that layer diff_id (stored) was pulled as the blob digest (of
 * media_type, size bytes) and keeps its bytes, the file fd (which the caller
 * checked against digest and size): linked into the store if fd is an
 * anonymous file of the store's file system, else copied. */
int cn_layer_blob_keep(cairn_store *st, const char *diff_id, const char *digest,
                          const char *media_type, uint64_t size, int fd);
/* The record of digest ("sha256:HEX"): 0, or -ENOENT with no record (or a
 * malformed digest). */
int cairn_layer_blob_get(cairn_store *st, const char *digest, cairn_layer_blob *out);
typedef int (*cairn_layer_blob_fn)(const cairn_layer_blob *b, void *arg);
/* Every record, by digest; a non-zero return of fn stops and is returned. */
int cairn_layer_blobs_foreach(cairn_store *st, cairn_layer_blob_fn fn, void *arg);
/* The records of layer diff_id (the blobs it was pulled as), the latest
 * kept first; a non-zero return of fn stops and is returned. None (0, fn
 * not called) for a layer imported or committed, never pulled. */
int cn_layer_blobs_of(cairn_store *st, const char *diff_id, cairn_layer_blob_fn fn, void *arg);
/* The kept compressed bytes of digest, open read-only; -ENOENT if none. */
int cairn_layer_blob_open(cairn_store *st, const char *digest);
/* The `info` file of an Additional Layer Store for b: a containers/storage
 * Layer as JSON (compressed-diff-digest, compressed-size, diff-digest,
 * compression, read-only). NULL if out of memory; the caller frees. */
char *cairn_layer_blob_info(const cairn_layer_blob *b);
/* Pins layer diff_id in ps, and every image that uses it now (so that
 * `cairn rm` of one is refused, exit 4, naming ps's purpose, as for a
 * mounted image): what an Additional Layer Store takes when podman says it
 * uses the layer. */
int cairn_layer_pin_users(cairn_store *st, cairn_pinset *ps, const char *diff_id);
/* The tree of one layer alone, in overlayfs's encoding of a lower layer:
 * its entries as they are (parents synthesized), each whiteout a 0/0
 * character device under the name it hides, each opaque directory marked
 * with the xattr trusted.overlay.opaque=y (served by cairnfs --als). */
int cairn_layer_diff_tree(cairn_store *st, const char *diff_id, cairn_tree **out);

#ifdef __cplusplus
}
#endif
#endif
