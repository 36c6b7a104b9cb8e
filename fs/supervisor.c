/* SPDX-License-Identifier: Apache-2.0 */
/*
 * supervisor.c — the process a cairnfs mount belongs to: it holds what
 * must outlive a server (the mount, the session's /dev/fuse fd, the pins,
 * the mount record) and does nothing else but run the server as its child
 * and restart it, so that a crash, a kill -9 or an upgrade of the server
 * shows no error and drops no pin.
 *
 * Lifecycle, in order, each step undone on the way out whatever happened:
 * resolve DIR (cairn_mountpoint_resolve, as cairn umount does) → open the
 * store without its database (cairn_store_open_lazy) → pin:
 * - the fast way (read-only mounts): hold STORE/mounting.lock shared
 *   (cairn_mount_pending_begin), take the locks of the pins of the image
 *   STORE/refs names and of its layers (cairn_pin_image_early, which
 *   starts the disk reading the image's index and checks the image is
 *   still listed once its pin is held), all without a query to SQLite;
 * - else (a writable mount, an image the file does not list or without an
 *   index): resolve IMAGE through the database, start reading its index,
 *   pin the image and all its layers (cairn_pin_image: locks, then the
 *   annotations, purpose "mount DIR") and write STORE/refs if it is
 *   missing;
 * the pins are held by this process until it exits (the kernel drops
 * them if it dies) → check the image's index (built and
 * written the first time; the mapping is dropped again: only servers map
 * it) → take the upper layer (writable mounts) → mount → record the
 * mount (this pid, its device; the fast way: later) → read the kernel's
 * FUSE_INIT request from /dev/fuse and keep its bytes (a memfd) → run
 * servers; once the first answered INIT the verdict is given, and the
 * fast way then loads SQLite and writes the annotations and the record
 * (recorded()) and lets go of STORE/mounting.lock, for which the readers
 * of both wait (cn_mounts_settle) → … until a server exits
 * CAIRNFS_SERVER_ENDED and /dev/fuse says the session is over → let go
 * of the upper layer's lock and of the pins (no SQLite on the way: cairn
 * umount waits for these, not for our exit) → forget the record and the
 * annotations.
 *
 * Invariants:
 * - Only this process opened /dev/fuse, and it keeps the fd open until the
 *   session has ended: a server's death never closes the connection, and
 *   the requests it had read stay on this fd's processing queue (no
 *   cloned fds: the kernel aborts a clone's requests when it is closed),
 *   for the next server to have resent (conn.c).
 * - A server dies with its supervisor (PR_SET_PDEATHSIG): a kill -9 of the
 *   supervisor ends the session (the mount is stale, as it was before
 *   supervisors) rather than leave a server serving an unpinned image.
 * - At most one server runs. A server that dies is restarted: at once the
 *   first time, then after cairn_backoff_ms waits (20 ms doubling to 5 s)
 *   while each one dies before it has served RESET_MS (answered INIT and
 *   run 250 ms since its start), so a server that crashes at once every
 *   time (a bad binary, a request that kills every server) does not spin,
 *   while one killed now and then is replaced at once.
 * - Servers run the binary at the path this one was started from, so that
 *   SIGUSR1 (kill the server: an upgrade) runs the one installed there now;
 *   after two failures in a row every other attempt runs our own binary
 *   (kept open), so that an upgrade to a binary that cannot serve leaves
 *   the mount served by the old one.
 * - The verdict (main.c) is given once the first server has answered INIT;
 *   a first server that dies before that fails the mount.
 * - A writable mount's upper layer is made (or, resumed, opened) here
 *   before the mount, and its flock held until the session is over, so
 *   that no restart window lets gc reclaim it; servers get its fd and a
 *   memfd for their table of its objects (fs/nodetab.c). At the end it is
 *   dropped only if cairn umount (without --keep) marked it so, else kept.
 * - After cairn commit moved the mount onto its new image (rw_rebase.c;
 *   the node table names the fresh upper), a server's death makes this
 *   process take what that server held (moved_take): the fresh upper's
 *   lock, the new image's pins, the record; the next server serves the new
 *   image. A server killed before the move's one write to the table is
 *   followed by one on the old image and upper, which hold every write;
 *   the fresh upper it made (it said which first: moving) is dropped.
 * - SIGTERM, SIGINT and SIGHUP only detach the host's view (MNT_DETACH of
 *   DIR while DIR is our mount): the kernel ends the session when the last
 *   copy of the mount goes.
 */
