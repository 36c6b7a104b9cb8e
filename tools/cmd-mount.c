/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-mount.c — `cairn mount`, `cairn umount`, `cairn mounts`: start, stop
 * and list cairnfs daemons.
 *
 * Directories are resolved by cairn_mountpoint_resolve, as cairnfs resolves
 * them: a symlink to a mountpoint names that mountpoint.
 *
 * mount runs cairnfs (next to this binary, else from PATH), which forks its
 * daemon (a supervisor, fs/supervisor.c) and exits only once the mount is
 * up or has failed; its error is passed on with our prefix and its exit
 * code. We then check the directory really is a cairnfs mount that answers.
 * mount --upgrade DIR asks DIR's supervisor (SIGUSR1) for a new server and
 * waits until one runs and answers; mount --restore runs cairnfs again for
 * each stale record (its image at its directory) and reports, and forgets,
 * those whose image is gone.
 *
 * umount DIR... is idempotent and complete: every step runs whatever the
 * state — unmount while the directory is a cairnfs mount point (lazily if
 * the daemon is gone: ENOTCONN), wait until the recorded daemon holds no
 * lock (its pins and upper layer's, which it lets go of as soon as the
 * kernel ends its session, before any bookkeeping: our answer depends on
 * whether the mount is in use, not on how fast the daemon writes to
 * SQLite), forget the record (a live read-only mount's daemon forgets
 * its own, after: umount_ro), then keep (or with --discard drop) the
 * --rw mount's upper layer and those a crash left for DIR: a user's
 * uncommitted changes go only when a command names them. An upper with
 * no entry (nothing changed since the mount or its last commit) holds
 * nothing to keep and is dropped silently. A directory that is
 * not mounted (or does not exist) is a success, said on stderr ("umount:
 * DIR: not mounted"), as for a teardown script that runs twice. Each
 * directory is unmounted in turn, like umount(8); the exit code is the
 * worst. The daemon is never signalled: it serves until the kernel ends its
 * session, which a container's copy of the mount (in the container's mount
 * namespace) keeps open after our unmount. Then umount says which
 * processes' namespaces hold it and exits 4; the mount is detached, and its
 * daemon releases its pins when they let go. --force ends the session for
 * all of them instead (fusectl's abort).
 */
#include "commands.h"
#include "cli_upper.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

/* Bounds of the waits below, in steps of WAIT_STEP_US (1 ms). */
#define WAIT_STEP_US 1000
#define ANSWER_STEPS 10000  /* 10 s for a new mount to show up */
#define RELEASE_STEPS 10000 /* 10 s for a daemon to let go after the session */
#define HOLDERS_STEPS 200   /* look for other namespaces' copies every 0.2 s, */
#define HOLDERS_FIRST 100   /* first after 0.1 s */

static void sleep_step(void) { usleep(WAIT_STEP_US); }

/* Passes on what cairnfs says on stderr (read from fd, which it closes):
 * its lines "cairnfs: X" as "cairn: mount: X", as mount's own. */
static void relay_cairnfs(int fd) {
  cairn_autofclose FILE *err = fdopen(fd, "r");
  if (!err) {
    close(fd);
    return;
  }
  cairn_autofree char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  while ((n = getline(&line, &cap, err)) > 0) {
    if (line[n - 1] == '\n') line[n - 1] = '\0';
    const char *said = strncmp(line, "cairnfs: ", 9) == 0 ? line + 9 : line;
    fprintf(stderr, "%s: mount: %s\n", report_prog, said);
  }
}

/* Runs cairnfs (with -o opts unless NULL), passing on what it says, and
 * returns its exit code, or that of a failure to run it (reported). */
static int run_cairnfs(const char *store_dir, const char *image, const char *dir, const char *opts,
                       int pass_fd) {
  char bin[PATH_MAX];
  cli_cairnfs_path(bin, sizeof(bin));
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) return report_fail(-errno, "mount: pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) {
    int code = report_fail(-errno, "mount: cannot start cairnfs: %s", strerror(errno));
    close(p[0]);
    close(p[1]);
    return code;
  }
  if (pid == 0) {
    dup2(p[1], STDERR_FILENO);
    if (pass_fd >= 0) fcntl(pass_fd, F_SETFD, 0); /* cairnfs mounts through it */
    /* Root has another user's store open only if --trust-store said so
     * (cli_store): cairnfs is told as much, else it refuses the store. */
    struct stat sb;
    bool trust = geteuid() == 0 && stat(store_dir, &sb) == 0 && sb.st_uid != 0;
    char *argv[9] = {"cairnfs", "--store", (char *)store_dir, (char *)image, (char *)dir};
    int n = 5;
    if (opts) argv[n++] = "-o", argv[n++] = (char *)opts;
    if (trust) argv[n++] = "--trust-store";
    execvp(bin, argv);
    int err = errno;
    report_prog = "cairnfs"; /* said for the cairnfs that did not start: passed on as ours */
    report_fail(-err, "cannot run %s: %s", bin, strerror(err));
    _exit(CLI_EXIT_EXEC_NOT_FOUND);
  }
  close(p[1]);
  relay_cairnfs(p[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return report_fail(-errno, "mount: waitpid: %s", strerror(errno));
  if (!WIFEXITED(status))
    return report_fail(-ESRCH, "mount: cairnfs died of signal %d", WTERMSIG(status));
  int code = WEXITSTATUS(status); /* the contract's, or the shell's for a cairnfs not run */
  return code <= CAIRN_EXIT_INTEGRITY ? code : CAIRN_EXIT_FAILURE;
}

/* "A,B": a -o list with one more option; NULL on ENOMEM. */
static char *xasprintf_opts(const char *list, const char *add) {
  char *s;
  return asprintf(&s, "%s,%s", list, add) < 0 ? NULL : s;
}

/* True if dir holds anything: a mount hides it until it is unmounted. */
static bool dir_has_entries(const char *dir) {
  cairn_autoclosedir DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) return true;
  return false;
}

/* The daemon and device recorded for dir (pid 0 if none). */
struct mount_record {
  pid_t pid;
  char dev[32];
};

struct mount_lookup {
  const char *dir;
  struct mount_record rec;
};

static int record_of_dir(const struct cairn_mount_rec *m, void *arg) {
  struct mount_lookup *l = arg;
  if (strcmp(m->dir, l->dir) != 0) return 0;
  l->rec.pid = m->pid;
  snprintf(l->rec.dev, sizeof(l->rec.dev), "%s", m->dev);
  return 0;
}

static struct mount_record recorded(cairn_store *st, const char *dir) {
  struct mount_lookup l = {.dir = dir};
  cairn_mounts_foreach(st, record_of_dir, &l);
  return l.rec;
}

/* The server the supervisor pid runs (its cairnfs child), 0 if none. */
static pid_t server_of(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
  cairn_autofclose FILE *f = fopen(path, "re");
  long child;
  while (f && fscanf(f, "%ld", &child) == 1)
    if (child > 0 && cairn_process_running((pid_t)child, "cairnfs")) return (pid_t)child;
  return 0;
}

/* Waits (bounded) for dir's mount to answer: 0, or -ENOTCONN. */
static int await_answer(const char *dir) {
  for (int i = 0; i < ANSWER_STEPS; i++) {
    int state = cairn_mountpoint_state(dir);
    if (state == CAIRN_MP_LIVE) return 0;
    if (state < 0 || state == CAIRN_MP_STALE) break;
    sleep_step();
  }
  return -ENOTCONN;
}

/* cairn mount --upgrade DIR: the supervisor replaces its server (SIGUSR1)
 * with one run from the cairnfs binary installed now; we wait until a new
 * server runs and the mount answers. */
static int mount_upgrade(cairn_store *st, const char *name, bool quiet) {
  char dir[PATH_MAX];
  int r = cairn_mountpoint_resolve(name, dir, sizeof(dir));
  if (r < 0) return report_fail(r, "mount: %s: %s", name, cairn_path_why(r));
  struct mount_record rec = recorded(st, dir);
  if (rec.pid <= 0 || !cairn_process_running(rec.pid, "cairnfs"))
    return report_fail(-ENOENT, "mount: --upgrade: %s: not served by a cairnfs", name);
  pid_t old = 0;
  for (int i = 0; i < ANSWER_STEPS && !(old = server_of(rec.pid)); i++) sleep_step();
  if (!old) return report_fail(-ESRCH, "mount: --upgrade: %s: no server runs", name);
  if (kill(rec.pid, SIGUSR1) < 0)
    return report_fail(-errno, "mount: --upgrade: %s: %s", name, strerror(errno));
  pid_t now = 0;
  for (int i = 0; i < ANSWER_STEPS; i++) {
    now = server_of(rec.pid);
    if (now && now != old) break;
    sleep_step();
  }
  if (!now || now == old)
    return report_fail(-ETIMEDOUT, "mount: --upgrade: %s: no new server after 10 s", name);
  if (cairn_mountpoint_dev(dir, rec.dev, sizeof(rec.dev)) == 0 && await_answer(dir) < 0)
    return report_fail(-ENOTCONN, "mount: --upgrade: %s: the new server does not answer", name);
  /* The binary serving now must be the one installed at the supervisor's
   * path: the supervisor falls back to its own when that one fails. */
  char path[PATH_MAX], link[64];
  snprintf(link, sizeof(link), "/proc/%d/exe", (int)rec.pid);
  ssize_t n = readlink(link, path, sizeof(path) - 1);
  path[n > 0 ? n : 0] = '\0';
  char *deleted = n > 0 ? strstr(path, " (deleted)") : NULL;
  if (deleted && deleted[10] == '\0') *deleted = '\0';
  struct stat want, got;
  snprintf(link, sizeof(link), "/proc/%d/exe", (int)server_of(rec.pid));
  if (n > 0 && stat(path, &want) == 0 && stat(link, &got) == 0 &&
      (want.st_ino != got.st_ino || want.st_dev != got.st_dev))
    return report_fail(
        -EIO, "mount: --upgrade: %s: %s cannot serve; the supervisor's own cairnfs serves on", name,
        path);
  if (!quiet) printf("%s\n", dir);
  return CAIRN_EXIT_OK;
}

/* A record mount --restore republishes or reports. */
struct restore_rec {
  char *dir;
  char *image;
  pid_t pid;
  bool rw;
  bool dir_known; /* the directory's identity was recorded (not by an older cairn) */
  dev_t dir_dev;
  ino_t dir_ino;
  uid_t dir_uid;
};

struct restore_list {
  struct restore_rec *v;
  size_t n;
};

static int restore_collect(const struct cairn_mount_rec *m, void *arg) {
  struct restore_list *l = arg;
  if (m->state != CAIRN_MOUNT_STALE || !m->image[0]) return 0; /* no image: an ALS (its unit) */
  struct restore_rec *v = realloc(l->v, (l->n + 1) * sizeof(*v));
  if (!v) return -ENOMEM;
  l->v = v;
  v[l->n] = (struct restore_rec){strdup(m->dir), strdup(m->image), m->pid,     m->rw,
                                 m->dir_known,   m->dir_dev,       m->dir_ino, m->dir_uid};
  if (!v[l->n].dir || !v[l->n].image) {
    free(v[l->n].dir);
    free(v[l->n].image);
    return -ENOMEM;
  }
  l->n++;
  return 0;
}

/* Checks that the recorded mountpoint dir still resolves to itself (no
 * symlink put in its place or on the way, none in a directory another
 * user can write): -EXDEV (said) if it now names another directory, else
 * a cairn_path_resolve error, or 0 and *parent_fd of its directory. */
static int restore_check(const char *dir, int *parent_fd) {
  char real[PATH_MAX];
  int r = cairn_path_resolve(dir, real, sizeof(real), parent_fd);
  if (r < 0) return r;
  if (strcmp(real, dir) == 0) return 0;
  report_fail(-EXDEV, "mount: --restore: %s: now leads to %s, not the directory recorded: refused",
              dir, real);
  return -EXDEV;
}

/* Checks that rfd, the directory m->dir names now, is the one the mount
 * was made on (its device, inode and owner as recorded): one removed and
 * made again, by another user or not, is refused (said), -EXDEV. A
 * record of an older cairn has no identity: its path alone was checked,
 * and that is said. */
static int restore_same_dir(const struct restore_rec *m, int rfd) {
  struct stat sb;
  if (fstat(rfd, &sb) < 0) {
    int err = errno;
    report_fail(-err, "mount: --restore: %s: %s", m->dir, strerror(err));
    return -err;
  }
  if (!m->dir_known) {
    char msg[PATH_MAX + 160];
    snprintf(msg, sizeof(msg),
             "mount: --restore: %s: recorded by an older cairn, without its inode and owner: "
             "checked by its path only",
             m->dir);
    report_notice(msg);
    return 0;
  }
  if (sb.st_dev == m->dir_dev && sb.st_ino == m->dir_ino && sb.st_uid == m->dir_uid) return 0;
  report_fail(-EXDEV,
              "mount: --restore: %s: not the directory recorded (inode %llu of uid %u, now "
              "inode %llu of uid %u): refused",
              m->dir, (unsigned long long)m->dir_ino, (unsigned)m->dir_uid,
              (unsigned long long)sb.st_ino, (unsigned)sb.st_uid);
  return -EXDEV;
}

/* Republishes one stale record: see mount --restore's summary. */
static int restore_one(cairn_store *st, const struct restore_rec *m, bool quiet) {
  cairn_id id;
  int r = cairn_image_resolve(st, m->image, id);
  if (r == -ENOENT) {
    cairn_mount_forget(st, m->dir, m->pid);
    return report_fail(r, "mount: --restore: %s: image %.12s was removed; record forgotten", m->dir,
                       m->image);
  }
  if (r < 0) return report_fail(r, "mount: --restore: %s: %s", m->dir, report_why(st, r));
  /* The recorded directory may be in another user's, who may have put a
   * symlink there since: resolved as any path a user gave, it must still
   * be that directory, and the mount is made through an fd of it. */
  int pfd = -1;
  r = restore_check(m->dir, &pfd);
  cairn_autoclose int parent = pfd;
  if (r < 0)
    return r == -EXDEV ? CAIRN_EXIT_FAILURE
                       : report_fail(r, "mount: --restore: %s: %s", m->dir, cairn_path_why(r));
  int state = cairn_mountpoint_state(m->dir);
  if (state == CAIRN_MP_STALE) { /* a dead server's mount is in the way */
    r = cairn_mountpoint_unmount(m->dir, true);
    if (r < 0) return report_fail(r, "mount: --restore: %s: %s", m->dir, strerror(-r));
  } else if (state == CAIRN_MP_LIVE || state == CAIRN_MP_OTHER) {
    return report_fail(-EBUSY, "mount: --restore: %s: something else is mounted there", m->dir);
  }
  /* A --rw mount goes on with the upper layer its daemon left. */
  char opts[96] = "";
  if (m->rw) {
    struct cli_upper up;
    r = cli_upper_of_dir(st, m->dir, false, &up);
    if (r == 0 && !up.found) {
      cairn_mount_forget(st, m->dir, m->pid);
      return report_fail(-ENOENT, "mount: --restore: %s: its upper layer is gone; record forgotten",
                         m->dir);
    }
    if (r < 0) return report_fail(r, "mount: --restore: %s: %s", m->dir, report_why(st, r));
    snprintf(opts, sizeof(opts), "writable,upper=%s", up.id);
    /* On the image its upper is on (the record may name the one a move
     * left, if its supervisor was killed in cairn commit's move). */
    if (strcmp(up.image, id) != 0 && cairn_image_resolve(st, up.image, id) < 0)
      return report_fail(-ENOENT, "mount: --restore: %s: image %.12s of its upper was removed",
                         m->dir, up.image);
  }
  const char *base = strrchr(m->dir, '/') + 1;
  cairn_autoclose int rfd =
      openat(parent, *base ? base : ".", O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0)
    return report_fail(-errno, "mount: --restore: %s: %s", m->dir,
                       errno == ELOOP ? "a symlink, not a directory: refused" : strerror(errno));
  if ((r = restore_same_dir(m, rfd)) < 0) return CAIRN_EXIT_FAILURE;
  char at[64];
  snprintf(at, sizeof(at), "/proc/self/fd/%d", rfd);
  int code = run_cairnfs(cairn_store_dir(st), id, at, opts[0] ? opts : NULL, rfd);
  if (code != CAIRN_EXIT_OK) return code;
  if (await_answer(m->dir) < 0)
    return report_fail(-ENOTCONN, "mount: --restore: %s: the mount does not answer", m->dir);
  if (!quiet) printf("%s\n", m->dir);
  return CAIRN_EXIT_OK;
}

/* cairn mount --restore: every stale record, in turn; the worst code. */
static int mount_restore(cairn_store *st, bool quiet) {
  struct restore_list l = {0};
  int r = cairn_mounts_foreach(st, restore_collect, &l);
  int worst = r < 0 ? report_fail(r, "mount: --restore: %s", report_why(st, r)) : CAIRN_EXIT_OK;
  for (size_t i = 0; i < l.n; i++) {
    if (r >= 0) {
      int code = restore_one(st, &l.v[i], quiet);
      if (code > worst) worst = code;
    }
    free(l.v[i].dir);
    free(l.v[i].image);
  }
  free(l.v);
  return worst;
}

static int mount_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"rw", no_argument, NULL, 'w'},
      {"suid", no_argument, NULL, 's'},
      {"dev", no_argument, NULL, 'd'},
      {"quiet", no_argument, NULL, 'q'},
      {"options", required_argument, NULL, 'o'},
      {"upgrade", no_argument, NULL, 'u'},
      {"restore", no_argument, NULL, 'R'},
      {"resume", no_argument, NULL, 'e'},
      {"record-access", no_argument, NULL, 'A'},
      {NULL, 0, NULL, 0},
  };
  bool quiet = false, upgrade = false, restore = false, resume = false;
  /* --suid, --dev and every -o, joined as cairnfs's one -o */
  cairn_autofree char *mount_opts = NULL;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":qo:", opts, NULL)) != -1) {
    const char *add = o == 's'   ? "suid"
                      : o == 'd' ? "dev"
                      : o == 'w' ? "writable"
                      : o == 'A' ? "record_access"
                      : o == 'o' ? optarg
                                 : NULL;
    if (add) {
      char *more = mount_opts ? xasprintf_opts(mount_opts, add) : strdup(add);
      if (!more) return report_fail(-ENOMEM, "mount: -o: %s", strerror(ENOMEM));
      free(mount_opts);
      mount_opts = more;
      continue;
    }
    switch (o) {
    case 'q': quiet = true; break;
    case 'u': upgrade = true; break;
    case 'R': restore = true; break;
    case 'e': resume = true; break;
    default: return cli_bad_option(cmd_mount.usage, argv, o, opts);
    }
  }
  if (upgrade && restore)
    return report_usage(cmd_mount.usage, "mount: --upgrade and --restore exclude each other");
  if ((upgrade || restore) && mount_opts)
    return report_usage(cmd_mount.usage, "mount: --%s takes no mount options",
                        upgrade ? "upgrade" : "restore");
  if (upgrade && argc - optind != 1)
    return report_usage(cmd_mount.usage, "mount: --upgrade needs a directory");
  if (restore && argc - optind != 0)
    return report_usage(cmd_mount.usage, "mount: --restore takes no arguments");
  if (resume && (argc - optind != 1 || !mount_opts || !strstr(mount_opts, "writable")))
    return report_usage(cmd_mount.usage, "mount: --resume: needs --rw and only a directory");
  if (!upgrade && !restore && !resume && argc - optind != 2)
    return report_usage(cmd_mount.usage, "mount: needs an image and a directory");
  cairn_store *st;
  int code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  if (upgrade) return mount_upgrade(st, argv[optind], quiet);
  if (restore) return mount_restore(st, quiet);
  const char *image = resume ? NULL : argv[optind], *dir = argv[argc - 1];
  cairn_id id;
  char abs[PATH_MAX];
  int pfd = -1;
  int r = cairn_path_resolve(dir, abs, sizeof(abs), &pfd);
  cairn_autoclose int parent = pfd;
  if (r < 0) return report_fail(r, "mount: %s: %s", dir, cairn_path_why(r));
  struct cli_upper up;
  if (resume) { /* the upper kept (or left by a crash) for dir, on its image */
    r = cli_upper_of_dir(st, abs, false, &up);
    if (r == 0 && !up.found) r = cairn_fail(st, -ENOENT, "no kept upper layer for this directory");
    if (r < 0) return report_fail(r, "mount: --resume: %s: %s", dir, report_why(st, r));
    image = up.image;
    char *with;
    if (asprintf(&with, "%s,upper=%s", mount_opts, up.id) < 0)
      return report_fail(-ENOMEM, "mount: %s", strerror(ENOMEM));
    free(mount_opts);
    mount_opts = with;
  }
  r = cairn_image_resolve(st, image, id);
  if (r < 0) return report_fail(r, "mount: %s: %s", image, report_why(st, r));
  int state = cairn_mountpoint_state(abs);
  if (resume && state == CAIRN_MP_STALE) { /* the crashed mount whose upper we serve again */
    r = cairn_mountpoint_unmount(abs, true);
    if (r < 0) return report_fail(r, "mount: --resume: %s: %s", dir, strerror(-r));
    state = cairn_mountpoint_state(abs);
  }
  if (state == CAIRN_MP_LIVE || state == CAIRN_MP_STALE)
    return report_fail(-EBUSY, "mount: %s: already a %s cairnfs mount (hint: cairn umount %s)", dir,
                       state == CAIRN_MP_LIVE ? "live" : "stale", dir);
  if (dir_has_entries(abs)) {
    char warning[PATH_MAX + 96];
    snprintf(warning, sizeof(warning),
             "mount: %s: warning: not empty; what it holds is hidden while mounted", dir);
    report_notice(warning); /* as mount(8) allows it, not a failure */
  }
  /* Mounted through an fd of the directory resolved (opened now, after
   * any stale mount on it is gone): a symlink put at it or on the way
   * since cannot send the mount elsewhere. One that is not there is left
   * to cairnfs to say so. */
  const char *base = strrchr(abs, '/') + 1;
  cairn_autoclose int rfd =
      openat(parent, *base ? base : ".", O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0 && errno == ELOOP)
    return report_fail(-EPERM, "mount: %s: a symlink, not a directory: refused", dir);
  code = cli_mount_start_at(st, image, abs, rfd, mount_opts);
  if (code == CAIRN_EXIT_OK && !quiet) printf("%s\n", abs); /* as podman mount prints where */
  return code;
}

