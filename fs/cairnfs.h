/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairnfs.h — what cairnfs's parts share: the options (main.c parses
 * them, options.c makes the session's), the daemon's verdict and fds
 * (daemon.c), the supervisor (supervisor.c: holds the mount, its /dev/fuse fd
 * and its pins, restarts the server), the server (conn.c: serves the
 * session it inherits) and the FUSE operations (ops.c): the state one
 * mount serves from.
 */
#ifndef CAIRNFS_H
#define CAIRNFS_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <sys/stat.h>

#include "cairn.h"
#include "cleanup.h"

struct cairnfs {
  cairn_store *st;          /* only for opening blobs (thread-safe) */
  cairn_tree *tree;         /* read-only once built: no lock needed */
  bool no_open, no_opendir; /* the kernel need not open files / dirs (init) */
  char dev[32];             /* the mount's device, "MAJ:MIN" (set once mounted) */
  bool readahead_raised;    /* once INIT is answered (conn.c) or by the first read (ops.c) */
  /* FUSE passthrough (passthrough.c): offered by the kernel and wanted. */
  bool passthrough;
  int fuse_fd;                   /* the session's /dev/fuse fd (its ioctls) */
  uint64_t *backing;             /* the shared table of open inodes, or NULL */
  size_t backing_inodes;         /* its size: inodes 1..backing_inodes */
  struct cairnfs_rw *rw;         /* a writable mount's upper layer (rw.h, rw_*.c), else NULL */
  bool debug_fetch;              /* say why a pending file's fetch failed (-d) */
  struct cairnfs_access *access; /* -o record_access (access.c), else NULL */
};

/* access.c: the order of a mount's first reads (-o record_access), the
 * first CAIRNFS_ACCESS_FILES files read within CAIRNFS_ACCESS_SECONDS of
 * the server's start. _start sets fs->access; _note, from every read of a
 * lower file (cheap: see access.c); _save, when the session ends, writes
 * the paths into the store as image_id's access list; _free. */
#define CAIRNFS_ACCESS_FILES 8192
#define CAIRNFS_ACCESS_SECONDS 60
int cairnfs_access_start(struct cairnfs *fs);
void cairnfs_access_note(struct cairnfs *fs, const cairn_node *n);
int cairnfs_access_save(struct cairnfs *fs, const char *image_id);
void cairnfs_access_free(struct cairnfs *fs);

extern const struct fuse_lowlevel_ops cairnfs_ops;
/* The operations of a writable (-o writable) mount: fs->rw is set. */
extern const struct fuse_lowlevel_ops cairnfs_rw_ops;

/* ops.c, shared with rw_*.c: a node's attributes as the kernel sees them,
 * and the reply to a read of a node's blob (fd-backed, spliced). */
void cairnfs_node_stat(const cairn_node *n, uint64_t ino, struct stat *st);
/* Sets st's st_blocks to the blocks n's blob takes (a large file's: its
 * holes not counted). */
void cairnfs_node_blocks(struct cairnfs *fs, const cairn_node *n, struct stat *st);
/* reply.c: replies to a getxattr of name (listxattr) on tree node n, or
 * as for a node without xattrs if n is NULL: the read-only tree's and the
 * ALS's. */
void cairnfs_reply_getxattr(fuse_req_t req, const cairn_tree *t, const cairn_node *n,
                            const char *name, size_t size);
void cairnfs_reply_listxattr(fuse_req_t req, const cairn_tree *t, const cairn_node *n, size_t size);
/* Replies to a read with size bytes of fd at off, spliced (the blobs',
 * the ALS's kept layers' and the upper files' one read path). */
void cairnfs_reply_fd(fuse_req_t req, int fd, off_t off, size_t size);
/* The name of n's blob (NULL: none) in *name: a pending file's (a lazy
 * pull's, "sha256:HEX" in the index) is fetched first, once for all the
 * threads that ask (fetch.c); -EIO if that failed, -ENOMEM. */
int cairnfs_blob_name(struct cairnfs *fs, const cairn_node *n, const char **name);
/* A read of len bytes at off of the pending node n, parked on its fetch
 * if that runs (or starts now): 1, the reply is the fetch's; 0, it is the
 * caller's (fetched, failed, or no memory to park) (fetch.c). */
int cairnfs_read_park(fuse_req_t req, struct cairnfs *fs, const cairn_node *n, off_t off,
                      size_t len);
/* The session is over: reads parked on a fetch are dropped, and replies
 * to them under way are waited for (before the session and the store
 * go). */