#include "cairnfs.h"
#include "nodetab.h"
#include "report.h"
#include "self.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define BACKOFF_BASE_MS 20
#define BACKOFF_CAP_MS 5000
#define RESET_MS 250 /* a server that served this long earns an immediate restart */
/* The fast way records this long after the verdict: loading SQLite while
 * the mount answers its first requests slowed them (a first read 7 ms
 * later with caches dropped, README "Mount cost"); readers of the record
 * wait for it (pending). */
#define RECORD_DELAY_MS 30
/* As libfuse's: the kernel hands out no request into a buffer smaller
 * than its largest write could need. */
#define INIT_BUF_SIZE (257 * 4096)

struct supervisor {
  const struct cairnfs_options *o;
  char dir[PATH_MAX];
  char dev[32];
  struct stat under; /* dir before the mount covered it: recorded for --restore */
  cairn_id id;
  cairn_store *st;
  char *opts;   /* the session's mount options */
  int fuse_fd;  /* the session's /dev/fuse fd, owned by se */
  int init_fd;  /* memfd: the kernel's FUSE_INIT request */
  int table_fd; /* memfd: passthrough.c's table of open inodes */
  /* A writable mount's upper layer, held here across restarts: */
  cairn_id upper;      /* its id */
  int upper_fd;        /* its directory, flocked (gc sees it owned) */
  int nodes_fd;        /* memfd: nodetab.c's table of its objects */
  bool upper_fresh;    /* made here (not resumed) */
  cairn_id moved_from; /* the upper a move left, for moved_take to drop, or "" */
  cairn_id moving;     /* the fresh upper of the running server's last move, or "" */
  unsigned started;    /* servers started */
  char exe[PATH_MAX];  /* the binary servers are run from */
  int own_exe;         /* our own binary, kept open: the fallback */
  pid_t self;          /* getpid() */
  pid_t server;        /* 0 while none runs */
  int status_fd;       /* the running server's status pipe, -1 once read to EOF */
  bool ready;          /* a server answered INIT: the session is initialised */
  bool ready_now;      /* the running server answered INIT */
  unsigned attempt;    /* restarts since a server last ran RESET_MS */
  uint64_t started_ms; /* when the running server was started */
  uint64_t restart_at; /* when to start the next server, with none running */
  bool upgrading;      /* the running server was killed for an upgrade */
  cairn_pinset *pins;  /* the image's and its layers' */
  /* The fast way: pinned by STORE/refs (cairn_pin_image_early), without
   * SQLite; the annotations and the record are written once the mount
   * answered (recorded()), while pending (STORE/mounting.lock) makes
   * readers of both wait for them. */
  bool fast;
  int pending;        /* cairn_mount_pending_begin's fd, or -1 once recorded */
  bool recorded;      /* the record is written (forgotten at the end) */
  uint64_t record_at; /* the fast way: when to record (RECORD_DELAY_MS) */
  bool record_tried;  /* the fast way: recorded() ran */
};

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Pins image, the one the mount serves now (cairn commit moved it), and
 * lets the old image's pins go first (a release deletes the annotations
 * of its pins, those of the layers both images share too); records the
 * mount on it. */
static int moved_pin(struct supervisor *s, const char *image) {
  if (strcmp(image, s->id) == 0) return 0;
  char purpose[PATH_MAX + 8];
  snprintf(purpose, sizeof(purpose), "mount %s", s->dir);
  cairn_pinset *pins = cairn_pinset_new(purpose, true);
  if (!pins) return -ENOMEM;
  cairn_pinset_release(s->st, s->pins);
  s->pins = pins;
  snprintf(s->id, sizeof(s->id), "%s", image);
  int r = cairn_pin_image(s->st, s->pins, image);
  if (r == 0 && s->recorded)
    cairn_mount_record_at(s->st, s->dir, s->id, getpid(), s->dev, true, &s->under);
  cairn_store_idle(s->st);
  return r;
}

/* While the server that moved the mount runs: a copy of its fd on the
 * fresh upper (the same open file, so the same flock), which this process
 * then holds, as the upper the table names (moved_take finds it held). */
