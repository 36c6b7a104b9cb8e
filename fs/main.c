/*
 * main.c — cairnfs: serve one image of a cairn store as a read-only FUSE
 * mount.
 *
 *   cairnfs [-f] [-d] [-o OPT[,OPT...]] [--store DIR] IMAGE DIR
 *
 * Also runs as `mount -t fuse.cairnfs IMAGE DIR` (mount.fuse3 calls
 * `cairnfs IMAGE DIR -o OPTS`; the store may come as -o store=DIR).
 *
 * Lifecycle, in order, each step undone on the way out whatever happened:
 * fork (unless -f: the parent only waits for the daemon's verdict, so it
 * exits 0 once the mount is up, or prints the daemon's error and exits with
 * its code) → resolve DIR (cairn_mountpoint_resolve, as cairn umount does)
 * → open the store → resolve IMAGE → pin the image and all its layers
 * (purpose "mount DIR", held until exit; the kernel drops them if we die)
 * → map the image's index (the merged tree; built and written the first
 * time) → mount → record the mount (with its device) →
 * serve until the kernel ends the session → forget the record → release
 * the pins.
 *
 * The session outlives our mountpoint: a container runtime copies the
 * mount into each container's mount namespace, and those copies go on
 * reading from us after the host's view is unmounted. So the kernel alone
 * says when serving ends (/dev/fuse answers ENODEV once the last mount of
 * the session is gone), and SIGTERM/SIGINT/SIGHUP only detach the host's
 * view (umount2 MNT_DETACH of DIR, if DIR is still our mount): with nobody
 * else using the mount that ends the session at once, otherwise we serve
 * the others until they let go.
 *
 * Mounts are nosuid,nodev unless -o suid / -o dev asks otherwise: an
 * image's setuid binaries and device nodes are for containers that need
 * them, not for every local user. (Under mount(8), mount.fuse3 passes
 * mount(8)'s own flags: suid,dev unless nosuid / nodev are given.)
 */
#include "cairnfs.h"
#include "report.h"
#include "version.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct options {
  const char *image;
  const char *dir;
  char *store;
  bool foreground, debug;
  bool suid, dev;  /* -o suid / -o dev: honour setuid bits / device nodes */
  bool writable;   /* -o writable: a private upper layer (upper.c) */
  char *upper;     /* -o upper=ID: the kept upper to resume (implies writable) */
  char *fuse_opts; /* options passed on to libfuse, comma-separated */
};

/* Where the verdict goes: the waiting parent's pipe, or stderr with -f. */
static int verdict_fd = -1;

const char *report_prog = "cairnfs";

#define USAGE                                                                                      \
  "cairnfs [-f] [-d] [-o OPT[,OPT...]] [--store DIR] IMAGE DIR\n"                                  \
  "  -f            stay in the foreground\n"                                                       \
  "  -d            debug output (implies -f)\n"                                                    \
  "  -o store=DIR  the cairn store (also --store DIR); default $CAIRN_STORE, else\n"               \
  "                cairn.conf's store, else /var/lib/cairn for root, else\n"                       \
  "                ${XDG_DATA_HOME:-~/.local/share}/cairn\n"                                       \
  "  -o suid       honour the image's setuid/setgid bits (default nosuid)\n"                       \
  "  -o dev        honour the image's device nodes (default nodev)\n"                              \
  "  -o OPT        other options are passed to libfuse/mount\n"                                    \
  "  -h, --help    show this help and exit\n"                                                      \
  "  -V, --version print the version and exit (also: cairnfs version)\n"                           \
  "  -o writable   a writable mount: changes go to a private upper layer in\n"                     \
  "                the store (cairn mount --rw); the image is never changed\n"                     \
  "  -o upper=ID   writable, on the kept upper layer ID (cairn mount --resume)\n"                  \
  "The mount is read-only unless -o writable; -o rw and -o ro are accepted\n"                      \
  "and ignored (mount(8) passes rw to every helper)."