void cairnfs_fetch_stop(void);
/* Raises the mount's readahead (sysfs, root only) once: see ops.c. */
void cairnfs_readahead_raise(struct cairnfs *fs);
void cairnfs_read_lower(fuse_req_t req, struct cairnfs *fs, const cairn_node *n, size_t size,
                        off_t off);
/* Replies to an lseek (SEEK_DATA or SEEK_HOLE) of node n at off, from its
 * blob, whose holes the store keeps. */
void cairnfs_lseek_lower(fuse_req_t req, struct cairnfs *fs, const cairn_node *n, off_t off,
                         int whence);

/* rw_setup.c: gives fs (its store and tree open) an upper layer in the store
 * for image_id mounted at dir: a fresh one, or the kept upper resume (an
 * id, else NULL), held (flocked) until cairnfs_rw_free, which drops it
 * unless it was kept (cairn umount --keep) or resumed and never served.
 * The daemon's umask becomes 0 (modes come from the kernel's requests). */
struct cairnfs_rw_held {
  const char *upper; /* the upper's id: the kept one to resume, else NULL */
  /* Given by a supervisor that holds the upper (its flock, across
   * restarts), else -1: */
  int lock_fd;  /* the upper's directory, flocked by the supervisor */
  int nodes_fd; /* memfd: the table of upper objects (nodetab.c) */
  bool fresh;   /* the supervisor just made it (the first server sets up root/) */
};
int cairnfs_rw_setup(struct cairnfs *fs, const char *image_id, const char *dir,
                     const struct cairnfs_rw_held *held);
void cairnfs_rw_free(struct cairnfs *fs);
/* Whether the request this thread handles is one the kernel resent after
 * a restart (the dead server read it, and may have applied it): conn.c
 * sets it for each request it reads, rw_*.c answer such a replay with
 * what the first run did (defined in ops.c, below both). */
extern __thread bool cairnfs_resent;

/* als.c: `cairnfs --als ...` (argv[0] is "--als"), podman's Additional
 * Layer Store; returns the exit code. */
int cairnfs_als_main(int argc, char **argv);

/* What the command line asks (main.c). */
struct cairnfs_options {
  const char *image;
  const char *dir;
  char *store;
  bool foreground, debug;
  bool suid, dev;      /* -o suid / -o dev: honour setuid bits / device nodes */
  bool no_passthrough; /* every read through the server (unless -o passthrough) */
  bool writable;       /* -o writable: a private upper layer (rw.h) */
  char *upper;         /* -o upper=ID: the kept upper to resume (implies writable) */
  char *fuse_opts;     /* options passed on to libfuse, comma-separated */
  bool record_access;  /* -o record_access: record the first reads (access.c) */
  bool trust_store;    /* --trust-store: as root, a store another user owns */
};

/* options.c: appends opt (len bytes) to the comma-separated list *opts
 * (malloc'd, NULL for none); -ENOMEM. The mount options the session is
 * created with, every mount's before the user's (caller frees). */
int cairnfs_opts_append(char **opts, const char *opt, size_t len);
char *cairnfs_fuse_opts(const struct cairnfs_options *o);
/* options.c: DIR given as /proc/self/fd/N (what cairn bundle passes: the
 * directory it checked, open as our fd N) is mounted through that fd, so
 * the mount lands on that directory whatever its name has become; its name
 * (recorded, shown) is where the fd points. cairnfs_dir_is_fd says whether
 * dir is one; cairnfs_mountpoint_resolve is cairn_mountpoint_resolve but for
 * those; cairnfs_mount_target, what mount(2) is given. */
bool cairnfs_dir_is_fd(const char *dir);
int cairnfs_mountpoint_resolve(const char *dir, char *out, size_t len);
const char *cairnfs_mount_target(const struct cairnfs_options *o, const char *resolved);

/* daemon.c: forks the daemon. The parent waits for its verdict: false and
 * *code, the exit code (0 once the mount answers, else the failure's, its
 * message printed); also false and *code if the fork fails. The child
 * (true) has left the caller's session, and its failures go to the
 * waiting parent until cairnfs_report_ready. */
bool cairnfs_daemonize(int *code);
/* Tells the process waiting for the verdict that the mount answers, and
 * detaches from the caller's terminal (daemon.c). */
void cairnfs_report_ready(void);
/* Points stdin, stdout and stderr at /dev/null (a daemon once serving). */
void cairnfs_stdio_null(void);
/* In a child forked to run a server without exec: closes the fds an exec
 * would (FD_CLOEXEC) and forgets the verdict, which is the supervisor's
 * to give (daemon.c). */
void cairnfs_as_exec(void);

/* Runs the supervisor of one mount (supervisor.c): mounts, serves through
 * its server child until the kernel ends the session; returns the exit code. */