int cli_mount_start(cairn_store *st, const char *image, const char *dir, const char *opts) {
  return cli_mount_start_at(st, image, dir, -1, opts);
}

int cli_mount_start_at(cairn_store *st, const char *image, const char *dir, int dir_fd,
                       const char *opts) {
  char at[64];
  if (dir_fd >= 0) snprintf(at, sizeof(at), "/proc/self/fd/%d", dir_fd);
  int code = run_cairnfs(cairn_store_dir(st), image, dir_fd >= 0 ? at : dir, opts, dir_fd);
  if (code != CAIRN_EXIT_OK) return code;
  if (await_answer(dir) == 0) return CAIRN_EXIT_OK;
  return report_fail(-ENOTCONN, "mount: %s: cairnfs reported success but the mount does not answer",
                     dir);
}

/* Waits (bounded) for the daemon to let go of its pins after our unmount:
 * it does as soon as the kernel ends the FUSE session, before any
 * bookkeeping of its own. While other mount namespaces still hold the
 * mount it serves on: says who holds it (name is DIR as the user typed
 * it) and returns CAIRN_EXIT_BUSY; with force, ends the connection for
 * all of them instead (cairn_mount_abort), saying whom it cut off. */
static int await_release(const char *name, const struct mount_record *rec, bool force,
                         const char *after) {
  bool aborted = false;
  int seen = 0; /* checks that found holders */
  for (int i = 1; i <= RELEASE_STEPS; i++) {
    if (!cairn_mount_daemon_holds(rec->pid)) return CAIRN_EXIT_OK;
    if (i % HOLDERS_STEPS == HOLDERS_FIRST && rec->dev[0] && !aborted) {
      cairn_autofree char *who = NULL;
      int n = cairn_mount_holders(rec->dev, &who);
      /* Twice: a device number is reused at once by the next mount, which
       * a first look may take for ours while our daemon lets go. */
      if (n > 0 && !force && ++seen >= 2)
        return report_fail(-EBUSY, "umount: %s: detached here, still in use by %s%s", name, who,
                           after);
      if (force) {
        int r = cairn_mount_abort(rec->dev);
        if (r < 0 && r != -ENOENT)
          return report_fail(r, "umount: %s: --force: cannot end the FUSE connection: %s", name,
                             strerror(-r));
        aborted = true;
        char msg[PATH_MAX + 512];
        snprintf(msg, sizeof(msg), "umount: %s: --force: ended the FUSE connection; cut off %s",
                 name, n > 0 ? who : "open files only");
        if (r == 0) report_notice(msg);
      }
    }
    sleep_step();
  }
  return report_fail(-EBUSY, "umount: %s: detached here, still in use (cairnfs pid %d serves it)%s",
                     name, (int)rec->pid, after);
}