/* The sink of the daemon's failure (report.h): the parent waiting for the
 * verdict gets its exit code (one byte) and its message, then EOF. Once the
 * verdict is given (or the parent is gone) failures go to stderr. */
static int verdict_send(int code, const char *msg) {
  if (verdict_fd < 0) return -1;
  unsigned char c = (unsigned char)code;
  size_t len = strlen(msg);
  if (write(verdict_fd, &c, 1) != 1 || write(verdict_fd, msg, len) != (ssize_t)len) return -1;
  close(verdict_fd);
  verdict_fd = -1;
  return 0;
}

static void report_ready(void) {
  if (verdict_fd < 0) return;
  unsigned char c = CAIRN_EXIT_OK;
  if (write(verdict_fd, &c, 1) < 0) {
    /* The parent is gone; nobody is waiting for the verdict. */
  }
  close(verdict_fd);
  verdict_fd = -1;
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    close(null);
  }
  if (chdir("/") < 0) {
    /* Not fatal: only keeps the daemon off the caller's cwd. */
  }
}

/* Parent side of daemonizing: waits for the daemon's verdict. */
static int await_daemon(int fd, pid_t pid) {
  unsigned char code = CAIRN_EXIT_FAILURE;
  char msg[2048];
  ssize_t n = read(fd, &code, 1);
  size_t len = 0;
  while (n == 1 && len < sizeof(msg) - 1) {
    ssize_t m = read(fd, msg + len, sizeof(msg) - 1 - len);
    if (m <= 0) break;
    len += (size_t)m;
  }
  msg[len] = '\0';
  if (n == 1 && code == CAIRN_EXIT_OK) return CAIRN_EXIT_OK;
  if (n == 1) {
    report_notice(msg);
    return code;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return report_fail(-ESRCH, "the daemon died before mounting (%s %d)",
                     WIFSIGNALED(status) ? "signal" : "status",
                     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

static int append_opt(char **opts, const char *opt, size_t len) {
  size_t old = *opts ? strlen(*opts) : 0;
  char *p = realloc(*opts, old + len + 2);
  if (!p) return -ENOMEM;
  if (old) p[old++] = ',';
  memcpy(p + old, opt, len);
  p[old + len] = '\0';
  *opts = p;
  return 0;
}

/* Splits one -o argument: store=, ro, rw, [no]suid and [no]dev are ours;
 * the rest is libfuse's.
 * The mount is always read-only for now: mount(8) passes "rw" to every
 * helper unless told "ro", so "rw" cannot mean "writable upper layer" here
 * and is ignored. */
static int take_mount_opts(struct options *o, const char *arg) {
  while (*arg) {
    size_t len = strcspn(arg, ",");
    bool rw_or_ro = len == 2 && (strncmp(arg, "rw", 2) == 0 || strncmp(arg, "ro", 2) == 0);
    bool no = len > 2 && strncmp(arg, "no", 2) == 0;
    const char *flag = no ? arg + 2 : arg;
    size_t flag_len = no ? len - 2 : len;
    if (flag_len == 4 && strncmp(flag, "suid", 4) == 0) {
      o->suid = !no;
    } else if (len == 8 && strncmp(arg, "writable", 8) == 0) {
      o->writable = true;
    } else if (len > 6 && strncmp(arg, "upper=", 6) == 0) {
      free(o->upper);
      if (!(o->upper = strndup(arg + 6, len - 6))) return -ENOMEM;
      o->writable = true;
    } else if (flag_len == 3 && strncmp(flag, "dev", 3) == 0) {
      o->dev = !no;
    } else if (len > 6 && strncmp(arg, "store=", 6) == 0) {
      free(o->store);
      o->store = strndup(arg + 6, len - 6);
      if (!o->store) return -ENOMEM;
    } else if (len && !rw_or_ro) {
      if (append_opt(&o->fuse_opts, arg, len) < 0) return -ENOMEM;
    }
    arg += len;
    if (*arg == ',') arg++;
  }
  return 0;
}

/* Sets o->store to a copy of dir. */
static int take_store(struct options *o, const char *dir) {
  free(o->store);
  o->store = strdup(dir);
  return o->store ? 0 : -ENOMEM;
}

/* Returns CAIRN_EXIT_OK, or the exit code of an error it reported. */
static int parse_args(int argc, char **argv, struct options *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r = 0;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0 || (argc == 2 && strcmp(a, "help") == 0)) {
      printf("usage: %s\n", USAGE);
      exit(CAIRN_EXIT_OK);
    } else if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0 ||
               (argc == 2 && strcmp(a, "version") == 0)) {
      version_print();
      printf("libfuse %s\n", fuse_pkgversion());
      exit(CAIRN_EXIT_OK);
    } else if (strcmp(a, "-f") == 0) {
      o->foreground = true;
    } else if (strcmp(a, "-d") == 0) {
      o->foreground = o->debug = true;
    } else if (strncmp(a, "-o", 2) == 0 && (a[2] || i + 1 < argc)) {
      r = take_mount_opts(o, a[2] ? a + 2 : argv[++i]);
    } else if (strcmp(a, "--store") == 0 && i + 1 < argc) {
      r = take_store(o, argv[++i]);
    } else if (strncmp(a, "--store=", 8) == 0) {
      r = take_store(o, a + 8);
    } else if (strcmp(a, "-o") == 0 || strcmp(a, "--store") == 0) {
      return report_usage(USAGE, "%s: needs a value", a); /* the last argument */
    } else if (a[0] == '-' && a[1]) {
      return report_usage(USAGE, "%s: unknown option", a);
    } else if (!o->image) {
      o->image = a;
    } else if (!o->dir) {
      o->dir = a;
    } else {
      return report_usage(USAGE, "%s: unexpected argument", a);
    }
    if (r < 0) return report_fail(r, "%s: %s", a, strerror(-r));
  }
  if (!o->image || !o->dir) return report_usage(USAGE, "mount: needs an image and a directory");
  return CAIRN_EXIT_OK;
}

