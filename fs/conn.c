/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn.c — the server: serves a FUSE session it did not open, on the
 * /dev/fuse fd its supervisor (supervisor.c) holds, and so can die and be
 * replaced without the kernel noticing more than a pause.
 *
 *   cairnfs --serve FUSE_FD INIT_FD STATUS_FD FLAGS STORE IMAGE_ID DIR DEV OPTS [TABLE_FD [UPPER]]
 *
 * is run by the supervisor only. FLAGS: '-' followed by 'r' (resumed: the
 * session was initialised by an earlier server), 'q' (quiet: stdio to
 * /dev/null once serving), 'd' (libfuse debug output), 'p' (no FUSE
 * passthrough), 'w' (writable: an upper layer, made here, or UPPER, the
 * id of a kept one to resume; "-" for none). TABLE_FD: the memfd of passthrough.c's table of open
 * inodes, which the supervisor keeps for every server (a supervisor of an
 * older cairn passes none: no passthrough).
 *
 * libfuse 3.14 has no takeover API and answers every request with EIO
 * until it has seen FUSE_INIT, so the session is given custom I/O
 * (fuse_session_custom_io): its first read returns the INIT request the
 * supervisor kept (INIT_FD), and the reply to it reaches the kernel on the
 * first start only. A resumed server swallows that reply (the kernel has
 * had one; the session is negotiated the same way, from the same request),
 * then sends FUSE_NOTIFY_RESEND (kernel 6.9+): every request the dead
 * server had read and not answered is queued again, from the processing
 * queue of the fd the supervisor kept open. Reads of an immutable image
 * are idempotent, so a request served twice is harmless (the second reply
 * finds no request: ENOENT, which libfuse ignores). On an older kernel the
 * notification fails (EINVAL, ignored) and a reader whose request the dead
 * server held waits for it forever (interruptible by a fatal signal only),
 * while every later request is served.
 *
 * Invariants: the session reads only FUSE_FD (no clone_fd: a clone's
 * requests are aborted when the clone is closed, i.e. when a server dies);
 * several threads read it, and each handles the request it read
 * (cairnfs_resent: whether the kernel resent it, FUSE_UNIQUE_RESEND in
 * its unique). A read-only mount's inode numbers are the index's
 * (deterministic) and no file handle carries state (ops.c: fi->fh is
 * unused), so what the kernel holds means the same to every server; a
 * writable mount's are made so by rw_restart.c.
 *
 * A writable mount's server (FLAGS 'w') is given by its supervisor, which
 * holds them, the upper's id as UPPER, its directory (flocked) as
 * UPPER_FD, the memfd of nodetab.c's table as NODES_FD, and 'n' in FLAGS
 * when the upper is fresh (the first server sets up its root):
 *   ... TABLE_FD UPPER UPPER_FD NODES_FD
 * A server run by an older supervisor (no UPPER_FD) makes or opens the
 * upper itself, as before.
 */
#include "cairnfs.h"
#include "report.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* One session per process: the custom I/O's state. */
static struct {
  int fuse_fd, status_fd;
  char *init;      /* the kept INIT request */
  size_t init_len; /* its size */
  uint64_t init_unique;
  bool resumed, quiet;
  int init_given;    /* atomic: the first read has returned INIT */
  bool init_replied; /* under lock: the reply to INIT was handled */
  pthread_mutex_t lock;
  pthread_cond_t replied;
} conn = {.fuse_fd = -1,
          .status_fd = -1,
          .lock = PTHREAD_MUTEX_INITIALIZER,
          .replied = PTHREAD_COND_INITIALIZER};

/* The first read returns the kept INIT. The others wait until INIT is
 * answered: libfuse starts a second thread while the first handles INIT,
 * and would answer EIO to a request read before INIT was handled (on a
 * restart, requests are waiting in the kernel's queue). */
static ssize_t conn_read(int fd, void *buf, size_t len, void *userdata) {
  (void)userdata;
  if (!__atomic_exchange_n(&conn.init_given, 1, __ATOMIC_ACQ_REL)) {
    if (len < conn.init_len) {
      errno = EINVAL;
      return -1;
    }
    memcpy(buf, conn.init, conn.init_len);
    cairnfs_passthrough_request(buf, conn.init_len);
    return (ssize_t)conn.init_len;
  }
  cairnfs_freeze_done(); /* this thread's last request is answered */
  pthread_mutex_lock(&conn.lock);
  while (!conn.init_replied) pthread_cond_wait(&conn.replied, &conn.lock);
  pthread_mutex_unlock(&conn.lock);
  ssize_t n;
  do n = read(fd, buf, len);
  while (n > 0 && cairnfs_freeze_take(buf, (size_t)n)); /* held: read on */
  if (n > 0) cairnfs_passthrough_request(buf, (size_t)n);
  struct cairnfs_in_header h = {0};
  if (n >= (ssize_t)sizeof(h)) memcpy(&h, buf, sizeof(h));
  cairnfs_resent = (h.unique & CAIRNFS_UNIQUE_RESEND) != 0;

  return n;
}