/* After a lazy unmount: whether rec's daemon still serves someone after
 * a short wait (0.5 s: one that nobody used lets go at once). */
static bool lazy_still_served(const struct mount_record *rec) {
  for (int i = 0; i < 500; i++) {
    if (!cairn_mount_daemon_holds(rec->pid)) return false;
    sleep_step();
  }
  return true;
}

/* What umount was asked to do with each directory. */
struct umount_opts {
  bool quiet, discard, force, lazy; /* without --discard a --rw upper is kept */
  bool no_dir_line; /* print no line of the directory (bundle --rm prints its own) */
};

/* Says, on stderr, that umount found nothing mounted on name (bundle --rm,
 * o->no_dir_line, says its own unless an upper layer is kept). */
static void say_not_mounted(const char *name, int kept, const struct umount_opts *o) {
  char msg[PATH_MAX + 128];
  if (!kept && o->no_dir_line) return;
  if (kept)
    snprintf(msg, sizeof(msg),
             "umount: %s: not mounted; its kept upper layer stays (cairn umount --discard %s "
             "drops it)",
             name, name);
  else
    snprintf(msg, sizeof(msg), "umount: %s: not mounted", name);
  report_notice(msg);
}

/* The end of the --rw mount's upper up once its session is over: dropped
 * with --discard (its daemon did), else kept, unless it holds nothing
 * (dropped silently: no change is lost); said on stdout. */