/* The mount options every cairnfs mount gets, before the user's. Root's
 * mounts allow other users (runtimes need it), with the kernel checking
 * permissions as for any file system. */
static char *base_fuse_opts(const struct options *o) {
  char *opts = NULL;
  /* fsname is shown as the mount's source; commas would split it. */
  char fixed[512];
  snprintf(fixed, sizeof(fixed), "subtype=cairnfs,%s,default_permissions%s,%s,%s,fsname=%s",
           o->writable ? "rw" : "ro", geteuid() == 0 ? ",allow_other" : "",
           o->suid ? "suid" : "nosuid", o->dev ? "dev" : "nodev", o->image);
  for (char *p = strstr(fixed, "fsname=") + 7; *p; p++)
    if (*p == ',') *p = '_';
  if (append_opt(&opts, fixed, strlen(fixed)) < 0 ||
      (o->fuse_opts && append_opt(&opts, o->fuse_opts, strlen(o->fuse_opts)) < 0)) {
    free(opts);
    return NULL;
  }
  return opts;
}

/* SIGTERM, SIGINT and SIGHUP detach the host's view of the mount. The
 * handlers only write the signal to a pipe; a thread reads it and unmounts
 * (a handler may not do more, and the session loop must not stop). */
static int signal_pipe[2] = {-1, -1};
static const int detach_signals[] = {SIGTERM, SIGINT, SIGHUP};

static void on_detach_signal(int sig) {
  int saved = errno;
  unsigned char c = (unsigned char)sig;
  if (write(signal_pipe[1], &c, 1) < 0) {
    /* The pipe is full: a detach is pending already. */
  }
  errno = saved;
}

/* Installs the handlers (or, with handler SIG_IGN, ignores the signals).
 * They override an inherited SIG_IGN: a shell's background job ignores
 * SIGINT, yet the contract is that these signals unmount. */