static void moved_hold(struct supervisor *s, int server_fd) {
  char to[65];
  if (s->nodes_fd < 0 || !cairnfs_nodetab_final(s->nodes_fd, to) || strcmp(to, s->upper) == 0)
    return;
  int pidfd = (int)syscall(SYS_pidfd_open, s->server, 0);
  int fd = pidfd >= 0 ? (int)syscall(SYS_pidfd_getfd, pidfd, server_fd, 0) : -1;
  if (pidfd >= 0) close(pidfd);
  struct stat a, b;
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/uppers/%s", cairn_store_dir(s->st), to);
  /* It must be that upper's directory (else moved_take opens it). */
  if (fd < 0 || fstat(fd, &a) < 0 || stat(path, &b) < 0 || a.st_ino != b.st_ino ||
      a.st_dev != b.st_dev) {
    if (fd >= 0) close(fd);
    return;
  }
  snprintf(s->moved_from, sizeof(s->moved_from), "%s", s->upper);
  close(s->upper_fd);
  s->upper_fd = fd;
  snprintf(s->upper, sizeof(s->upper), "%s", to);
  s->upper_fresh = false;
}

/* After a server's death: if cairn commit moved the mount onto its new
 * image since this process took its upper (the node table names another
 * upper, nodetab.c), this process takes over what the dead server held
 * (rw_rebase.c): the fresh upper's lock, the new image's pins (if the
 * server did not say it moved: moved_pin), and the record; the old upper,
 * whose changes the new image holds, is dropped (the dead server may have
 * died before it did). The next server serves the new image over that
 * upper. 1 if moved, 0 if not, or -errno (the mount cannot be served). */
static int moved_take(struct supervisor *s) {
  if (s->moved_from[0]) { /* moved_hold's: the server may have died before it dropped it */
    cairn_upper_drop(s->st, s->moved_from);
    s->moved_from[0] = '\0';
  }
  char to[65];
  if (s->nodes_fd < 0 || !cairnfs_nodetab_final(s->nodes_fd, to) || strcmp(to, s->upper) == 0)
    return 0;
  cairn_id image;
  char path[PATH_MAX];
  int fd = -1;
  int r = cairn_upper_open(s->st, to, image, path, sizeof(path), &fd);
  if (r == 0) r = moved_pin(s, image);
  if (r < 0) {
    if (fd >= 0) close(fd);
    cairn_store_idle(s->st);
    return r;
  }
  cairn_id old;
  snprintf(old, sizeof(old), "%s", s->upper);
  close(s->upper_fd);
  s->upper_fd = fd;
  snprintf(s->upper, sizeof(s->upper), "%s", to);
  s->upper_fresh = false;
  cairn_upper_drop(s->st, old);
  cairn_store_idle(s->st);
  return 1;
}

/* After a server's death: the fresh upper of a move it began (moving)
 * that the node table does not name (it died before the move's one
 * write, nodetab.c) is nobody's: the next server is on the old upper,
 * which holds every write (the fresh one holds at most copies), and the
 * kernel resends the commit's request to it. Dropped, so that no row
 * nobody owns is listed. One the table names is the mount's (moved_take). */
static void moving_drop(struct supervisor *s) {
  char to[65];
  if (!s->moving[0]) return;
  bool named =
      s->nodes_fd >= 0 && cairnfs_nodetab_final(s->nodes_fd, to) && strcmp(to, s->moving) == 0;
  if (!named && strcmp(s->moving, s->upper) != 0) {
    cairn_upper_drop(s->st, s->moving);
    cairn_store_idle(s->st);
  }
  s->moving[0] = '\0';
}

/* Signals reach the loop through a pipe (handlers do nothing else). */
static int signal_pipe[2] = {-1, -1};
static const int handled_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGUSR1};
#define N_SIGNALS (sizeof(handled_signals) / sizeof(handled_signals[0]))

static void on_signal(int sig) {
  int saved = errno;
  unsigned char c = (unsigned char)sig;
  if (write(signal_pipe[1], &c, 1) < 0) {
    /* The pipe is full: the loop has work pending already. */
  }
  errno = saved;
}

/* Installs the handlers, or restores the defaults (handler SIG_DFL). They
 * override an inherited SIG_IGN: a shell's background job ignores SIGINT,
 * yet the contract is that these signals unmount. */
static void signals_set(void (*handler)(int)) {
  struct sigaction sa = {.sa_handler = handler, .sa_flags = SA_RESTART};
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < N_SIGNALS; i++) sigaction(handled_signals[i], &sa, NULL);
}

/* Detaches the host's view, if DIR is still our mount. */
static void detach(const struct supervisor *s) {
  char dev[32];
  if (cairn_mountpoint_dev(s->dir, dev, sizeof(dev)) == 0 && strcmp(dev, s->dev) == 0)
    cairn_mountpoint_unmount(s->dir, true);
}