static void umount_upper_end(cairn_store *st, const struct cli_upper *up,
                             const struct umount_opts *o, const char *dir) {
  if (o->discard) {
    cairn_upper_drop(st, up->id); /* its files */
    if (!o->quiet) cli_upper_say(up, false, dir);
    return;
  }
  if (cairn_upper_drop_if_empty(st, up->id) == 1) return;
  if (!o->quiet) cli_upper_say(up, true, dir);
}

/* umount of a directory that is gone (bundle --rm removed it): the
 * uppers kept for its path are kept, or dropped with --discard. */
static int umount_gone(cairn_store *st, const char *name, const struct umount_opts *o) {
  char dir[PATH_MAX], cwd[PATH_MAX];
  int kept = 0, r = 0;
  if (name[0] == '/' || !getcwd(cwd, sizeof(cwd)))
    snprintf(dir, sizeof(dir), "%s", name);
  else if (snprintf(dir, sizeof(dir), "%s/%s", cwd, name) >= (int)sizeof(dir))
    dir[0] = '\0';
  if (dir[0] == '/')
    r = cli_uppers_left(st, dir, o->discard ? CLI_LEFT_DISCARD : CLI_LEFT_KEEP, o->quiet, &kept);
  if (r < 0) return report_fail(r, "umount: %s: %s", name, report_why(st, r));
  say_not_mounted(name, kept, o);
  return CAIRN_EXIT_OK;
}