int cairnfs_supervise(const struct cairnfs_options *o);

/* The server's internal entry point, `cairnfs --serve ...` (conn.c), which
 * only the supervisor runs; returns the exit code: CAIRNFS_SERVER_ENDED
 * when the kernel ended the session, anything else is a failure that the
 * supervisor answers with a restart. */
#define CAIRNFS_SERVE_ARG "--serve"
#define CAIRNFS_SERVER_ENDED 0
int cairnfs_server_main(int argc, char **argv);

/* FUSE passthrough through libfuse 3.14 (passthrough.c, which says how).
 * Whether the kernel's INIT request offers it: */
bool cairnfs_passthrough_offered(const void *init, size_t len);
/* Maps the table of open inodes shared with later servers (a memfd). */
int cairnfs_passthrough_table(struct cairnfs *fs, int fd, size_t inodes);
/* conn.c: a request this thread read; the reply to INIT (first server
 * only); a reply about to be written, and whether it was delivered. */
struct iovec;
void cairnfs_passthrough_request(const void *buf, size_t len);
void cairnfs_passthrough_init_reply(struct iovec *iov, int count);
void cairnfs_passthrough_reply(struct cairnfs *fs, struct iovec *iov, int count);
void cairnfs_passthrough_replied(struct cairnfs *fs, const struct iovec *iov, bool delivered);
/* ops.c: an open of ino (blob_fd: its blob, or -1) that the reply this
 * thread sends next answers, true if that reply is a passthrough one
 * (which the kernel takes with no flag but direct_io and noflush); a
 * release of ino. */
bool cairnfs_passthrough_open(struct cairnfs *fs, uint64_t ino, int blob_fd);
void cairnfs_passthrough_release(struct cairnfs *fs, uint64_t ino);

/* The first fields of the kernel's request and reply headers, as
 * linux/fuse.h has them (it cannot be included next to libfuse's headers),
 * and the codes cairnfs needs that libfuse 3.14 does not name. */
struct cairnfs_in_header {
  uint32_t len, opcode;
  uint64_t unique;
};
struct cairnfs_out_header {
  uint32_t len;
  int32_t error; /* a notification's code when unique is 0 */
  uint64_t unique;
};
#define CAIRNFS_OP_INIT 26
#define CAIRNFS_NOTIFY_RESEND 7            /* kernel 6.9+: requeue every request being processed */
#define CAIRNFS_UNIQUE_RESEND (1ULL << 63) /* in the unique of a request so requeued */

/* The byte a server writes on its status pipe once the kernel has its
 * answer to INIT (the session serves). */
#define CAIRNFS_STATUS_READY 'R'
/* Then, each time cairn commit moved the mount onto its new image (once
 * that is recorded in the node table: rw_rebase.c), this byte, the
 * image's id (64 hex digits) and the number of the server's fd on the
 * fresh upper (10 decimal digits), in one write: the supervisor pins the
 * image and takes a copy of that fd (pidfd_getfd), so that the upper's
 * lock outlives the server. */
#define CAIRNFS_STATUS_MOVED 'M'
#define CAIRNFS_STATUS_MOVED_LEN (64 + 10)
void cairnfs_report_moved(const char *image, int upper_fd);
/* Before that, as soon as a move has made its fresh upper (and before any
 * other step of it), this byte and the upper's id (64 hex digits), in one
 * write: a server killed before the move's write to the node table leaves
 * that upper to nobody, and the supervisor drops it (the next server is
 * on the old upper, which holds every write). */
#define CAIRNFS_STATUS_MOVING 'm'
#define CAIRNFS_STATUS_MOVING_LEN 64
void cairnfs_report_moving(const char *upper);
/* daemon.c: the status pipe cairnfs_report_moved writes to (conn.c). */
void cairnfs_status_fd_set(int fd);

/* rw_freeze.c: cairn commit's freeze of a writable mount's changes.
 * start: the server's session (a writable mount's; a freeze a dead server
 * of the upper held goes on). conn.c's read calls
 * done as a thread comes back for its next request, and take with each
 * request read: true if it is held (copied; the thread reads on). */
void cairnfs_freeze_start(struct fuse_session *se, struct cairnfs *fs);
void cairnfs_freeze_stop(void); /* the session loop ended */
void cairnfs_freeze_done(void);
bool cairnfs_freeze_take(const void *buf, size_t n);

/* The session loop's worker threads: one is started when a request finds
 * none idle, up to this many, and all are kept. (libfuse ends idle threads
 * beyond its max_idle_threads: a burst of small reads then started and
 * ended hundreds of threads, each a clone, a /dev/fuse clone and a pipe.) */
#define CAIRNFS_THREADS 8

#endif
