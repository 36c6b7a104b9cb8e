/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-bundle.c — `cairn bundle IMAGE DIR` makes an OCI runtime bundle, as
 * `umoci unpack` does but without unpacking: DIR/rootfs is a cairnfs mount
 * of the image (which pins it while the bundle exists) and DIR/config.json
 * its runtime config, converted by libcairn (cairn_runtime_spec). `cairn
 * bundle --rm DIR` tears it down.
 *
 * Order: the config is converted before anything is mounted (a bad User
 * fails with nothing to undo), the mount is started from the resolved id
 * (the config and the root are of one image even if its name moves), and
 * config.json is renamed into place last, so a bundle with a config.json
 * always has its root served; a failure after the mount unmounts it.
 * --rm is idempotent: it unmounts DIR/rootfs as `cairn umount` does, then
 * removes config.json, rootfs and DIR if nothing else is left in it; a
 * bundle whose root a container still holds stays (exit 4).
 *
 * DIR may be another user's (root making a bundle in a user's directory):
 * DIR is opened once, without following a symlink, and named only through
 * that fd; a rootfs there that is a symlink is refused, never mounted
 * through; config.json is written by cairn_file_put_at (a random name made
 * O_EXCL|O_NOFOLLOW, renamed into place, failing if config.json appeared).
 * rootfs is opened (O_PATH|O_NOFOLLOW|O_DIRECTORY) under that fd and
 * cairnfs mounts through the fd (/proc/self/fd/N): a rootfs swapped for a
 * symlink after the check cannot send root's mount to its target. If
 * rootfs is no longer that directory after the mount, the mount is taken
 * down (under the directory's name then).
 */
#include "commands.h"

#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The last name of the real path real ("." for /), under its parent's fd. */
static const char *bundle_base(const char *real) {
  const char *slash = strrchr(real, '/');
  return slash && slash[1] ? slash + 1 : ".";
}

/* mkdirat that accepts a directory already there, never a symlink to one:
 * DIR may be another user's, who could have planted rootfs -> /anywhere. */
static int mkdirat_exist_ok(int dfd, const char *name) {
  if (mkdirat(dfd, name, 0755) == 0) return 1; /* made */
  struct stat sb;
  if (errno != EEXIST) return -errno;
  if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0) return -errno;
  return S_ISDIR(sb.st_mode) ? 0 : S_ISLNK(sb.st_mode) ? -ELOOP : -ENOTDIR;
}

/* Makes the directories above dir that are missing, as mkdir -p does,
 * each through the fd cairn_path_resolve gives of its parent: a symlink
 * another user could plant on the way is refused as it is for DIR. */
static int mkdir_parents(const char *dir, int depth) {
  char parent[PATH_MAX], real[PATH_MAX];
  if (snprintf(parent, sizeof(parent), "%s", dir) >= (int)sizeof(parent)) return -ENAMETOOLONG;
  size_t n = strlen(parent);
  while (n > 1 && parent[n - 1] == '/') parent[--n] = '\0';
  char *slash = strrchr(parent, '/');
  if (!slash) return 0; /* in the working directory, which exists */
  slash[slash == parent ? 1 : 0] = '\0';
  int pfd = -1;
  int r = cairn_path_resolve(parent, real, sizeof(real), &pfd);
  if (r == -ENOENT && depth < 64) {
    if ((r = mkdir_parents(parent, depth + 1)) < 0) return r;
    r = cairn_path_resolve(parent, real, sizeof(real), &pfd);
  }
  if (r < 0) return r;
  if (mkdirat(pfd, bundle_base(real), 0755) < 0 && errno != EEXIST) r = -errno;
  close(pfd);
  return r;
}

/* Unmounts (as cairn umount does; keep: a --rw upper is kept) the mount
 * on the directory rfd, an O_PATH fd opened before the mount, names,
 * under the name it has now; nothing if it has none. */
static void unmount_checked(cairn_store *st, int rfd, bool keep) {
  char fd_path[64], now[PATH_MAX];
  snprintf(fd_path, sizeof(fd_path), "/proc/self/fd/%d", rfd);
  ssize_t n = readlink(fd_path, now, sizeof(now) - 1);
  if (n <= 0 || now[0] != '/') return;
  now[n] = '\0';
  if (cairn_mountpoint_state(now) != CAIRN_MP_NONE) cli_umount_one(st, now, true, !keep);
}

/* True if dfd/name is a directory (not a symlink) with a mount on it. */
static bool mounted_at(int dfd, const char *name) {
  struct stat dir, sb;
  return fstat(dfd, &dir) == 0 && fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISDIR(sb.st_mode) && sb.st_dev != dir.st_dev;
}