/* Reads the kernel's INIT request and keeps it in a memfd. */
static int init_keep(struct supervisor *s) {
  cairn_autofree char *buf = malloc(INIT_BUF_SIZE);
  if (!buf) return -ENOMEM;
  ssize_t n;
  do n = read(s->fuse_fd, buf, INIT_BUF_SIZE);
  while (n < 0 && (errno == EINTR || errno == ENOENT));
  if (n < 0) return -errno;
  struct cairnfs_in_header h;
  if ((size_t)n < sizeof(h)) return -EPROTO;
  memcpy(&h, buf, sizeof(h));
  if (h.opcode != CAIRNFS_OP_INIT) return -EPROTO;
  s->init_fd = memfd_create("cairnfs-init", MFD_CLOEXEC);
  if (s->init_fd < 0) return -errno;
  if (write(s->init_fd, buf, (size_t)n) != n) return errno ? -errno : -EIO;
  s->table_fd = memfd_create("cairnfs-open-inodes", MFD_CLOEXEC);
  if (s->table_fd < 0) return -errno;
  return 0;
}

/* The binary servers run: the path of our own (without " (deleted)"), so
 * that an upgrade that installs a new binary there is what the next
 * server runs. */
static void exe_find(struct supervisor *s) {
  self_exe(s->exe, sizeof(s->exe)); /* "" if it cannot tell */
  s->own_exe = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
}

/* Starts a server (see conn.c for its arguments). */
static int server_start(struct supervisor *s) {
  int sp[2];
  if (pipe2(sp, O_CLOEXEC) < 0) return -errno;
  char fds[6][16], flags[12] = "-", upper[80];
  /* A writable mount's upper layer: the one held here (made, or the kept
   * one resumed), else "-". */
  snprintf(upper, sizeof(upper), "%s", s->upper_fd >= 0 ? s->upper : "-");
  snprintf(fds[4], sizeof(fds[4]), "%d", s->upper_fd);
  snprintf(fds[5], sizeof(fds[5]), "%d", s->nodes_fd);
  snprintf(fds[0], sizeof(fds[0]), "%d", s->fuse_fd);
  snprintf(fds[1], sizeof(fds[1]), "%d", s->init_fd);
  snprintf(fds[2], sizeof(fds[2]), "%d", sp[1]);
  snprintf(fds[3], sizeof(fds[3]), "%d", s->table_fd);
  size_t nf = 1;
  if (s->ready) flags[nf++] = 'r'; /* resumed: swallow INIT's reply, resend */
  if (!s->o->foreground) flags[nf++] = 'q';
  if (s->o->debug) flags[nf++] = 'd';
  if (s->o->no_passthrough) flags[nf++] = 'p';
  if (s->o->writable) flags[nf++] = 'w';
  if (s->upper_fresh && s->started == 0) flags[nf++] = 'n';      /* sets up root/ */
  if (s->o->record_access && s->started == 0) flags[nf++] = 'a'; /* the first server records */
  flags[nf] = '\0';
  s->started++;
  fflush(NULL); /* a forked server exits through exit(): nothing buffered twice */
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(sp[0]);
    close(sp[1]);
    return -err;
  }
  if (pid == 0) {
    /* A server outlives no supervisor: the pins and the record are its. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != s->self) _exit(127);
    signals_set(SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int keep[] = {s->fuse_fd, s->init_fd, sp[1], s->table_fd, s->upper_fd, s->nodes_fd};
    for (size_t i = 0; i < 6; i++)
      if (keep[i] >= 0) fcntl(keep[i], F_SETFD, 0);
    char *store = (char *)cairn_store_dir(s->st);
    bool held = s->upper_fd >= 0;
    char *argv[] = {"cairnfs", CAIRNFS_SERVE_ARG,
                    fds[0],    fds[1],
                    fds[2],    flags,
                    store,     s->id,
                    s->dir,    s->dev,
                    s->opts,   fds[3],
                    upper,     held ? fds[4] : NULL,
                    fds[5],    NULL};
    /* The first server is this process, forked: it is the binary just
     * started, its libraries and the store's pages are loaded already
     * (a cold mount answers sooner), and the pages the two share stay
     * shared (a mount costs less memory). Later ones are exec'ed. */
    if (s->started == 1) {
      int argc = 0;
      while (argv[argc]) argc++;
      cairnfs_as_exec();
      exit(cairnfs_server_main(argc, argv));
    }
    /* Every other attempt after two failures runs our own binary: an
     * upgrade to a binary that cannot serve leaves the mount served. */
    bool own = s->attempt >= 2 && s->attempt % 2 == 0;
    if (s->exe[0] && !own) execv(s->exe, argv);
    if (s->own_exe >= 0) syscall(SYS_execveat, s->own_exe, "", argv, environ, AT_EMPTY_PATH);
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  close(sp[1]);
  s->server = pid;
  s->status_fd = sp[0];
  s->started_ms = now_ms();
  return 0;
}

