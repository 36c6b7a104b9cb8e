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
 * umount is idempotent and complete: every step runs whatever the state —
 * unmount while the directory is a cairnfs mount point (lazily if the daemon
 * is gone: ENOTCONN), wait for the recorded daemon to exit (so its pins are
 * released when we return), forget the record. A never-mounted directory is
 * a success. The daemon is never signalled: it serves until the kernel ends
 * its session, which a container's copy of the mount (in the container's
 * mount namespace) keeps open after our unmount. Then umount says which
 * processes' namespaces hold it and exits 4; the mount is detached, and its
 * daemon forgets the record and releases its pins when they let go.
 */
#include "commands.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MOUNT_USAGE                                                                                \
  "cairn mount [--suid] [--dev] IMAGE DIR\n"                                                       \
  "  --suid  honour the image's setuid/setgid bits (default: nosuid)\n"                            \
  "  --dev   honour the image's device nodes (default: nodev)"
#define UMOUNT_USAGE "cairn umount DIR"
#define MOUNTS_USAGE "cairn mounts [--json]"

/* Bounds of the waits below, in steps of WAIT_STEP_US (1 ms). */
#define WAIT_STEP_US 1000
#define ANSWER_STEPS 10000 /* 10 s for a new mount to show up */
#define EXIT_STEPS 3000    /* 3 s for a daemon to exit after its unmount */
#define HOLDERS_STEPS 500  /* look for other namespaces' copies every 0.5 s, */
#define HOLDERS_FIRST 100  /* first after 0.1 s */

static void sleep_step(void) { usleep(WAIT_STEP_US); }

/* The cairnfs binary next to ours, else "cairnfs" for a PATH search. */
static void cairnfs_path(char *out, size_t len) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = '\0';
    snprintf(out, len, "%s/cairnfs", dirname(self));
    if (access(out, X_OK) == 0) return;
  }
  snprintf(out, len, "cairnfs");
}

/* Runs cairnfs (with -o opts unless NULL); its stderr lines "cairnfs: X"
 * are printed as "cairn: X". */
static int run_cairnfs(const char *store_dir, const char *image, const char *dir,
                       const char *opts) {
  char bin[PATH_MAX];
  cairnfs_path(bin, sizeof(bin));
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) return -errno;
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    return -errno;
  }
  if (pid == 0) {
    dup2(p[1], 2);
    char *argv[] = {"cairnfs",   "--store",          (char *)store_dir, (char *)image,
                    (char *)dir, opts ? "-o" : NULL, (char *)opts,      NULL};
    execvp(bin, argv);
    fprintf(stderr, "cairnfs: cannot run %s: %s\n", bin, strerror(errno));
    _exit(127);
  }
  close(p[1]);
  FILE *err = fdopen(p[0], "r");
  char line[4096];
  while (err && fgets(line, sizeof(line), err)) {
    const char *msg = strncmp(line, "cairnfs: ", 9) == 0 ? line + 9 : line;
    fprintf(stderr, "%s: %s", report_prog, msg);
  }
  if (err)
    fclose(err);
  else
    close(p[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -errno;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  fprintf(stderr, "%s: mount: cairnfs died of signal %d\n", report_prog, WTERMSIG(status));
  return 1;
}

int cmd_mount(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"rw", no_argument, NULL, 'w'},
      {"suid", no_argument, NULL, 's'},
      {"dev", no_argument, NULL, 'd'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  bool suid = false, dev = false;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
    case 'w': return report_usage(MOUNT_USAGE, "--rw: writable mounts are not supported yet");
    case 's': suid = true; break;
    case 'd': dev = true; break;
    case 'h': printf("usage: %s\n", MOUNT_USAGE); return 0;
    default: return cli_bad_option(MOUNT_USAGE, argv);
    }
  }
  if (argc - optind != 2) return report_usage(MOUNT_USAGE, "needs an image and a directory");
  const char *image = argv[optind], *dir = argv[optind + 1];
  const char *mount_opts = suid && dev ? "suid,dev" : suid ? "suid" : dev ? "dev" : NULL;
  cairn_store *st = cli_store(c);
  if (!st) return 1;
  cairn_id id;
  int r = cairn_image_resolve(st, image, id);
  if (r < 0) return cli_fail(c, r, image);
  char abs[PATH_MAX];
  r = cairn_mountpoint_resolve(dir, abs, sizeof(abs));
  if (r < 0) return cli_fail(NULL, r, dir);
  int state = cairn_mountpoint_state(abs);
  if (state == CAIRN_MP_LIVE || state == CAIRN_MP_STALE) {
    fprintf(stderr, "%s: %s: already a %s cairnfs mount (hint: cairn umount %s)\n", report_prog, dir,
            state == CAIRN_MP_LIVE ? "live" : "stale", dir);
    return 4;
  }
  int code = run_cairnfs(cairn_store_dir(st), image, abs, mount_opts);
  if (code != 0) return code <= 5 ? code : 1; /* 127: cairnfs not found */
  for (int i = 0; i < ANSWER_STEPS; i++) {
    state = cairn_mountpoint_state(abs);
    if (state == CAIRN_MP_LIVE) return 0;
    if (state < 0 || state == CAIRN_MP_STALE) break;
    sleep_step();
  }
  fprintf(stderr, "%s: %s: cairnfs reported success but the mount does not answer\n", report_prog,
          abs);
  return 1;
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
 * (name is DIR as the user typed it) and returns 4. */