/* Says why unmounting dir (name as typed) failed (r < 0): its exit code. */
static int unmount_failed(const char *name, const char *dir, int r) {
  if (r != -EBUSY) return report_fail(r, "umount: %s: %s", name, strerror(-r));
  cairn_autofree char *who = NULL;
  if (cairn_mount_users(dir, &who) > 0)
    return report_fail(r, "umount: %s: busy: used by %s (umount --lazy detaches it)", name, who);
  return report_fail(r, "umount: %s: busy (a process uses the mount)", name);
}

static int umount_one(cairn_store *st, const char *name, const struct umount_opts *o) {
  char dir[PATH_MAX];
  int r = cairn_mountpoint_resolve(name, dir, sizeof(dir));
  if (r == -ENOENT || r == -ENOTDIR) return umount_gone(st, name, o);
  if (r < 0) return report_fail(r, "umount: %s: %s", name, cairn_path_why(r));
  struct mount_record rec = recorded(st, dir);
  int code = CAIRN_EXIT_OK;
  /* mounted here, or served elsewhere only (detached) */
  bool was_mounted = rec.pid > 0 && cairn_mount_daemon_holds(rec.pid);
  struct cli_upper up; /* a --rw mount's changes: kept, or dropped by its daemon */
  if (cli_upper_of_dir(st, dir, true, &up) < 0) up.found = false;
  if (up.found && !o->discard && (r = cairn_upper_keep(st, up.id)) < 0)
    return report_fail(r, "umount: %s: %s", name, report_why(st, r));
  /* With --discard, the daemon drops the upper when the session ends only
   * because this asked for it (else it keeps it): marked before the
   * unmount, unmarked again if the session cannot end because of us. */
  bool was_kept = false, marked = false;
  if (up.found && o->discard) {
    if ((r = cairn_upper_mark_drop(st, up.id, true, &was_kept)) < 0)
      return report_fail(r, "umount: %s: %s", name, report_why(st, r));
    marked = true;
  }
  char after[PATH_MAX + 160] = "";
  if (up.found)
    snprintf(after, sizeof(after),
             o->discard ? "; its upper layer %.12s is dropped when they let go, as --discard "
                          "asked%.0s"
                        : "; its upper layer %.12s is kept when they let go (cairn mount --rw "
                          "--resume %s)",
             up.id, name);

  /* Several cairnfs mounts may be stacked on dir; each round removes one. */
  for (int round = 0; round < 16; round++) {
    int state = cairn_mountpoint_state(dir);
    if (state == CAIRN_MP_NONE) break;
    was_mounted = true;
    if (state == CAIRN_MP_OTHER) {
      code = report_fail(-EMEDIUMTYPE, "umount: %s: not a cairnfs mount", name);
      break;
    }
    r = state < 0 ? state : cairn_mountpoint_unmount(dir, state == CAIRN_MP_STALE || o->lazy);
    if (r < 0) {
      code = unmount_failed(name, dir, r);
      break;
    }
  }
  if (code != CAIRN_EXIT_OK && marked) /* still mounted here: nothing was dropped */
    cairn_upper_mark_drop(st, up.id, false, &was_kept);
  if (code == CAIRN_EXIT_OK && rec.pid > 0 && o->lazy && lazy_still_served(&rec)) {
    /* --lazy: detached, as umount -l; the daemon serves who still uses
     * it, keeps its pins and record, and ends with them. */
    char msg[PATH_MAX + 400];
    snprintf(msg, sizeof(msg),
             "umount: %s: detached; still in use, so cairnfs (pid %d) serves it and keeps its "
             "image pinned until the last user lets go%s",
             name, (int)rec.pid, after);
    report_notice(msg);
    if (!o->quiet && !o->no_dir_line) printf("%s\n", dir); /* the real path, as mount's */
    return CAIRN_EXIT_OK;
  }
  if (code == CAIRN_EXIT_OK && rec.pid > 0) code = await_release(name, &rec, o->force, after);
  if (code == CAIRN_EXIT_OK) {
    r = cairn_mount_forget(st, dir, rec.pid);
    if (r < 0) code = report_fail(r, "umount: %s: %s", name, report_why(st, r));
  }
  if (code != CAIRN_EXIT_OK) return code;
  if (up.found) umount_upper_end(st, &up, o, dir);
  /* The uppers left for dir by a crash, or kept: see cli_uppers_left. */
  int kept = 0;
  r = cli_uppers_left(st, dir, o->discard ? CLI_LEFT_DISCARD : CLI_LEFT_KEEP, o->quiet, &kept);
  if (r < 0) return report_fail(r, "umount: %s: %s", name, report_why(st, r));
  if (!was_mounted && !up.found && r == 0) say_not_mounted(name, kept, o);
  if ((was_mounted || up.found || r > 0) && !o->quiet && !o->no_dir_line)
    printf("%s\n", dir); /* the real path, as mount prints it */
  return CAIRN_EXIT_OK;
}