/* True if the kernel has ended the session (/dev/fuse: POLLERR). */
static bool session_ended(const struct supervisor *s) {
  struct pollfd p = {.fd = s->fuse_fd, .events = POLLIN};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP));
}

/* After the server exited with status: 1 if serving is over, 0 if a
 * restart is scheduled, or the exit code of a first server's failure. */
static int server_exited(struct supervisor *s, int status) {
  bool served = s->ready_now;
  s->server = 0;
  s->ready_now = false;
  if (s->status_fd >= 0) {
    close(s->status_fd);
    s->status_fd = -1;
  }
  moving_drop(s);
  /* However the server ended: once /dev/fuse says the session is over
   * (an unmount, or its connection aborted: cairn umount --force), no
   * server could serve it. */
  if (session_ended(s)) return 1;
  /* A mount moved by cairn commit: the next server serves the new image.
   * If it cannot be taken over, the mount ends (stale until cairn
   * umount), and the fresh upper, the writes since the commit, is kept. */
  char moved_to[65];
  int moved = s->ready ? moved_take(s) : 0;
  if (moved < 0 && cairnfs_nodetab_final(s->nodes_fd, moved_to)) {
    int why = moved;
    if (cairn_upper_keep(s->st, moved_to) < 0)
      return report_fail(why,
                         "%s: the server of a writable mount moved by cairn commit died; it is "
                         "not restarted: %s (hint: cairn umount %s)",
                         s->o->dir, report_why(s->st, why), s->o->dir);
    return report_fail(why,
                       "%s: the server of a writable mount moved by cairn commit died; it is not "
                       "restarted: %s; its changes since the commit are kept (upper %.12s; hint: "
                       "cairn umount --keep %s, then cairn mount --rw --resume %s)",
                       s->o->dir, report_why(s->st, why), moved_to, s->o->dir, s->o->dir);
  }
  if (!s->ready) {
    if (WIFSIGNALED(status))
      return report_fail(-ESRCH, "%s: the server died of signal %d before serving", s->o->dir,
                         WTERMSIG(status));
    return report_fail(-EIO, "%s: the server exited with status %d before serving", s->o->dir,
                       WEXITSTATUS(status));
  }
  uint64_t now = now_ms();
  if (s->upgrading || (served && now - s->started_ms >= RESET_MS)) s->attempt = 0;
  uint64_t wait = 0;
  if (s->attempt > 0) {
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) < 0) rnd = now;
    wait = cairn_backoff_ms(s->attempt - 1, BACKOFF_BASE_MS, BACKOFF_CAP_MS, rnd);
  }
  if (s->attempt < UINT_MAX) s->attempt++;
  s->upgrading = false;
  s->restart_at = now + wait;
  return 0;
}

/* The fast way, once the mount answered and the verdict is given: what
 * the slow way does before it mounts, through SQLite: the pins' annotations (cairn_pin_image finds
 * the locks held and the image there) and the mount's record; then readers of both go on (pending).
 * A failure leaves the mount served and pinned but not listed, and is said on stderr (a foreground
 * cairnfs's). */
static void recorded(struct supervisor *s) {
  s->record_tried = true;
  int r = cairn_pin_image(s->st, s->pins, s->id);
  if (r == 0)
    r = cairn_mount_record_at(s->st, s->dir, s->id, getpid(), s->dev, s->o->writable, &s->under);
  if (r < 0)
    report_fail(r, "%s: cannot record the mount: %s", s->dir, report_why(s->st, r));
  else
    s->recorded = true;
  cairn_store_idle(s->st); /* asked again only when the mount ends */
  cairn_mount_pending_end(s->pending);
  s->pending = -1;
}