static void detach_signals_set(void (*handler)(int)) {
  struct sigaction sa = {.sa_handler = handler, .sa_flags = SA_RESTART};
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof(detach_signals) / sizeof(detach_signals[0]); i++)
    sigaction(detach_signals[i], &sa, NULL);
}

struct detacher {
  pthread_t thread;
  const char *dir;
  const char *dev; /* our mount's device: DIR may have been remounted since */
};

/* Unmounts the host's view at each signal, until it reads a 0 byte. */
static void *detach_on_signal(void *arg) {
  const struct detacher *d = arg;
  unsigned char c;
  for (;;) {
    ssize_t n = read(signal_pipe[0], &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1 || c == 0) return NULL;
    char dev[32];
    if (cairn_mountpoint_dev(d->dir, dev, sizeof(dev)) == 0 && strcmp(dev, d->dev) == 0)
      cairn_mountpoint_unmount(d->dir, true);
  }
}

static void detacher_stop(struct detacher *d) {
  detach_signals_set(SIG_IGN);
  unsigned char quit = 0;
  /* The write end is non-blocking (for the handlers); the thread empties
   * the pipe, so a full one has room again soon. */
  while (write(signal_pipe[1], &quit, 1) != 1) usleep(1000);
  pthread_join(d->thread, NULL);
}

static int serve(struct cairnfs *fs, const struct options *o, const char *dir,
                 const char *image_id) {
  _cleanup_free_ char *opts = base_fuse_opts(o);
  if (!opts) return report_fail(-ENOMEM, "%s: out of memory", o->image);
  char *fargv[] = {"cairnfs", "-o", opts, o->debug ? "-d" : NULL, NULL};
  struct fuse_args args = FUSE_ARGS_INIT(o->debug ? 4 : 3, fargv);
  int code = 0;
  struct detacher detacher = {.dir = dir};
  char dev[32];
  struct fuse_session *se =
      fuse_session_new(&args, fs->rw ? &cairnfs_rw_ops : &cairnfs_ops, sizeof(cairnfs_ops), fs);
  if (!se) {
    code = report_fail(-EINVAL, "%s: bad mount options: %s", dir, opts);
    goto out;
  }
  if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0 || fcntl(signal_pipe[0], F_SETFL, 0) < 0) {
    code = report_fail(-errno, "%s: pipe: %s", dir, strerror(errno));
    goto signals;
  }
  signal(SIGPIPE, SIG_IGN);
  detach_signals_set(on_detach_signal);
  if (fuse_session_mount(se, dir) < 0) {
    code = report_fail(-EIO, "%s: cannot mount (see the message above)", dir);
    goto signals;
  }
  int r = cairn_mountpoint_dev(dir, dev, sizeof(dev));
  if (r < 0) {
    code = report_fail(r, "%s: the new mount is not in /proc/self/mountinfo", dir);
    goto unmount;
  }
  r = cairn_mount_record(fs->st, dir, image_id, getpid(), dev, fs->rw != NULL);
  if (r < 0) {
    code = report_fail(r, "%s: cannot record the mount: %s", dir, report_why(fs->st, r));
    goto unmount;
  }
  detacher.dev = dev;
  snprintf(fs->dev, sizeof(fs->dev), "%s", dev);
  r = pthread_create(&detacher.thread, NULL, detach_on_signal, &detacher);
  if (r != 0) {
    code = report_fail(-r, "%s: cannot start a thread: %s", dir, strerror(r));
    goto forget;
  }
  report_ready();
  struct fuse_loop_config *cfg = fuse_loop_cfg_create();
  if (cfg) {
    fuse_loop_cfg_set_clone_fd(cfg, 1);
    fuse_loop_cfg_set_max_threads(cfg, CAIRNFS_THREADS);
    fuse_loop_cfg_set_idle_threads(cfg, CAIRNFS_THREADS);
    fuse_session_loop_mt(se, cfg);
    fuse_loop_cfg_destroy(cfg);
  } else {
    fuse_session_loop(se);
  }
  detacher_stop(&detacher);