/* umount of a live read-only mount (the topmost at dir): it has no upper
 * layer to ask about, and its server says which daemon serves it, so it
 * is unmounted at once, and once that daemon has let go of its pins
 * umount returns; the daemon forgets its record after (the slow way
 * writes to SQLite with it, each waiting for the other's write lock).
 * The database is not opened unless the server could not say (not root:
 * the record is read, while the daemon lets go).
 * -1 if name is not such a mount (umount_one does it), else the exit
 * code. */
static int umount_ro(cairn_store *st, const char *name, const struct umount_opts *o) {
  char dir[PATH_MAX];
  struct statvfs sv;
  if (o->force || o->lazy || cairn_mountpoint_resolve(name, dir, sizeof(dir)) < 0 ||
      cairn_mountpoint_state(dir) != CAIRN_MP_LIVE || statvfs(dir, &sv) < 0 ||
      !(sv.f_flag & ST_RDONLY))
    return -1;
  /* Its daemon as its server says (root), else as its record does. */
  struct mount_record rec = {.pid = cairn_mount_supervisor(dir)};
  if (rec.pid < 0 || cairn_mountpoint_dev(dir, rec.dev, sizeof(rec.dev)) < 0) rec.pid = 0;
  int r = cairn_mountpoint_unmount(dir, false);
  if (r < 0) return unmount_failed(name, dir, r);
  /* Another cairnfs mount stacked under it: the slow way, for the rest. */
  if (cairn_mountpoint_state(dir) != CAIRN_MP_NONE) return umount_one(st, name, o);
  if (rec.pid == 0) rec = recorded(st, dir);
  /* A daemon that let go forgets its record itself (scans skip it till
   * then; one killed before it could is stale, and the next sweep's). */
  int code = rec.pid > 0 ? await_release(name, &rec, false, "") : CAIRN_EXIT_OK;
  if (code != CAIRN_EXIT_OK) return code;
  int kept = 0; /* the uppers a crash left for dir, as umount_one */
  r = cli_uppers_left(st, dir, o->discard ? CLI_LEFT_DISCARD : CLI_LEFT_KEEP, o->quiet, &kept);
  if (r < 0) return report_fail(r, "umount: %s: %s", name, report_why(st, r));
  /* Closed without a checkpoint: the daemon, writing after us, does it
   * when it closes last (else the next command), not our caller's wait. */
  cairn_store_idle(st);
  if (!o->quiet && !o->no_dir_line) printf("%s\n", dir);
  return CAIRN_EXIT_OK;
}