/* Reads the running server's status pipe. */
static void status_read(struct supervisor *s) {
  char c;
  ssize_t n = read(s->status_fd, &c, 1);
  if (n == 1 && c == CAIRNFS_STATUS_MOVED) {
    /* Written in one write (less than PIPE_BUF). */
    char msg[CAIRNFS_STATUS_MOVED_LEN + 1], image[65];
    ssize_t m;
    do m = read(s->status_fd, msg, CAIRNFS_STATUS_MOVED_LEN);
    while (m < 0 && errno == EINTR);
    if (m != CAIRNFS_STATUS_MOVED_LEN) return;
    msg[m] = '\0';
    snprintf(image, sizeof(image), "%.64s", msg);
    if (moved_pin(s, image) < 0)
      report_fail(-EIO, "%s: cannot pin %.12s, the image cairn commit moved the mount onto: %s",
                  s->dir, image, report_why(s->st, -EIO));
    moved_hold(s, atoi(msg + 64));
    return;
  }
  if (n == 1 && c == CAIRNFS_STATUS_MOVING) {
    char msg[CAIRNFS_STATUS_MOVING_LEN + 1];
    ssize_t m;
    do m = read(s->status_fd, msg, CAIRNFS_STATUS_MOVING_LEN);
    while (m < 0 && errno == EINTR);
    if (m != CAIRNFS_STATUS_MOVING_LEN) return;
    msg[m] = '\0';
    snprintf(s->moving, sizeof(s->moving), "%s", msg);
    return;
  }
  if (n == 1 && c == CAIRNFS_STATUS_READY) {
    bool first = !s->ready;
    s->ready = s->ready_now = true;
    if (first) cairnfs_report_ready();
    if (first) s->record_at = now_ms() + RECORD_DELAY_MS;
    return;
  }
  if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
    close(s->status_fd);
    s->status_fd = -1;
  }
}

/* Runs servers until serving is over: returns CAIRN_EXIT_OK, or the exit
 * code of a failure before the mount answered (reported). */
static int supervise_loop(struct supervisor *s) {
  for (;;) {
    uint64_t now = now_ms();
    if (!s->server && now >= s->restart_at) {
      int r = server_start(s);
      if (r < 0 && !s->ready)
        return report_fail(r, "%s: cannot start the server: %s", s->o->dir, strerror(-r));
      if (r < 0) s->restart_at = now + BACKOFF_CAP_MS;
    }
    struct pollfd p[2] = {{.fd = signal_pipe[0], .events = POLLIN},
                          {.fd = s->status_fd, .events = POLLIN}};
    int timeout = -1;
    if (!s->server) timeout = s->restart_at > now ? (int)(s->restart_at - now) : 0;
    bool to_record = s->fast && s->ready && !s->record_tried;
    if (to_record && now >= s->record_at) {
      recorded(s);
      to_record = false;
    }
    if (to_record && (timeout < 0 || s->record_at - now < (uint64_t)timeout))
      timeout = (int)(s->record_at - now);
    if (poll(p, s->status_fd >= 0 ? 2 : 1, timeout) < 0 && errno != EINTR)
      return report_fail(-errno, "%s: poll: %s", s->o->dir, strerror(errno));
    if (s->status_fd >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) status_read(s);
    if (!(p[0].revents & POLLIN)) continue;
    unsigned char sigs[32];
    ssize_t n = read(signal_pipe[0], sigs, sizeof(sigs));
    for (ssize_t i = 0; i < n; i++) {
      if (sigs[i] == SIGUSR1 && s->server && s->ready) {
        s->upgrading = true;
        kill(s->server, SIGKILL);
      } else if (sigs[i] == SIGTERM || sigs[i] == SIGINT || sigs[i] == SIGHUP) {
        detach(s);
      }
    }
    int status;
    pid_t pid;
    while (s->server && (pid = waitpid(s->server, &status, WNOHANG)) == s->server) {
      /* Its last words (the ready byte) first. */
      while (s->status_fd >= 0) status_read(s);
      int r = server_exited(s, status);
      if (r == 1) return CAIRN_EXIT_OK;
      if (r != 0) return r;
    }
  }
}

static void upper_release(struct supervisor *s);

