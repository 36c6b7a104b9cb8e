/*
 * cmd-mount.c — `cairn mount`, `cairn umount`, `cairn mounts`: start, stop
 * and list cairnfs daemons.
 *
 * Directories are resolved by cairn_mountpoint_resolve, as cairnfs resolves
 * them: a symlink to a mountpoint names that mountpoint.
 *
 * mount runs cairnfs (next to this binary, else from PATH), which forks its
 * daemon and exits only once the mount is up or has failed; its error is
 * passed on with our prefix and its exit code. We then check the directory
 * really is a cairnfs mount that answers.
 *
 * umount DIR... is idempotent and complete: every step runs whatever the
 * state — unmount while the directory is a cairnfs mount point (lazily if
 * the daemon is gone: ENOTCONN), wait for the recorded daemon to exit (so
 * its pins are released when we return), forget the record. A directory
 * that is not mounted (or does not exist) is a success, said on stderr
 * ("umount: DIR: not mounted"), as for a teardown script that runs twice.
 * Each directory is unmounted in turn, like umount(8); the exit code is the
 * worst. The daemon is never signalled: it serves until the kernel ends its
 * session, which a container's copy of the mount (in the container's mount
 * namespace) keeps open after our unmount. Then umount says which
 * processes' namespaces hold it and exits 4; the mount is detached, and its
 * daemon forgets the record and releases its pins when they let go.
 */
#include "commands.h"
#include "upper.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Bounds of the waits below, in steps of WAIT_STEP_US (1 ms). */
#define WAIT_STEP_US 1000
#define ANSWER_STEPS 10000 /* 10 s for a new mount to show up */
#define EXIT_STEPS 3000    /* 3 s for a daemon to exit after its unmount */
#define HOLDERS_STEPS 500  /* look for other namespaces' copies every 0.5 s, */
#define HOLDERS_FIRST 100  /* first after 0.1 s */

static void sleep_step(void) { usleep(WAIT_STEP_US); }

/* Passes on what cairnfs says on stderr (read from fd, which it closes):
 * its lines "cairnfs: X" as "cairn: X". */
static void relay_cairnfs(int fd) {
  _cleanup_fclose_ FILE *err = fdopen(fd, "r");
  if (!err) {
    close(fd);
    return;
  }
  _cleanup_free_ char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  while ((n = getline(&line, &cap, err)) > 0) {
    if (line[n - 1] == '\n') line[n - 1] = '\0';
    report_notice(strncmp(line, "cairnfs: ", 9) == 0 ? line + 9 : line);
  }
}

/* Runs cairnfs (with -o opts unless NULL), passing on what it says, and
 * returns its exit code, or that of a failure to run it (reported). */
static int run_cairnfs(const char *store_dir, const char *image, const char *dir,
                       const char *opts) {
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
    char *argv[] = {"cairnfs",   "--store",          (char *)store_dir, (char *)image,
                    (char *)dir, opts ? "-o" : NULL, (char *)opts,      NULL};
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
  _cleanup_closedir_ DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) return true;
  return false;
}

static int mount_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"rw", no_argument, NULL, 'w'},
      {"resume", no_argument, NULL, 'R'},
      {"suid", no_argument, NULL, 's'},
      {"dev", no_argument, NULL, 'd'},
      {"quiet", no_argument, NULL, 'q'},
      {"options", required_argument, NULL, 'o'},
      {NULL, 0, NULL, 0},
  };
  bool quiet = false, resume = false;
  /* --suid, --dev and every -o, joined as cairnfs's one -o */
  _cleanup_free_ char *mount_opts = NULL;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":qo:", opts, NULL)) != -1) {
    const char *add = o == 's'   ? "suid"
                      : o == 'd' ? "dev"
                      : o == 'w' ? "writable"
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
    case 'R': resume = true; break;
    default: return cli_bad_option(cmd_mount.usage, argv, o, opts);
    }
  }
  if (resume && (argc - optind != 1 || !mount_opts || !strstr(mount_opts, "writable")))
    return report_usage(cmd_mount.usage, "mount: --resume: needs --rw and only a directory");
  if (!resume && argc - optind != 2)
    return report_usage(cmd_mount.usage, "mount: needs an image and a directory");
  const char *image = resume ? NULL : argv[optind], *dir = argv[argc - 1];
  cairn_store *st;
  int code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  cairn_id id;
  char abs[PATH_MAX];
  int r = cairn_mountpoint_resolve(dir, abs, sizeof(abs));
  if (r < 0) return report_fail(r, "mount: %s: %s", dir, strerror(-r));
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
  if (state == CAIRN_MP_LIVE || state == CAIRN_MP_STALE)
    return report_fail(-EBUSY, "mount: %s: already a %s cairnfs mount (hint: cairn umount %s)", dir,
                       state == CAIRN_MP_LIVE ? "live" : "stale", dir);
  if (dir_has_entries(abs)) {
    char warning[PATH_MAX + 96];
    snprintf(warning, sizeof(warning),
             "mount: %s: warning: not empty; what it holds is hidden while mounted", dir);
    report_notice(warning); /* as mount(8) allows it, not a failure */
  }
  code = run_cairnfs(cairn_store_dir(st), image, abs, mount_opts);
  if (code != CAIRN_EXIT_OK) return code;
  for (int i = 0; i < ANSWER_STEPS; i++) {
    state = cairn_mountpoint_state(abs);
    if (state == CAIRN_MP_LIVE) {
      if (!quiet) printf("%s\n", abs); /* as podman mount prints where */
      return CAIRN_EXIT_OK;
    }
    if (state < 0 || state == CAIRN_MP_STALE) break;
    sleep_step();
  }
  return report_fail(-ENOTCONN, "mount: %s: cairnfs reported success but the mount does not answer",
                     abs);
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