struct bundle_args {
  cairn_spec_opts spec;
  const char **env;
  bool quiet;
  bool record_access; /* --record-access: cairnfs -o record_access */
};

static int bundle_create(cairn_store *st, const char *image, const char *dir,
                         struct bundle_args *a) {
  cairn_id id;
  int r = cairn_image_resolve(st, image, id);
  if (r < 0) return report_fail(r, "bundle: %s: %s", image, report_why(st, r));
  cairn_autofree char *json = NULL;
  r = cairn_runtime_spec(st, id, &a->spec, &json);
  if (r < 0) return report_fail(r, "bundle: %s: %s", image, report_why(st, r));

  /* From here on DIR is only named through fds: DIR may belong to another
   * user, so nothing in it is followed if it is a symlink (cmd-bundle.c's
   * rootfs, cairn_file_put_at's config.json), and DIR itself is resolved
   * as a path another user may control (cairn_path_resolve). */
  char real[PATH_MAX], abs_rootfs[PATH_MAX];
  int pfd = -1;
  r = cairn_path_resolve(dir, real, sizeof(real), &pfd);
  if (r == -ENOENT && (r = mkdir_parents(dir, 0)) == 0) /* DIR's parents are made too */
    r = cairn_path_resolve(dir, real, sizeof(real), &pfd);
  cairn_autoclose int parent = pfd;
  if (r < 0) return report_fail(r, "bundle: %s: %s", dir, cairn_path_why(r));
  const char *base = bundle_base(real);
  int made_dir = mkdirat_exist_ok(parent, base);
  if (made_dir == -ELOOP)
    return report_fail(-EPERM, "bundle: %s: a symlink, not a directory: refused", real);
  if (made_dir < 0) return report_fail(made_dir, "bundle: %s: %s", dir, strerror(-made_dir));
  cairn_autoclose int dfd = openat(parent, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return report_fail(-errno, "bundle: %s: %s", dir, strerror(errno));
  if (snprintf(abs_rootfs, sizeof(abs_rootfs), "%s/rootfs", real) >= (int)sizeof(abs_rootfs))
    return report_fail(-ENAMETOOLONG, "bundle: %s: %s", dir, strerror(ENAMETOOLONG));
  struct stat sb;
  if (fstatat(dfd, "config.json", &sb, AT_SYMLINK_NOFOLLOW) == 0)
    return report_fail(-EBUSY, "bundle: %s: already a bundle (hint: cairn bundle --rm %s)", dir,
                       dir);
  int made_rootfs = mkdirat_exist_ok(dfd, "rootfs");
  if (made_rootfs == -ELOOP)
    return report_fail(-EPERM, "bundle: %s: a symlink, not a directory: refused", abs_rootfs);
  if (made_rootfs < 0)
    return report_fail(made_rootfs, "bundle: %s: %s", abs_rootfs, strerror(-made_rootfs));
  /* The directory checked is the one mounted on: cairnfs mounts through
   * this fd of it, whatever rootfs names by then. */
  cairn_autoclose int rfd = openat(dfd, "rootfs", O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0) {
    int err = errno;
    if (made_rootfs) unlinkat(dfd, "rootfs", AT_REMOVEDIR);
    if (err == ELOOP || err == ENOTDIR)
      return report_fail(-EPERM, "bundle: %s: a symlink, not a directory: refused", abs_rootfs);
    return report_fail(-err, "bundle: %s: %s", abs_rootfs, strerror(err));
  }
  int state = cairn_mountpoint_state(abs_rootfs);
  if (state != CAIRN_MP_NONE)
    return report_fail(-EBUSY, "bundle: %s: already mounted (hint: cairn bundle --rm %s)",
                       abs_rootfs, dir);
  const char *mopts = a->spec.rw ? (a->record_access ? "writable,record_access" : "writable")
                                 : (a->record_access ? "record_access" : NULL);
  int code = cli_mount_start_at(st, id, abs_rootfs, rfd, mopts);
  if (code != CAIRN_EXIT_OK) {
    unmount_checked(st, rfd, true); /* mounted, but renamed before it answered */
  } else if (!mounted_at(dfd, "rootfs")) {
    /* rootfs was renamed or swapped for a symlink while it was being
     * mounted: the mount is on the directory checked, wherever it is now;
     * take it down (keeping a --rw upper). */
    code =
        report_fail(-EPERM, "bundle: %s: replaced while it was being mounted: refused", abs_rootfs);
    unmount_checked(st, rfd, true);
  } else {
    cairn_autofree char *text = NULL;
    r = asprintf(&text, "%s\n", json) < 0 ? (text = NULL, -ENOMEM) : 0;
    if (r == 0)
      r = cairn_file_put_at(dfd, "config.json", -1, text, strlen(text), 0644, CAIRN_PUT_NOREPLACE);
    if (r == 0) {
      if (!a->quiet) printf("%s\n", real);
      return CAIRN_EXIT_OK;
    }
    code = report_fail(r, "bundle: %s/config.json: %s", real, strerror(-r));
    cli_umount_one(st, abs_rootfs, true, true); /* just made: nobody wrote to it */
  }
  if (made_rootfs) unlinkat(dfd, "rootfs", AT_REMOVEDIR);
  if (made_dir) unlinkat(parent, base, AT_REMOVEDIR);
  return code;
}

/* Removes what a bundle left in dir (after its root is unmounted). */
static int bundle_remove(cairn_store *st, const char *dir, bool quiet, bool discard) {
  char real[PATH_MAX], rootfs[PATH_MAX]; /* named as mount and bundle name it: real paths */
  int pfd = -1;
  int r = cairn_path_resolve(dir, real, sizeof(real), &pfd);
  cairn_autoclose int parent = pfd;
  cairn_autoclose int dfd = -1;
  if (r == 0) {
    dfd = openat(parent, bundle_base(real), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    r = dfd < 0 ? -errno : 0;
  }
  if (r == -ENOENT) {
    char msg[PATH_MAX + 32];
    snprintf(msg, sizeof(msg), "bundle: %s: no bundle", dir);
    report_notice(msg);
    return CAIRN_EXIT_OK;
  }
  if (r == -ELOOP) /* a symlink put at DIR since it was resolved */
    return report_fail(-EPERM, "bundle: %s: a symlink, not a directory: refused", dir);
  if (r < 0) return report_fail(r, "bundle: %s: %s", dir, cairn_path_why(r));
  if (snprintf(rootfs, sizeof(rootfs), "%s/rootfs", real) >= (int)sizeof(rootfs))
    return report_fail(-ENAMETOOLONG, "bundle: %s: %s", dir, strerror(ENAMETOOLONG));
  struct stat sb;
  if (fstatat(dfd, "rootfs", &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(sb.st_mode))
    return report_fail(-EPERM, "bundle: %s: a symlink, not a directory: refused", rootfs);
  bool none = fstatat(dfd, "rootfs", &sb, AT_SYMLINK_NOFOLLOW) < 0 &&
              fstatat(dfd, "config.json", &sb, AT_SYMLINK_NOFOLLOW) < 0;
  int code = cli_umount_one(st, rootfs, quiet, discard); /* a --rw one's Kept:/Dropped: line */
  if (code != CAIRN_EXIT_OK) return code;                /* still served: the bundle stays whole */
  if (none) { /* removed already, or never a bundle: said as for a DIR that is gone */
    char msg[PATH_MAX + 32];
    snprintf(msg, sizeof(msg), "bundle: %s: no bundle", dir);
    report_notice(msg);
    return CAIRN_EXIT_OK;
  }
  if (unlinkat(dfd, "config.json", 0) < 0 && errno != ENOENT)
    return report_fail(-errno, "bundle: %s/config.json: %s", real, strerror(errno));
  if (unlinkat(dfd, "rootfs", AT_REMOVEDIR) < 0 && errno != ENOENT)
    return report_fail(-errno, "bundle: %s: %s", rootfs, strerror(errno));
  if (unlinkat(parent, bundle_base(real), AT_REMOVEDIR) < 0 && errno != ENOTEMPTY &&
      errno != EEXIST && errno != ENOENT && errno != EBUSY)
    return report_fail(-errno, "bundle: %s: %s", dir, strerror(errno));
  if (!quiet) printf("%s\n", real);
  return CAIRN_EXIT_OK;
}

static int bundle_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"rm", no_argument, NULL, 'R'},
      {"discard", no_argument, NULL, 'D'},
      {"rw", no_argument, NULL, 'w'},
      {"read-only", no_argument, NULL, 'r'},
      {"env", required_argument, NULL, 'e'},
      {"user", required_argument, NULL, 'u'},
      {"entrypoint", required_argument, NULL, 'E'},
      {"terminal", no_argument, NULL, 't'},
      {"quiet", no_argument, NULL, 'q'},
      {"record-access", no_argument, NULL, 'A'},
      {NULL, 0, NULL, 0},
  };
  /* The command after "--" is not ours to parse: getopt sees what is before. */
  int end = 1;
  while (end < argc && strcmp(argv[end], "--") != 0) end++;
  cairn_autofree const char **env = calloc((size_t)argc, sizeof(*env));
  if (!env) return report_fail(-ENOMEM, "bundle: %s", strerror(ENOMEM));
  struct bundle_args a = {.env = env};
  bool rm = false, read_only = false, discard = false;
  int o;
  optind = 1;
  while ((o = getopt_long(end, argv, ":qte:u:", opts, NULL)) != -1) {
    switch (o) {
    case 'R': rm = true; break;
    case 'D': discard = true; break;
    case 'w': a.spec.rw = true; break;
    case 'r': read_only = true; break;
    case 'e':
      if (!strchr(optarg, '=') || *optarg == '=')
        return report_usage(cmd_bundle.usage, "bundle: --env: %s: not KEY=VALUE", optarg);
      env[a.spec.n_env++] = optarg;
      break;
    case 'u': a.spec.user = optarg; break;
    case 'E': a.spec.entrypoint = optarg; break;
    case 't': a.spec.terminal = true; break;
    case 'q': a.quiet = true; break;
    case 'A': a.record_access = true; break;
    default: return cli_bad_option(cmd_bundle.usage, argv, o, opts);
    }
  }
  a.spec.env = env;
  int operands = end - optind;
  if (discard && !rm) return report_usage(cmd_bundle.usage, "bundle: --discard: needs --rm");
  if (rm) {
    if (end < argc || a.spec.rw || read_only || a.spec.n_env || a.spec.user || a.spec.entrypoint ||
        a.spec.terminal || a.record_access)
      return report_usage(cmd_bundle.usage, "bundle: --rm takes directories only");
    if (operands < 1) return report_usage(cmd_bundle.usage, "bundle: --rm: needs a directory");
    cairn_store *st;
    int worst = cli_store(c, &st);
    for (int i = optind; worst == CAIRN_EXIT_OK && i < end; i++) {
      int code = bundle_remove(st, argv[i], a.quiet, discard);
      if (code > worst) worst = code;
    }
    return worst;
  }
  if (a.spec.rw && read_only)
    return report_usage(cmd_bundle.usage, "bundle: --rw and --read-only: choose one");
  if (operands != 2)
    return report_usage(cmd_bundle.usage, "bundle: needs an image and a directory");
  if (end < argc) {
    a.spec.args = (const char *const *)argv + end + 1;
    a.spec.n_args = (size_t)(argc - end - 1);
  }
  cairn_store *st;
  int code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  return bundle_create(st, argv[optind], argv[optind + 1], &a);
}

