/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-pull.c — `cairn pull SOURCE [NAME[:TAG]]`: parses options, calls
 * cairn_pull, and shows its progress (progress.h), a line per layer: on a
 * terminal redrawn (waiting, fetching and storing with bar, bytes, rate and
 * time left; reused, or downloaded in its final time), otherwise one line
 * per layer as it finishes; --quiet shows none. The image id goes to
 * stdout. After a --lazy pull that left files to fetch, it starts `cairn
 * fill IMAGE` in the background (its own session, its output to
 * STORE/tmp/fill-ID.log) and returns once that fill holds the image's
 * pins, unless --no-fill.
 */
#include "commands.h"

#include "progress_bar.h"
#include "self.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PULL_USAGE                                                                                 \
  "cairn pull [--platform OS/ARCH[/VARIANT]] [--creds USER[:PASS]] [--insecure] [--jobs N]\n"      \
  "                  [--cert-dir DIR] [--retries N] [--lazy [--no-fill]] [-q] [--no-progress]\n"   \
  "                  SOURCE [NAME[:TAG]]"

static void on_progress(const cairn_pull_layer *layers, size_t n, void *display) {
  static const struct progress_words words = {"fetching", "storing", "reused (already stored)",
                                              "downloaded"};
  progress_layers(display, layers, n, &words);
}

static void on_log(const char *msg, void *display) { progress_notice(display, msg); }

/* How long the pull waits for its background fill to hold its pins. */
#define FILL_START_MS 30000

/* Starts `cairn fill IMAGE` (this cairn: the binary now at its path, the
 * upgraded one once an upgrade replaced it) in a session of its own, its
 * stdin and stdout /dev/null, its stderr the log, and waits until it holds
 * the image's pins (it writes a byte to the pipe CAIRN_FILL_READY_FD
 * names): 0 and *pid, or a negative errno. The pull's --creds
 * "USER:PASS" (or NULL) go to it as --creds USER, PASS on its stdin: not
 * in its argv, which every user sees. */
static int fill_start(cairn_store *st, const char *id, const char *creds, const char *log,
                      pid_t *pid) {
  char exe[PATH_MAX];
  int e = self_exe(exe, sizeof exe);
  if (e < 0) return e;
  int logfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (logfd < 0) return -errno;
  int p[2], in[2] = {-1, -1};
  const char *colon = creds ? strchr(creds, ':') : NULL;
  cairn_autofree char *user = colon ? strndup(creds, (size_t)(colon - creds)) : NULL;
  if (colon && (!user || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) < 0)) {
    int e = user ? -errno : -ENOMEM;
    close(logfd);
    return e;
  }
  if (pipe2(p, O_CLOEXEC) < 0) {
    int e = -errno;
    close(logfd);
    if (colon) {
      close(in[0]);
      close(in[1]);
    }
    return e;
  }
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  if (colon)
    posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
  else
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, logfd, STDERR_FILENO);
  posix_spawn_file_actions_adddup2(&fa, p[1], 3);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
  char *argv[] = {exe,  "--store", (char *)cairn_store_dir(st), "fill", (char *)id, NULL,
                  NULL, NULL};
  if (colon) {
    argv[4] = "--creds";
    argv[5] = user;
    argv[6] = (char *)id;
  }
  setenv("CAIRN_FILL_READY_FD", "3", 1);
  extern char **environ;
  int r = posix_spawn(pid, exe, &fa, &at, argv, environ);
  unsetenv("CAIRN_FILL_READY_FD");
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(p[1]);
  close(logfd);
  if (colon) {
    close(in[0]); /* the password a line, then EOF (the socket's buffer holds it) */
    if (r == 0 && (send(in[1], colon + 1, strlen(colon + 1), MSG_NOSIGNAL) < 0 ||
                   send(in[1], "\n", 1, MSG_NOSIGNAL) < 0))
      r = errno;
    close(in[1]);
  }
  if (r != 0) {
    close(p[0]);
    return -r;
  }
  struct pollfd pf = {.fd = p[0], .events = POLLIN};
  char b = 0;
  ssize_t k = -1;
  if (poll(&pf, 1, FILL_START_MS) > 0)
    while ((k = read(p[0], &b, 1)) < 0 && errno == EINTR) {
    }
  close(p[0]);
  return k == 1 ? 0 : -ECHILD; /* it ended (see its log) or did not pin in time */
}