int cli_umount_one(cairn_store *st, const char *name, bool quiet, bool discard) {
  struct umount_opts o = {.quiet = quiet, .discard = discard, .no_dir_line = true};
  return umount_one(st, name, &o);
}

static int umount_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"quiet", no_argument, NULL, 'q'},   {"keep", no_argument, NULL, 'k'},
      {"discard", no_argument, NULL, 'd'}, {"force", no_argument, NULL, 'f'},
      {"lazy", no_argument, NULL, 'l'},    {0}};
  struct umount_opts uo = {0};
  bool keep = false; /* the default; accepted for scripts that say it */
  int code, o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":qfl", opts, NULL)) != -1) {
    if (o == 'q')
      uo.quiet = true;
    else if (o == 'k')
      keep = true;
    else if (o == 'd')
      uo.discard = true;
    else if (o == 'f')
      uo.force = true;
    else if (o == 'l')
      uo.lazy = true;
    else
      return cli_bad_option(cmd_umount.usage, argv, o, opts);
  }
  if (uo.lazy && uo.force)
    return report_usage(cmd_umount.usage, "umount: --lazy and --force exclude each other");
  if (keep && uo.discard)
    return report_usage(cmd_umount.usage, "umount: --keep and --discard exclude each other");
  if (optind == argc) return report_usage(cmd_umount.usage, "umount: needs a directory");
  cairn_store *st; /* its database opened when needed: umount_ro mostly does not */
  int worst = cli_store_open(c, CAIRN_STORE_LAZY, &st);
  if (worst != CAIRN_EXIT_OK) return worst;
  for (int i = optind; i < argc; i++) { /* each directory, like umount(8); the worst code */
    code = umount_ro(st, argv[i], &uo);
    if (code < 0) code = umount_one(st, argv[i], &uo);
    if (code > worst) worst = code;
  }
  return worst;
}