/* Waits (bounded) for the daemon to exit after our unmount. While other
 * mount namespaces still hold the mount it serves on: says who holds it
 * (name is DIR as the user typed it) and returns CAIRN_EXIT_BUSY. */
static int await_daemon_exit(const char *name, const struct mount_record *rec) {
  for (int i = 1; i <= EXIT_STEPS; i++) {
    if (!cairn_process_running(rec->pid, "cairnfs")) return CAIRN_EXIT_OK;
    if (i % HOLDERS_STEPS == HOLDERS_FIRST && rec->dev[0]) {
      _cleanup_free_ char *who = NULL;
      if (cairn_mount_holders(rec->dev, &who) > 0)
        return report_fail(-EBUSY, "umount: %s: detached here, still in use by %s", name, who);
    }
    sleep_step();
  }
  return report_fail(-EBUSY, "umount: %s: detached here, still in use (cairnfs pid %d serves it)",
                     name, (int)rec->pid);
}

/* Says, on stderr, that umount found nothing mounted on name. */
static void say_not_mounted(const char *name) {
  char msg[PATH_MAX + 32];
  snprintf(msg, sizeof(msg), "umount: %s: not mounted", name);
  report_notice(msg);
}

/* Unmounts the directory name: see the top of the file. One that is not
 * mounted (or does not exist) is a success, said on stderr; one unmounted
 * is named on stdout unless quiet. */
static int umount_one(cairn_store *st, const char *name, bool quiet, bool keep) {
  char dir[PATH_MAX];
  int r = cairn_mountpoint_resolve(name, dir, sizeof(dir));
  if (r == -ENOENT || r == -ENOTDIR) {
    say_not_mounted(name);
    return CAIRN_EXIT_OK;
  }
  if (r < 0) return report_fail(r, "umount: %s: %s", name, strerror(-r));
  struct mount_record rec = recorded(st, dir);
  int code = CAIRN_EXIT_OK;
  bool was_mounted = false;
  struct cli_upper up; /* a --rw mount's changes: kept, or dropped by its daemon */
  if (cli_upper_of_dir(st, dir, true, &up) < 0) up.found = false;
  if (up.found && keep && (r = cairn_upper_keep(st, up.id)) < 0)
    return report_fail(r, "umount: %s: --keep: %s", name, report_why(st, r));

  /* Several cairnfs mounts may be stacked on dir; each round removes one. */
  for (int round = 0; round < 16; round++) {
    int state = cairn_mountpoint_state(dir);
    if (state == CAIRN_MP_NONE) break;
    was_mounted = true;
    if (state == CAIRN_MP_OTHER) {
      code = report_fail(-EMEDIUMTYPE, "umount: %s: not a cairnfs mount", name);
      break;
    }
    r = state < 0 ? state : cairn_mountpoint_unmount(dir, state == CAIRN_MP_STALE);
    if (r == -EBUSY) {
      code = report_fail(r, "umount: %s: busy (a process uses the mount)", name);
      break;
    }
    if (r < 0) {
      code = report_fail(r, "umount: %s: %s", name, strerror(-r));
      break;
    }
  }
  if (code == CAIRN_EXIT_OK && rec.pid > 0) code = await_daemon_exit(name, &rec);
  if (code == CAIRN_EXIT_OK) {
    r = cairn_mount_forget(st, dir, rec.pid);
    if (r < 0) code = report_fail(r, "umount: %s: %s", name, report_why(st, r));
  }
  if (code == CAIRN_EXIT_OK && !was_mounted) say_not_mounted(name);
  if (code == CAIRN_EXIT_OK && up.found && !keep) cairn_upper_drop(st, up.id); /* its files */
  if (code == CAIRN_EXIT_OK && was_mounted && up.found && !quiet) cli_upper_say(&up, keep, dir);
  if (code == CAIRN_EXIT_OK && was_mounted && !quiet) printf("%s\n", name);
  return code;
}