const struct cli_command cmd_bundle = {
    .name = "bundle",
    .run = bundle_run,
    .usage = "cairn bundle [OPTIONS] IMAGE DIR [-- COMMAND [ARG...]]\n"
             "       cairn bundle --rm [-q] [--discard] DIR...",
    .summary = "Make DIR an OCI runtime bundle of IMAGE, for crun or runc, without unpacking.\n"
               "DIR (and its missing parents) is made if need be.\n"
               "DIR/rootfs is a cairnfs mount of it (pinned while the bundle exists),\n"
               "DIR/config.json its runtime config (Entrypoint + Cmd,\n"
               "Env, WorkingDir, User resolved through the image's /etc/passwd and /etc/group,\n"
               "Labels, Volumes, StopSignal; crun spec's namespaces, mounts and capabilities),\n"
               "ready for crun run --bundle DIR or runc run --bundle DIR. A COMMAND after --\n"
               "replaces the image's Cmd (an image with neither Entrypoint nor Cmd needs one).\n"
               "Prints DIR (its real path). --rm tears it down.",
    .options =
        "--rm\tunmount DIR/rootfs and remove config.json, rootfs and DIR (if then\n"
        "\tempty); a directory that is no bundle is fine (exit 0, \"no bundle\").\n"
        "\tA --rw root's changes are kept, as by cairn umount (Kept: upper ...)\n"
        "--discard\twith --rm: drop a --rw root's changes (Dropped: upper ...)\n"
        "-e, --env KEY=VALUE\tset KEY in process.env, replacing the image's; may be repeated\n"
        "-u, --user USER[:GROUP]\trun as USER instead of the image's User (names resolved in the "
        "image)\n"
        "--entrypoint PROG\treplace the image's Entrypoint (its Cmd is dropped unless a COMMAND\n"
        "\tis given)\n"
        "-t, --terminal\tprocess.terminal true (and TERM=xterm unless the image sets it)\n"
        "--read-only\ta read-only root (root.readonly, the default)\n"
        "--rw\ta writable root: rootfs is a cairn mount --rw (its changes in a private\n"
        "\tupper layer, kept by --rm unless --discard), root.readonly false\n"
        "--record-access\trecord the files the container reads first as IMAGE's access\n"
        "\tlist (cairn mount --record-access), written at --rm\n"
        "-q, --quiet\tprint nothing on success\n",
};