forget:
  cairn_mount_forget(fs->st, dir, getpid());
unmount:
  /* Does nothing once the kernel has ended the session (the normal end). */
  fuse_session_unmount(se);
signals:
  detach_signals_set(SIG_IGN);
  close(signal_pipe[0]);
  close(signal_pipe[1]);
  fuse_session_destroy(se);
out:
  fuse_opt_free_args(&args);
  return code;
}

/* Opens, pins and builds, then serves; releases all of it before returning. */
static int run(const struct options *o) {
  struct cairnfs fs = {0};
  cairn_pinset *pins = NULL;
  int code;
  char dir[PATH_MAX];
  int r = cairn_mountpoint_resolve(o->dir, dir, sizeof(dir));
  if (r < 0) return report_fail(r, "%s: %s", o->dir, strerror(-r));
  int state = cairn_mountpoint_state(dir);
  if (state == CAIRN_MP_LIVE || state == CAIRN_MP_STALE)
    return report_fail(-EBUSY, "%s: already a %s cairnfs mount (hint: cairn umount %s)", o->dir,
                       state == CAIRN_MP_LIVE ? "live" : "stale", o->dir);
  struct stat sb;
  if (stat(dir, &sb) < 0) return report_fail(-errno, "%s: %s", o->dir, strerror(errno));
  if (!S_ISDIR(sb.st_mode)) return report_fail(-ENOTDIR, "%s: not a directory", o->dir);

  r = cairn_store_open(o->store, &fs.st);
  if (r < 0) {
    code = report_fail(r, "store: %s", report_why(fs.st, r));
    goto out;
  }
  cairn_id id;
  r = cairn_image_resolve(fs.st, o->image, id);
  if (r < 0) {
    code = report_fail(r, "%s: %s", o->image, report_why(fs.st, r));
    goto out;
  }
  char purpose[PATH_MAX + 8];
  snprintf(purpose, sizeof(purpose), "mount %s", dir);
  pins = cairn_pinset_new(purpose, true);
  if (!pins) {
    code = report_fail(-ENOMEM, "%s: out of memory", o->image);
    goto out;
  }
  r = cairn_pin_image(fs.st, pins, id);
  if (r < 0) {
    code = report_fail(r, "%s: cannot pin: %s", o->image, report_why(fs.st, r));
    goto out;
  }
  r = cairn_tree_open(fs.st, id, &fs.tree);
  if (r < 0) {
    code = report_fail(r, "%s: %s", o->image, report_why(fs.st, r));
    goto out;
  }
  if (o->writable && (r = cairnfs_rw_setup(&fs, id, dir, o->upper)) < 0) {
    code = report_fail(r, "%s: upper layer: %s", o->image, report_why(fs.st, r));
    goto out;
  }
  code = serve(&fs, o, dir, id);
out:
  cairnfs_rw_free(&fs);
  if (pins) cairn_pinset_release(fs.st, pins);
  cairn_tree_free(fs.tree);
  if (fs.st) cairn_store_close(fs.st);
  return code;
}

/* What parse_args allocated, freed when main's options go out of scope. */
static void options_free(struct options *o) {
  free(o->fuse_opts);
  free(o->store);
  free(o->upper);
}

int main(int argc, char **argv) {
  __attribute__((cleanup(options_free))) struct options o = {0};
  int code = parse_args(argc, argv, &o);
  if (code != CAIRN_EXIT_OK) return code;
  if (!o.foreground) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) return report_fail(-errno, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) return report_fail(-errno, "fork: %s", strerror(errno));
    if (pid > 0) {
      close(p[1]);
      return await_daemon(p[0], pid);
    }
    close(p[0]);
    verdict_fd = p[1];
    report_sink_set(verdict_send);
    setsid();
  }
  return run(&o);
}