/* Mounts, records, keeps INIT, supervises; undoes it all on the way out. */
static int mount_and_supervise(struct supervisor *s) {
  int code = 0;
  s->opts = cairnfs_fuse_opts(s->o);
  if (!s->opts) return report_fail(-ENOMEM, "%s: out of memory", s->o->image);
  char *fargv[] = {"cairnfs", "-o", s->opts, NULL};
  struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
  struct fuse_session *se = fuse_session_new(&args, &cairnfs_ops, sizeof(cairnfs_ops), NULL);
  if (!se) {
    code = report_fail(-EINVAL, "%s: bad mount options: %s", s->dir, s->opts);
    goto out;
  }
  if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0 || fcntl(signal_pipe[0], F_SETFL, 0) < 0) {
    code = report_fail(-errno, "%s: pipe: %s", s->dir, strerror(errno));
    goto destroy;
  }
  signal(SIGPIPE, SIG_IGN);
  signals_set(on_signal);
  if (fuse_session_mount(se, cairnfs_mount_target(s->o, s->dir)) < 0) {
    code = report_fail(-EIO, "%s: cannot mount (see the message above)", s->dir);
    goto signals;
  }
  s->fuse_fd = fuse_session_fd(se);
  int r = cairn_mountpoint_dev(s->dir, s->dev, sizeof(s->dev));
  if (r < 0) {
    code = report_fail(r, "%s: the new mount is not in /proc/self/mountinfo", s->dir);
    goto unmount;
  }
  /* The fast way records after the verdict (recorded()). */
  r = s->fast ? 0
              : cairn_mount_record_at(s->st, s->dir, s->id, getpid(), s->dev, s->o->writable,
                                      &s->under);
  if (r < 0) {
    code = report_fail(r, "%s: cannot record the mount: %s", s->dir, report_why(s->st, r));
    goto unmount;
  }
  s->recorded = !s->fast;
  r = init_keep(s);
  if (r < 0) {
    code = report_fail(r, "%s: cannot read the kernel's INIT: %s", s->dir, strerror(-r));
    goto forget;
  }
  exe_find(s);
  s->self = getpid();
  cairn_store_idle(s->st); /* asked again only when the mount ends */
  code = supervise_loop(s);
  if (s->server) { /* a failure of ours: the mount goes, so does its server */
    kill(s->server, SIGKILL);
    waitpid(s->server, NULL, 0);
  }
  if (s->status_fd >= 0) close(s->status_fd);
  /* What others wait for goes first, before any bookkeeping (the record
   * and the annotations wait for SQLite's write lock, which a gc or an
   * import may hold for seconds): the upper's lock, then the pins. */
  upper_release(s);
  cairn_pinset_release(s->st, s->pins);
  s->pins = NULL;
forget:
  if (s->recorded) cairn_mount_forget(s->st, s->dir, getpid());
unmount:
  /* Does nothing once the kernel has ended the session (the normal end). */
  fuse_session_unmount(se);
signals:
  signals_set(SIG_IGN);
  close(signal_pipe[0]);
  close(signal_pipe[1]);
destroy:
  if (s->init_fd >= 0) close(s->init_fd);
  if (s->own_exe >= 0) close(s->own_exe);
  if (s->table_fd >= 0) close(s->table_fd);
  fuse_session_destroy(se);
out:
  fuse_opt_free_args(&args);
  free(s->opts);
  return code;
}

/* Makes a writable mount's upper layer, or opens the kept one to resume,
 * and holds its lock until upper_release: across every restart, gc sees
 * it owned by a live mount. */
static int upper_take(struct supervisor *s) {
  char path[PATH_MAX];
  int r;
  if (s->o->upper) {
    cairn_id image;
    snprintf(s->upper, sizeof(s->upper), "%.64s", s->o->upper);
    r = cairn_upper_open(s->st, s->o->upper, image, path, sizeof(path), &s->upper_fd);
    if (r == 0 && strcmp(image, s->id) != 0)
      r = cairn_fail(s->st, -EINVAL, "upper %.12s is of image %.12s", s->o->upper, image);
  } else {
    r = cairn_upper_create(s->st, s->id, s->dir, s->upper, path, sizeof(path), &s->upper_fd);
    s->upper_fresh = r == 0;
  }
  if (r == 0 && (s->nodes_fd = memfd_create("cairnfs-upper-nodes", MFD_CLOEXEC)) < 0)
    r = cairn_fail(s->st, -errno, "memfd: %s", strerror(errno));
  return r;
}

/* Once serving is over: a served upper goes (cairn umount, or gc, removes
 * its files) only if cairn umount marked it to drop, else it is kept (as
 * by cairn umount --keep): a session ended by umount(8), fusermount3 -u or
 * a container's namespace drops no work. A fresh upper never served (a
 * failed mount) goes; a resumed one never served stays. Then its lock. */
static void upper_release(struct supervisor *s) {
  if (s->upper_fd >= 0) {
    if (s->ready)
      cairn_upper_session_end(s->st, s->upper, s->upper_fd);
    else if (s->upper_fresh)
      cairn_upper_discard(s->st, s->upper);
    close(s->upper_fd);
    s->upper_fd = -1;
  }
  if (s->nodes_fd >= 0) close(s->nodes_fd);
  s->nodes_fd = -1;
}