static bool init_replied(void) {
  pthread_mutex_lock(&conn.lock);
  bool r = conn.init_replied;
  pthread_mutex_unlock(&conn.lock);
  return r;
}

/* Tells the supervisor the session serves; quiets stdio unless -f. */
static void say_ready(void) {
  char c = CAIRNFS_STATUS_READY;
  if (write(conn.status_fd, &c, 1) < 0) {
    /* The supervisor is gone: the session goes with it. */
  }
  /* Kept open: cairnfs_report_moved (daemon.c). */
  if (!conn.quiet) return;
  cairnfs_stdio_null();
}

/* Asks the kernel to queue again what the dead server had read. */
static void resend(int fd) {
  struct cairnfs_out_header h = {.len = sizeof(h), .error = CAIRNFS_NOTIFY_RESEND, .unique = 0};
  if (write(fd, &h, sizeof(h)) < 0) {
    /* EINVAL before kernel 6.9: see the top of the file. */
  }
}

static ssize_t conn_writev(int fd, struct iovec *iov, int count, void *userdata) {
  struct cairnfs *fs = userdata;
  struct cairnfs_out_header h = {0};
  if (count > 0 && iov[0].iov_len >= sizeof(h)) memcpy(&h, iov[0].iov_base, sizeof(h));
  if (h.unique != conn.init_unique || init_replied()) {
    cairnfs_passthrough_reply(fs, iov, count);
    ssize_t n = writev(fd, iov, count);
    cairnfs_passthrough_replied(fs, iov, n >= 0);
    return n;
  }
  ssize_t total = 0;
  for (int i = 0; i < count; i++) total += (ssize_t)iov[i].iov_len;
  ssize_t n = total;
  bool again = conn.resumed;
  if (!conn.resumed) {
    if (fs->passthrough) cairnfs_passthrough_init_reply(iov, count);
    n = writev(fd, iov, count);
    /* ENOENT: an earlier server answered it and died before saying so. */
    if (n < 0 && errno == ENOENT) again = true, n = total;
    /* The kernel has applied the reply (the writev did): a read-only
     * mount's readahead can be raised before anything is opened. */
    if (n >= 0 && !fs->rw) cairnfs_readahead_raise(fs);
  }
  if (n >= 0 && again) resend(fd);
  if (n >= 0) say_ready();
  /* Even after a failure (ENODEV: the session is over), so that the
   * waiting reads go on and see it. */
  pthread_mutex_lock(&conn.lock);
  conn.init_replied = true;
  pthread_cond_broadcast(&conn.replied);
  pthread_mutex_unlock(&conn.lock);
  return n;
}

static ssize_t conn_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                                unsigned int flags, void *userdata) {
  (void)userdata;
  return splice(fdin, offin, fdout, offout, len, flags);
}

static const struct fuse_custom_io conn_io = {
    .read = conn_read,
    .writev = conn_writev,
    .splice_send = conn_splice_send,
};

/* Reads the kept INIT request from fd. */
static int init_load(int fd) {
  struct stat sb;
  if (fstat(fd, &sb) < 0) return -errno;
  struct cairnfs_in_header h;
  if ((size_t)sb.st_size < sizeof(h) || sb.st_size > 65536) return -EPROTO;
  conn.init_len = (size_t)sb.st_size;
  conn.init = malloc(conn.init_len);
  if (!conn.init) return -ENOMEM;
  if (pread(fd, conn.init, conn.init_len, 0) != (ssize_t)conn.init_len) return -EIO;
  memcpy(&h, conn.init, sizeof(h));
  conn.init_unique = h.unique;
  return 0;
}

static int parse_fd(const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  return *s && !*end && v >= 0 && v < 65536 ? (int)v : -1;
}