static int umount_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"quiet", no_argument, NULL, 'q'}, {"keep", no_argument, NULL, 'k'}, {0}};
  bool quiet = false, keep = false;
  int code, o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":q", opts, NULL)) != -1) {
    if (o == 'q')
      quiet = true;
    else if (o == 'k')
      keep = true;
    else
      return cli_bad_option(cmd_umount.usage, argv, o, opts);
  }
  if (optind == argc) return report_usage(cmd_umount.usage, "umount: needs a directory");
  cairn_store *st;
  int worst = cli_store(c, &st);
  if (worst != CAIRN_EXIT_OK) return worst;
  for (int i = optind; i < argc; i++) { /* each directory, like umount(8); the worst code */
    code = umount_one(st, argv[i], quiet, keep);
    if (code > worst) worst = code;
  }
  return worst;
}

static int mounts_run(struct cli *c, int argc, char **argv) {
  struct cli_listing l;
  cairn_store *st;
  int code = cli_listing_flags(argc, argv, cmd_mounts.usage, 0, true, &l);
  if (code == CAIRN_EXIT_OK) code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  json_t *rows = json_array();
  int r = rows ? cairn_mounts_foreach(st, cli_mount_row, rows) : -ENOMEM;
  if (r == 0) r = cli_upper_rows(st, rows); /* uppers no live mount serves */
  if (r == 0) r = cli_rows_add_names(st, rows, "image");
  if (r < 0) {
    json_decref(rows);
    return report_fail(r, "mounts: %s", report_why(st, r));
  }
  static const char *const columns[] = {"dir:DIR", "image:IMAGE", "names:NAMES",
                                        "pid:PID", "state:STATE", "rw:RW"};
  code =
      cli_listing_print(&l, cmd_mounts.usage, rows, columns, sizeof(columns) / sizeof(columns[0]));
  json_decref(rows);
  return code;
}

const struct cli_command cmd_mount = {
    .name = "mount",
    .run = mount_run,
    .usage = "cairn mount [-q] [--rw] [--suid] [--dev] [-o OPTS] IMAGE DIR\n"
             "       cairn mount [-q] --rw --resume DIR",
    .summary = "Serve IMAGE at DIR, read-only unless --rw (starts a cairnfs daemon, returns once "
               "it answers).\n"
               "Prints the mount point (its real path) on stdout, as podman mount does; warns\n"
               "when DIR holds files (hidden while mounted).",
    .options =
        "--rw\twritable: changes go to a private upper layer in the store (cairnfs -o\n"
        "\twritable); the image's layers are never changed\n"
        "--resume\twith --rw: mount DIR again on the upper layer cairn umount --keep kept\n"
        "\tfor it (or a crash left), on its image\n"
        "--suid\thonour the image's setuid/setgid bits (default: nosuid)\n"
        "--dev\thonour the image's device nodes (default: nodev)\n"
        "-o, --options OPTS\tmount options passed to cairnfs -o (see cairnfs --help): suid,\n"
        "\tdev, and libfuse's, such as allow_other; may be given several times\n"
        "-q, --quiet\tprint nothing on success\n",
};

const struct cli_command cmd_umount = {
    .name = "umount",
    .run = umount_run,
    .usage = "cairn umount [-q] [--keep] DIR...",
    .summary = "Stop serving DIR (a live or stale mount) and wait for its daemon to exit.\n"
               "Prints each directory it unmounted on stdout, as podman umount does; one not\n"
               "mounted is said on stderr (exit 0). Exit 4 if another mount namespace (a\n"
               "container) still holds it. A --rw mount's changes are dropped, saying how\n"
               "many (Dropped: upper ID (N entries, SIZE)), unless --keep.",
    .options = "--keep\tkeep a --rw mount's upper layer for cairn mount --rw --resume DIR\n"
               "-q, --quiet\tprint nothing on success\n",
};

const struct cli_command cmd_mounts = {
    .name = "mounts",
    .run = mounts_run,
    .usage = "cairn mounts [--json | -q | --format TEMPLATE] [--no-trunc]",
    .summary = "List the mounts: directory, image, its names, daemon pid, state (live, detached,\n"
               "stale), rw.",
    .options = "--json\tone JSON array of every mount\n" CLI_LISTING_OPTIONS,
};