int cairnfs_supervise(const struct cairnfs_options *o) {
  struct supervisor s = {.o = o,
                         .fuse_fd = -1,
                         .init_fd = -1,
                         .table_fd = -1,
                         .status_fd = -1,
                         .own_exe = -1,
                         .upper_fd = -1,
                         .nodes_fd = -1,
                         .pending = -1};
  int code;
  int r = cairnfs_mountpoint_resolve(o->dir, s.dir, sizeof(s.dir));
  if (r < 0) return report_fail(r, "%s: %s", o->dir, strerror(-r));
  int state = cairn_mountpoint_state(s.dir);
  if (state == CAIRN_MP_LIVE || state == CAIRN_MP_STALE)
    return report_fail(-EBUSY, "%s: already a %s cairnfs mount (hint: cairn umount %s)", o->dir,
                       state == CAIRN_MP_LIVE ? "live" : "stale", o->dir);
  /* The directory mounted on (through the fd cairn mount passes, if it
   * does), as its record keeps it. */
  struct stat sb;
  if (stat(cairnfs_mount_target(o, s.dir), &sb) < 0)
    return report_fail(-errno, "%s: %s", o->dir, strerror(errno));
  if (!S_ISDIR(sb.st_mode)) return report_fail(-ENOTDIR, "%s: not a directory", o->dir);
  s.under = sb;

  /* Without the database: it is opened by the first call that needs it.
   * As root, a store another user owns only if asked (--trust-store), as
   * cairn does. */
  unsigned how = CAIRN_STORE_CREATE | (o->trust_store ? 0 : CAIRN_STORE_OWN);
  r = cairn_store_open_lazy_flags(o->store, how, &s.st);
  if (r < 0) {
    code = report_fail(r, "store: %s", report_why(s.st, r));
    goto out;
  }
  char purpose[PATH_MAX + 8];
  snprintf(purpose, sizeof(purpose), "mount %s", s.dir);
  if (!(s.pins = cairn_pinset_new(purpose, true))) {
    code = report_fail(-ENOMEM, "%s: out of memory", o->image);
    goto out;
  }
  /* The fast way (read-only mounts of images STORE/refs lists, with an
   * index): pinned by the file, recorded after the verdict. */
  if (!o->writable) {
    s.pending = cairn_mount_pending_begin(s.st);
    s.fast = cairn_pin_image_early(s.st, s.pins, o->image, s.id) == 1;
  }
  if (!s.fast) {
    cairn_mount_pending_end(s.pending);
    s.pending = -1;
    cairn_pinset_release(s.st, s.pins); /* whatever the fast way took */
    s.pins = NULL;
    /* The database now (and its failure said as the store's), with what
     * cairn_store_open recovers. */
    cairn_store_close(s.st);
    r = cairn_store_open_flags(o->store, how, &s.st);
    if (r < 0) {
      code = report_fail(r, "store: %s", report_why(s.st, r));
      goto out;
    }
    if (!(s.pins = cairn_pinset_new(purpose, true))) {
      code = report_fail(-ENOMEM, "%s: out of memory", o->image);
      goto out;
    }
    r = cairn_image_resolve(s.st, o->image, s.id);
    if (r < 0) {
      code = report_fail(r, "%s: %s", o->image, report_why(s.st, r));
      goto out;
    }
    cairn_tree_prefetch(s.st, s.id);
    cairn_refs_repair(s.st); /* the next mount goes the fast way */
    r = cairn_pin_image(s.st, s.pins, s.id);
    if (r < 0) {
      code = report_fail(r, "%s: cannot pin: %s", o->image, report_why(s.st, r));
      goto out;
    }
  }
  /* Builds the index the first time, and checks it: its failures are the
   * mount's, said here; the servers map it again. */
  cairn_tree *tree = NULL;
  r = cairn_tree_open(s.st, s.id, &tree);
  cairn_tree_free(tree);
  if (r < 0) {
    code = report_fail(r, "%s: %s", o->image, report_why(s.st, r));
    goto out;
  }
  if (o->writable && (r = upper_take(&s)) < 0) {
    code = report_fail(r, "%s: upper layer: %s", o->image, report_why(s.st, r));
    goto out;
  }
  code = mount_and_supervise(&s);
out:
  upper_release(&s);
  cairn_mount_pending_end(s.pending);
  if (s.pins) cairn_pinset_release(s.st, s.pins);
  if (s.st) cairn_store_close(s.st);
  return code;
}