static int mounts_run(struct cli *c, int argc, char **argv) {
  struct cli_listing l;
  cairn_store *st;
  int code = cli_listing_flags(argc, argv, cmd_mounts.usage, 0, true, &l);
  if (code == CAIRN_EXIT_OK) code = cli_store_open(c, CLI_STORE_MISSING_OK, &st);
  if (code != CAIRN_EXIT_OK) return code;
  struct cli_rows rows = {0};
  int r = st ? cairn_mounts_foreach(st, cli_mount_row, &rows) : 0; /* no store: none */
  if (r == 0 && st) r = cli_upper_rows(st, &rows);                 /* uppers no live mount serves */
  if (r == 0) r = cli_rows_add_names(st, &rows, "image");
  if (r < 0) {
    cli_rows_free(&rows);
    return report_fail(r, "mounts: %s", report_why(st, r));
  }
  static const char *const columns[] = {"dir:DIR", "image:IMAGE", "names:NAMES",
                                        "pid:PID", "state:STATE", "rw:RW"};
  code =
      cli_listing_print(&l, cmd_mounts.usage, &rows, columns, sizeof(columns) / sizeof(columns[0]));
  cli_rows_free(&rows);
  return code;
}

const struct cli_command cmd_mount = {
    .name = "mount",
    .run = mount_run,
    .usage = "cairn mount [-q] [--rw] [--suid] [--dev] [--record-access] [-o OPTS] IMAGE DIR\n"
             "       cairn mount [-q] --rw --resume DIR\n"
             "       cairn mount [-q] --upgrade DIR | --restore",
    .summary = "Serve IMAGE at DIR, read-only unless --rw (a cairnfs daemon; returns once it "
               "answers).\n"
               "Prints the mount point (its real path) on stdout, as podman mount does; warns\n"
               "when DIR holds files (hidden while mounted). The daemon is a supervisor that\n"
               "holds the mount and its pins and restarts its server if it dies, unseen by\n"
               "readers. --upgrade replaces DIR's server by the installed cairnfs; --restore\n"
               "mounts again every recorded mount whose daemon is gone (after a reboot).",
    .options =
        "--rw\twritable: changes go to a private upper layer in the store (cairnfs -o\n"
        "\twritable); the image's layers are never changed\n"
        "--resume\twith --rw: mount DIR again on the upper layer cairn umount kept\n"
        "\tfor it (or a crash left, whose dead mount is detached first), on its image\n"
        "--suid\thonour the image's setuid/setgid bits (default: nosuid)\n"
        "--dev\thonour the image's device nodes (default: nodev)\n"
        "--record-access\trecord the files read first (the first 8192 within 60 s of the\n"
        "\tmount, in order) as IMAGE's access list, written when the mount ends and\n"
        "\treplacing an earlier one; cairn push --format puts them first (cairnfs -o\n"
        "\trecord_access)\n"
        "-o, --options OPTS\tmount options passed to cairnfs -o (see cairnfs --help): suid,\n"
        "\tdev, and libfuse's, such as allow_other; may be given several times\n"
        "--upgrade\treplace the server of DIR's mount by the cairnfs installed now, with\n"
        "\tno failed request (the supervisor's SIGUSR1)\n"
        "--restore\tmount again every stale record's image at its directory (prints\n"
        "\teach; one whose image is gone is reported, forgotten, exit 3); a directory\n"
        "\tmade again since (another inode or owner than recorded) is refused, exit 1\n"
        "-q, --quiet\tprint nothing on success\n",
};

const struct cli_command cmd_umount = {
    .name = "umount",
    .run = umount_run,
    .usage = "cairn umount [-q] [--keep | --discard] [-f | -l] DIR...",
    .summary = "Stop serving DIR (a live or stale mount) and wait until its daemon lets go of\n"
               "its pins. Prints each directory it unmounted (its real path) on stdout, as\n"
               "podman umount does; one not mounted is said on stderr (exit 0). Exit 4 if\n"
               "another mount namespace (a container) still holds it, unless --force. A --rw\n"
               "mount's uncommitted changes, and those a crash left at DIR, are kept (Kept:\n"
               "upper ID (N entries, SIZE); cairn mounts lists them kept, cairn mount --rw\n"
               "--resume DIR takes them back) unless --discard drops them (Dropped: ...); an\n"
               "upper with no change (all committed) is dropped silently.",
    .options = "--discard\tdrop the --rw mount's upper layer, and those kept for DIR\n"
               "--keep\tkeep them (the default)\n"
               "-f, --force\tend the FUSE connection for every namespace that still holds the\n"
               "\tmount (the kernel's abort), saying whom it cut off: their reads fail\n"
               "-l, --lazy\tdetach DIR even while a process uses it (umount -l): cairnfs\n"
               "\tserves those that still do, its image pinned, until they let go (exit 0)\n"
               "-q, --quiet\tprint nothing on success\n",
};

const struct cli_command cmd_mounts = {
    .name = "mounts",
    .run = mounts_run,
    .usage = "cairn mounts [--json | -q | --format TEMPLATE] [--no-trunc]",
    .summary = "List the mounts: directory, image, its names, daemon pid, state, rw.\n"
               "The states: live, restarting, detached, stale.",
    .options = "--json\tone JSON array of every mount\n"
               "-q, --quiet\tprint the directories only\n" CLI_LISTING_OPTIONS_REST,
};