int cairnfs_server_main(int argc, char **argv) {
  if (argc < 11 || argc > 15)
    return report_usage("cairnfs --serve ... (run by cairnfs only)", "bad arguments");
  conn.fuse_fd = parse_fd(argv[2]);
  int init_fd = parse_fd(argv[3]);
  conn.status_fd = parse_fd(argv[4]);
  cairnfs_status_fd_set(conn.status_fd);
  const char *flags = argv[5], *store = argv[6], *image_id = argv[7], *dir = argv[8];
  const char *dev = argv[9], *opts = argv[10];
  int table_fd = argc > 11 ? parse_fd(argv[11]) : -1; /* none from an older supervisor */
  const char *upper = argc > 12 && strcmp(argv[12], "-") != 0 ? argv[12] : NULL;
  /* A supervisor that holds the upper passes its lock and node table. */
  struct cairnfs_rw_held held = {.upper = upper,
                                 .lock_fd = argc > 14 ? parse_fd(argv[13]) : -1,
                                 .nodes_fd = argc > 14 ? parse_fd(argv[14]) : -1,
                                 .fresh = strchr(flags, 'n') != NULL};
  if (conn.fuse_fd < 0 || init_fd < 0 || conn.status_fd < 0 || (argc > 11 && table_fd < 0) ||
      (argc > 14 && (held.lock_fd < 0 || held.nodes_fd < 0 || !upper)))
    return report_usage("cairnfs --serve ... (run by cairnfs only)", "bad file descriptors");
  conn.resumed = strchr(flags, 'r') != NULL;
  conn.quiet = strchr(flags, 'q') != NULL;
  bool debug = strchr(flags, 'd') != NULL;
  fcntl(conn.fuse_fd, F_SETFD, FD_CLOEXEC);
  fcntl(conn.status_fd, F_SETFD, FD_CLOEXEC);
  int r = init_load(init_fd);
  close(init_fd);
  if (r < 0) return report_fail(r, "%s: cannot read the kept INIT: %s", dir, strerror(-r));

  /* Only the supervisor answers these (main.c); a terminal's ^C reaches
   * the whole process group. */
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);

  struct cairnfs fs = {.debug_fetch = debug};
  snprintf(fs.dev, sizeof(fs.dev), "%s", dev);
  int code = CAIRNFS_SERVER_ENDED;
  r = cairn_store_open_lazy(store, &fs.st);
  if (r < 0) {
    code = report_fail(r, "store: %s", report_why(fs.st, r));
    goto out;
  }
  r = cairn_tree_open(fs.st, image_id, &fs.tree);
  if (r < 0) {
    code = report_fail(r, "%s: %s", image_id, report_why(fs.st, r));
    goto out;
  }
  if (strchr(flags, 'w') && (r = cairnfs_rw_setup(&fs, image_id, dir, &held)) < 0) {
    code = report_fail(r, "%s: upper layer: %s", image_id, report_why(fs.st, r));
    goto out;
  }
  if (strchr(flags, 'a') && (r = cairnfs_access_start(&fs)) < 0) {
    code = report_fail(r, "%s: %s", dir, strerror(-r));
    goto out;
  }
  fs.fuse_fd = conn.fuse_fd;
  /* A writable mount's files are served by the rw_*.c operations. */
  fs.passthrough = !fs.rw && !strchr(flags, 'p') && table_fd >= 0 &&
                   cairnfs_passthrough_offered(conn.init, conn.init_len) &&
                   cairnfs_passthrough_table(&fs, table_fd, cairn_tree_count(fs.tree)) == 0;
  if (table_fd >= 0) close(table_fd); /* the mapping stays */
  /* A read-only server asks the database nothing more (blobs are opened
   * by name); a writable one commits through its own connection. */
  if (!fs.rw) cairn_store_idle(fs.st);
  if (held.lock_fd >= 0) close(held.lock_fd); /* rw_setup.c keeps its own copies */
  if (held.nodes_fd >= 0) close(held.nodes_fd);
  char *fargv[] = {"cairnfs", "-o", (char *)opts, debug ? "-d" : NULL, NULL};
  struct fuse_args args = FUSE_ARGS_INIT(debug ? 4 : 3, fargv);
  struct fuse_session *se =
      fuse_session_new(&args, fs.rw ? &cairnfs_rw_ops : &cairnfs_ops, sizeof(cairnfs_ops), &fs);
  fuse_opt_free_args(&args);
  if (!se) {
    code = report_fail(-EINVAL, "%s: bad mount options: %s", dir, opts);
    goto out;
  }
  if (fs.rw) cairnfs_freeze_start(se, &fs);
  r = fuse_session_custom_io(se, &conn_io, conn.fuse_fd);
  if (r < 0) {
    code = report_fail(r, "%s: custom io: %s", dir, strerror(-r));
    fuse_session_destroy(se);
    goto out;
  }
  struct fuse_loop_config *cfg = fuse_loop_cfg_create();
  if (cfg) {
    fuse_loop_cfg_set_clone_fd(cfg, 0); /* see the top of the file */
    fuse_loop_cfg_set_max_threads(cfg, CAIRNFS_THREADS);
    fuse_loop_cfg_set_idle_threads(cfg, CAIRNFS_THREADS);
    r = fuse_session_loop_mt(se, cfg);
    fuse_loop_cfg_destroy(cfg);
  } else {
    r = fuse_session_loop(se);
  }
  if (r != 0) code = report_fail(r < 0 ? r : -EINTR, "%s: the session loop failed", dir);
  cairnfs_fetch_stop();
  if (fs.rw) cairnfs_freeze_stop();
  if (fs.access && (r = cairnfs_access_save(&fs, image_id)) < 0)
    report_fail(r, "%s: the access list: %s", image_id, report_why(fs.st, r));
  fuse_session_destroy(se); /* closes fuse_fd: ours only, the supervisor keeps its own */
out:
  cairnfs_access_free(&fs);
  cairnfs_rw_free(&fs);
  cairn_tree_free(fs.tree);
  if (fs.st) cairn_store_close(fs.st);
  free(conn.init);
  return code;
}
