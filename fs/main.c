/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c — cairnfs: serve one image of a cairn store as a FUSE mount,
 * read-only or writable (-o writable: a private upper layer).
 *
 *   cairnfs [-f] [-d] [-o OPT[,OPT...]] [--store DIR] IMAGE DIR
 *
 * Also runs as `mount -t fuse.cairnfs IMAGE DIR` (mount.fuse3 calls
 * `cairnfs IMAGE DIR -o OPTS`; the store may come as -o store=DIR).
 * Root uses a store another user owns only with --trust-store (-o
 * trust_store), as cairn.
 *
 * This file parses the command line and forks (daemon.c; unless -f):
 * the parent only waits for the verdict, so it exits 0 once the mount
 * answers, or prints the error and exits with its code; the child is the
 * mount's supervisor (supervisor.c), which holds the mount, its /dev/fuse
 * connection and its pins for the mount's whole life and
 * runs the server (conn.c, `cairnfs --serve`, an internal mode) as its
 * child, restarting it if it dies: a crash or an upgrade of the server is
 * invisible to readers.
 *
 * The session outlives our mountpoint: a container runtime copies the
 * mount into each container's mount namespace, and those copies go on
 * reading from us after the host's view is unmounted. So the kernel alone
 * says when serving ends (/dev/fuse answers ENODEV once the last mount of
 * the session is gone), and SIGTERM/SIGINT/SIGHUP to the supervisor only
 * detach the host's view (umount2 MNT_DETACH of DIR, if DIR is still our
 * mount): with nobody else using the mount that ends the session at once,
 * otherwise we serve the others until they let go.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE                                                                                      \
  "cairnfs [-f] [-d] [-o OPT[,OPT...]] [--store DIR] IMAGE DIR\n"                                  \
  "cairnfs --als [-f] [-d] [--store DIR] PATH   (podman's Additional Layer Store)\n"               \
  "  -f            stay in the foreground\n"                                                       \
  "  -d            debug output (implies -f)\n"                                                    \
  "  -o store=DIR  the cairn store (also --store DIR); default $CAIRN_STORE, else\n"               \
  "                cairn.conf's store, else /var/lib/cairn for root, else\n"                       \
  "                ${XDG_DATA_HOME:-~/.local/share}/cairn\n"                                       \
  "  --trust-store as root, use a store another user owns (also -o trust_store)\n"                 \
  "  -o suid       honour the image's setuid/setgid bits (default nosuid)\n"                       \
  "  -o dev        honour the image's device nodes (default nodev)\n"                              \
  "  -o passthrough\n"                                                                             \
  "                FUSE passthrough (kernel 6.9+, root): the kernel reads an open\n"               \
  "                file from its blob; faster big files, dearer opens (see cairnfs(8))\n"          \
  "  -o OPT        other options are passed to libfuse/mount\n"                                    \
  "  -h, --help    show this help and exit\n"                                                      \
  "  -V, --version print the version and exit (also: cairnfs version)\n"                           \
  "  -o writable   a writable mount: changes go to a private upper layer in\n"                     \
  "                the store (cairn mount --rw); the image is never changed\n"                     \
  "  -o upper=ID   writable, on the kept upper layer ID (cairn mount --resume)\n"                  \
  "  -o record_access\n"                                                                           \
  "                record the files read first (the first 8192 within 60 s) as\n"                  \
  "                the image's access list, for cairn push --format (at unmount)\n"                \
  "The mount is read-only unless -o writable; -o rw and -o ro are accepted\n"                      \
  "and ignored (mount(8) passes rw to every helper)."

/* Splits one -o argument: store=, ro, rw, [no]suid, [no]dev and
 * [no]passthrough are ours;
 * the rest is libfuse's.
 * mount(8) passes "rw" to every helper unless told "ro", so "rw" cannot
 * mean "writable upper layer" here and is ignored: -o writable asks for
 * one. */
static int take_mount_opts(struct cairnfs_options *o, const char *arg) {
  while (*arg) {
    size_t len = strcspn(arg, ",");
    bool rw_or_ro = len == 2 && (strncmp(arg, "rw", 2) == 0 || strncmp(arg, "ro", 2) == 0);
    bool no = len > 2 && strncmp(arg, "no", 2) == 0;
    const char *flag = no ? arg + 2 : arg;
    size_t flag_len = no ? len - 2 : len;
    if (flag_len == 4 && strncmp(flag, "suid", 4) == 0) {
      o->suid = !no;
    } else if (flag_len == 3 && strncmp(flag, "dev", 3) == 0) {
      o->dev = !no;
    } else if (flag_len == 11 && strncmp(flag, "passthrough", 11) == 0) {
      o->no_passthrough = no; /* nopassthrough is the default: see cairnfs(8) */
    } else if (len == 13 && strncmp(arg, "record_access", 13) == 0) {
      o->record_access = true;
    } else if (len == 11 && strncmp(arg, "trust_store", 11) == 0) {
      o->trust_store = true;
    } else if (len == 8 && strncmp(arg, "writable", 8) == 0) {
      o->writable = true;
    } else if (len > 6 && strncmp(arg, "upper=", 6) == 0) {
      free(o->upper);
      if (!(o->upper = strndup(arg + 6, len - 6))) return -ENOMEM;
      o->writable = true;
    } else if (len > 6 && strncmp(arg, "store=", 6) == 0) {
      free(o->store);
      o->store = strndup(arg + 6, len - 6);
      if (!o->store) return -ENOMEM;
    } else if (len && !rw_or_ro) {
      if (cairnfs_opts_append(&o->fuse_opts, arg, len) < 0) return -ENOMEM;
    }
    arg += len;
    if (*arg == ',') arg++;
  }
  return 0;
}

/* Sets o->store to a copy of dir. */
static int take_store(struct cairnfs_options *o, const char *dir) {
  free(o->store);
  o->store = strdup(dir);
  return o->store ? 0 : -ENOMEM;
}

/* Returns CAIRN_EXIT_OK, or the exit code of an error it reported. */
static int parse_args(int argc, char **argv, struct cairnfs_options *o) {
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
    } else if (strcmp(a, "--trust-store") == 0) {
      o->trust_store = true;
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

/* What parse_args allocated, freed when main's options go out of scope. */
static void options_free(struct cairnfs_options *o) {
  free(o->fuse_opts);
  free(o->store);
  free(o->upper);
}

int main(int argc, char **argv) {
  report_prog = "cairnfs";
  if (argc > 1 && strcmp(argv[1], CAIRNFS_SERVE_ARG) == 0) return cairnfs_server_main(argc, argv);
  if (argc > 1 && strcmp(argv[1], "--als") == 0) return cairnfs_als_main(argc - 1, argv + 1);
  __attribute__((cleanup(options_free))) struct cairnfs_options o = {.no_passthrough = true};
  int code = parse_args(argc, argv, &o);
  if (code != CAIRN_EXIT_OK) return code;
  /* A DIR of /proc/self/fd/N: the supervisor mounts through fd N; the
   * server it runs does not inherit it. */
  if (cairnfs_dir_is_fd(o.dir)) fcntl(atoi(o.dir + strlen("/proc/self/fd/")), F_SETFD, FD_CLOEXEC);
  if (!o.foreground && !cairnfs_daemonize(&code)) return code; /* the parent's verdict */
  return cairnfs_supervise(&o);
}