static int await_daemon_exit(const char *name, const struct mount_record *rec) {
  for (int i = 1; i <= EXIT_STEPS; i++) {
    if (!cairn_process_running(rec->pid, "cairnfs")) return 0;
    if (i % HOLDERS_STEPS == HOLDERS_FIRST && rec->dev[0]) {
      char *who = NULL;
      int n = cairn_mount_holders(rec->dev, &who);
      if (n > 0)
        fprintf(stderr, "%s: %s: detached here, still in use by %s\n", report_prog, name, who);
      free(who);
      if (n > 0) return 4;
    }
    sleep_step();
  }
  fprintf(stderr, "%s: %s: detached here, still in use (cairnfs pid %d serves it)\n", report_prog,
          name, (int)rec->pid);
  return 4;
}

int cmd_umount(struct cli *c, int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--help") == 0) {
    printf("usage: %s\n", UMOUNT_USAGE);
    return 0;
  }
  if (argc != 2 || argv[1][0] == '-') return report_usage(UMOUNT_USAGE, "needs one directory");
  const char *name = argv[1];
  char dir[PATH_MAX];
  int r = cairn_mountpoint_resolve(name, dir, sizeof(dir));
  if (r < 0) return cli_fail(NULL, r, name);
  cairn_store *st = cli_store(c);
  if (!st) return 1;
  struct mount_record rec = recorded(st, dir);
  int code = 0;

  /* Several cairnfs mounts may be stacked on dir; each round removes one. */
  for (int round = 0; round < 16; round++) {
    int state = cairn_mountpoint_state(dir);
    if (state == CAIRN_MP_NONE) break;
    if (state == CAIRN_MP_OTHER) {
      fprintf(stderr, "%s: %s: not a cairnfs mount\n", report_prog, name);
      code = 1;
      break;
    }
    r = state < 0 ? state : cairn_mountpoint_unmount(dir, state == CAIRN_MP_STALE);
    if (r == -EBUSY) {
      fprintf(stderr, "%s: %s: busy (a process uses the mount)\n", report_prog, name);
      code = 4;
      break;
    }
    if (r < 0) {
      code = cli_fail(NULL, r, name);
      break;
    }
  }
  if (code == 0 && rec.pid > 0) code = await_daemon_exit(name, &rec);
  if (code == 0) {
    r = cairn_mount_forget(st, dir, rec.pid);
    if (r < 0) code = cli_fail(c, r, name);
  }
  return code;
}

int cmd_mounts(struct cli *c, int argc, char **argv) {
  bool json;
  int code = cli_listing_flags(argc, argv, MOUNTS_USAGE, 0, &json);
  if (code) return code;
  cairn_store *st = cli_store(c);
  if (!st) return 1;
  json_t *rows = json_array();
  int r = rows ? cairn_mounts_foreach(st, cli_mount_row, rows) : -ENOMEM;
  if (r < 0) {
    json_decref(rows);
    return cli_fail(c, r, "mounts");
  }
  if (json) {
    cli_print_json(rows);
  } else {
    static const char *const columns[] = {"dir:DIR", "image:IMAGE", "pid:PID", "state:STATE",
                                          "rw:RW"};
    cli_print_table(rows, columns, sizeof(columns) / sizeof(columns[0]));
  }
  json_decref(rows);
  return 0;
}