static int pull_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"platform", required_argument, NULL, 'p'},
      {"creds", required_argument, NULL, 'c'},
      {"insecure", no_argument, NULL, 'k'},
      {"jobs", required_argument, NULL, 'j'},
      {"retries", required_argument, NULL, 'r'},
      {"quiet", no_argument, NULL, 'q'},
      {"cert-dir", required_argument, NULL, 'C'},
      {"no-progress", no_argument, NULL, 'q'},
      {"tls-verify", optional_argument, NULL, 'T'},
      {"lazy", no_argument, NULL, 'L'},
      {"no-fill", no_argument, NULL, 'N'},
      {NULL, 0, NULL, 0}, /* --no-progress: -q less its ids-only output */
  };
  bool quiet = false, no_fill = false;
  cairn_pull_opts po = {.progress = on_progress, .log = on_log};
  const char *creds_arg = NULL;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":qj:", opts, NULL)) != -1) {
    switch (o) {
    case 'p': po.platform = optarg; break;
    case 'c': creds_arg = optarg; break;
    case 'k': po.insecure = true; break;
    case 'T':
      if (cli_tls_verify(optarg, &po.insecure) < 0)
        return report_usage(PULL_USAGE, "pull: --tls-verify: needs true or false");
      break;
    case 'C': po.cert_dir = optarg; break;
    case 'j':
      if (cli_count(optarg, 64, &po.jobs) < 0)
        return report_usage(PULL_USAGE, "pull: --jobs: needs a number from 1 to 64");
      break;
    case 'r':
      if (cli_retries(optarg, "pull", PULL_USAGE, &po.attempts) != CAIRN_EXIT_OK)
        return CAIRN_EXIT_USAGE;
      break;
    case 'L': po.lazy = true; break;
    case 'N': no_fill = true; break;
    case 'q': quiet = true; break;
    default: return cli_bad_option(PULL_USAGE, argv, o, opts);
    }
  }
  if (argc - optind < 1 || argc - optind > 2)
    return report_usage(PULL_USAGE, "pull: needs a SOURCE and at most a NAME");
  if (no_fill && !po.lazy) return report_usage(PULL_USAGE, "pull: --no-fill goes with --lazy");
  const char *source = argv[optind], *name = argc - optind == 2 ? argv[optind + 1] : NULL;
  cairn_autofree char *creds = NULL;
  if (creds_arg) {
    int code = cli_creds(creds_arg, "pull", PULL_USAGE, &creds);
    if (code != CAIRN_EXIT_OK) return code;
    po.creds = creds;
  }

  cairn_store *st;
  int code = cli_config(c, &po.config);
  if (code == CAIRN_EXIT_OK)
    code = cli_store_open(c, CAIRN_STORE_CREATE | (quiet ? CLI_STORE_QUIET : 0), &st);
  if (code != CAIRN_EXIT_OK) return code;
  if (!po.jobs) po.jobs = po.config->pull_jobs; /* 0: libcairn's default */
  po.arg = progress_new(quiet);
  cairn_id id;
  int r = cairn_pull(st, source, name, &po, id);
  progress_free(po.arg);
  if (r < 0) return report_fail(r, "pull %s: %s", source, report_why(st, r));
  uint64_t files = 0, bytes = 0;
  if (po.lazy && !no_fill && cairn_image_pending(st, id, &files, &bytes) == 0 && files > 0) {
    char log[PATH_MAX];
    snprintf(log, sizeof log, "%s/tmp/fill-%.12s.log", cairn_store_dir(st), id);
    pid_t pid = 0;
    int k = fill_start(st, id, po.creds, log, &pid);
    if (k < 0)
      fprintf(stderr, "cairn: pull: the background fill did not start (%s); cairn fill %.12s\n",
              k == -ECHILD ? log : strerror(-k), id);
    else if (!quiet)
      fprintf(stderr,
              "cairn: pull: fetching %llu files in the background (pid %ld; log %s);"
              " cairn fill %.12s waits for them\n",
              (unsigned long long)files, (long)pid, log, id);
  }
  printf("%s\n", id);
  return CAIRN_EXIT_OK;
}

const struct cli_command cmd_pull = {
    .name = "pull",
    .run = pull_run,
    .usage = PULL_USAGE,
    .summary = "Store an image from a layout, an archive or a registry, and print its id.\n"
               "SOURCE: oci:DIR[:REF] | oci-archive:FILE[:REF] | docker-archive:FILE |\n"
               "  docker://[HOST[:PORT]/]REPO[:TAG|@DIGEST]\n"
               "  (no HOST: docker.io, library/ for one component, or registries.conf's first\n"
               "  unqualified-search-registries, as podman)\n"
               "NAME[:TAG]: the image's name in the store (default: from SOURCE)",
    .options = "--platform OS/ARCH[/VARIANT]\tthe platform to pick from an index (default: this "
               "machine's,\n\tuname -m's: x86_64 linux/amd64, aarch64 "
               "linux/arm64/v8...)\n" CLI_REGISTRY_OPTIONS
               "-j, --jobs N\tdownload up to N layers at once (1 to 64; default: cairn.conf's\n"
               "\tpull-jobs, else 3)\n"
               "--retries N\tattempts per request on transient errors (1 to 100)\n"
               "--lazy\tstore a registry's zstd:chunked and eStargz layers from their\n"
               "\ttable of contents alone: files are fetched on first read from a\n"
               "\tmount, and by a cairn fill started in the background (other\n"
               "\tlayers are pulled in full); their diff_ids are unverified until\n"
               "\tthe fill proves them, and no other pull reuses them before\n"
               "--no-fill\twith --lazy: start no background fill (files are fetched on\n"
               "\tfirst read, or by cairn fill)\n"
               "-q, --quiet\tprint the image id only (no progress)\n"
               "--no-progress\tno progress on stderr\n",
};
