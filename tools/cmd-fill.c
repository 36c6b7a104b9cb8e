/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-fill.c — `cairn fill [-q] IMAGE`: fetches every file a lazy pull
 * (cairn pull --lazy) left pending, through cairn_fill, which pins the
 * image throughout; says on stderr what it fetched unless -q. `cairn fill
 * --file SHA256` fetches one pending file (cairn_lazy_fetch) and prints its
 * blob's name: what cairnfs runs on a pending file's first read, so that
 * the daemon maps none of the pull's libraries. `cairn fill --serve` is
 * what a mount runs instead, on its first pending read (fs/fetch.c; it
 * stops it once idle and starts another on the next): a line protocol over a
 * cairn_lazy_fetcher (serve, below). --keep-blobs: each layer
 * finished from its whole blob, kept for cairnfs --als.
 *
 * `cairn pull --lazy` runs `cairn fill IMAGE` in the background with
 * CAIRN_FILL_READY_FD set: the fill writes a byte to that fd once it holds
 * the image's pins, and closes it, so that the pull returns only after.
 */
#include "commands.h"

#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE                                                                                      \
  "cairn fill [-q | --no-progress] [--keep-blobs] [--creds USER[:PASS]] IMAGE\n"                   \
  "                  | --file SHA256 | --serve"

static void on_log(const char *line, void *arg) {
  (void)arg;
  fprintf(stderr, "cairn: fill: %s\n", line);
}

/* Tells the pull that started this fill that its pins are held. */
static void on_pinned(void *arg) {
  int *fd = arg;
  if (*fd < 0) return;
  while (write(*fd, "p", 1) < 0 && errno == EINTR) {
  }
  close(*fd);
  *fd = -1;
}

/* The fd CAIRN_FILL_READY_FD names (a pipe's end), taken from the
 * environment; -1 when unset or not a pipe. */
static int ready_fd(void) {
  const char *v = getenv("CAIRN_FILL_READY_FD");
  if (!v) return -1;
  char *end;
  long fd = strtol(v, &end, 10);
  unsetenv("CAIRN_FILL_READY_FD");
  struct stat sb;
  if (!*v || *end || fd < 3 || fd > 1024 || fstat((int)fd, &sb) < 0 || !S_ISFIFO(sb.st_mode))
    return -1;
  return (int)fd;
}

/* A fill and a fetcher run for long beside a mount, with a thread a
 * request: a buffer of 128 KiB or more (a range's window, a decompressor's)
 * is mapped and given back when freed, not kept in the heap (glibc's
 * threshold otherwise rises to the largest freed), and the threads share
 * two arenas, not one each. */
static void small_heap(void) {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  mallopt(M_ARENA_MAX, 2);
#endif
}

/* --serve: a request a line on stdin ("sha256:HEX" or HEX), an answer a
 * line on stdout, in the order the fetches end: "REQUEST BLOB", or
 * "REQUEST -ERRNO WHY"; SERVE_THREADS at once. Ends once stdin does, its
 * fetches done. */
#define SERVE_THREADS 4

static pthread_mutex_t serve_out = PTHREAD_MUTEX_INITIALIZER;

static void served(const char *sha256, int r, const char *text, void *arg) {
  (void)arg;
  pthread_mutex_lock(&serve_out);
  if (r < 0)
    printf("%s %d %s\n", sha256, r, text);
  else
    printf("%s %s\n", sha256, text);
  fflush(stdout);
  pthread_mutex_unlock(&serve_out);
}

static int serve(cairn_store *st) {
  signal(SIGPIPE, SIG_IGN); /* the mount gone: its answers are dropped */
  cairn_lazy_fetcher *fx;
  int r = cairn_lazy_fetcher_new(cairn_store_dir(st), SERVE_THREADS, served, NULL, &fx);
  if (r < 0) return report_fail(r, "fill --serve: %s", strerror(-r));
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  while ((n = getline(&line, &cap, stdin)) >= 0) {
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
      line[--n] = '\0';
    if (n == 0) continue;
    if (strchr(line, ' ') || n > 100) {
      served(line, -EINVAL, "not a sha256", NULL);
      continue;
    }
    if (cairn_lazy_fetcher_submit(fx, line) < 0) served(line, -ENOMEM, "out of memory", NULL);
  }
  free(line);
  cairn_lazy_fetcher_free(fx);
  return CAIRN_EXIT_OK;
}

static int fill_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {{"quiet", no_argument, NULL, 'q'},
                                       {"no-progress", no_argument, NULL, 'q'},
                                       {"file", required_argument, NULL, 'F'},
                                       {"keep-blobs", no_argument, NULL, 'K'},
                                       {"serve", no_argument, NULL, 'S'},
                                       {"creds", required_argument, NULL, 'C'},
                                       {0}};
  bool quiet = false, keep = false, serving = false;
  const char *file = NULL, *creds_arg = NULL;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":q", opts, NULL)) != -1) {
    if (o == 'q')
      quiet = true;
    else if (o == 'F')
      file = optarg;
    else if (o == 'K')
      keep = true;
    else if (o == 'S')
      serving = true;
    else if (o == 'C')
      creds_arg = optarg;
    else
      return cli_bad_option(USAGE, argv, o, opts);
  }
  if (serving && file) return report_usage(USAGE, "fill: --serve and --file exclude each other");
  if (argc - optind != (file || serving ? 0 : 1))
    return report_usage(USAGE, file      ? "fill: --file takes no image"
                               : serving ? "fill: --serve takes no image"
                                         : "fill: needs one image");
  if (creds_arg && (file || serving))
    return report_usage(USAGE,
                        "fill: --creds is for a fill of IMAGE (a mount's fetches read auth.json)");
  cairn_autofree char *creds = NULL;
  if (creds_arg) {
    int k = cli_creds(creds_arg, "fill", USAGE, &creds);
    if (k != CAIRN_EXIT_OK) return k;
  }
  cairn_store *st;
  int code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  if (serving || !file) small_heap();
  if (serving) return serve(st);
  if (file) {
    char blob[48];
    int r = cairn_lazy_fetch(st, file, blob);
    if (r < 0) return report_fail(r, "fill: %s: %s", file, report_why(st, r));
    printf("%s\n", blob);
    return CAIRN_EXIT_OK;
  }
  const char *ref = argv[optind];
  cairn_id id;
  int r = cairn_image_resolve(st, ref, id);
  if (r < 0) return report_fail(r, "%s: %s", ref, report_why(st, r));
  uint64_t files = 0, bytes = 0;
  if ((r = cairn_image_pending(st, id, &files, &bytes)) < 0)
    return report_fail(r, "%s: %s", ref, report_why(st, r));
  int ready = ready_fd();
  cairn_fill_opts fo = {
      .log = quiet ? NULL : on_log, .pinned = on_pinned, .arg = &ready, .keep_blobs = keep,
      .creds = creds};
  r = cairn_fill(st, ref, &fo, id);
  if (ready >= 0) close(ready);
  if (r < 0) return report_fail(r, "fill %s: %s", ref, report_why(st, r));
  if (!quiet) {
    char size[32];
    cairn_human_size(bytes, size, sizeof size);
    fprintf(stderr, "%.12s: %llu files (%s) fetched; the image is complete\n", id,
            (unsigned long long)files, size);
  }
  return CAIRN_EXIT_OK;
}

const struct cli_command cmd_fill = {
    .name = "fill",
    .run = fill_run,
    .usage = USAGE,
    .summary = "Fetch every file of IMAGE that cairn pull --lazy left to fetch on first read.\n"
               "IMAGE is then complete. The files a prefetch landmark names go first, files\n"
               "next to each other in a layer as one range, several ranges a request, up to\n"
               "4 requests at once. A file a mount or another fill is fetching is not\n"
               "fetched twice. Resumable: a fill that was stopped fetches the rest.",
    .options = "-q, --quiet\tsay nothing (what each layer's finish did, the total)\n"
               "--no-progress\tthe same\n"
               "--creds USER[:PASS]\tregistry credentials (default: auth.json, as podman);\n"
               "\ta PASS given here is seen by every user (ps): with USER alone\n"
               "\tit is read from stdin's first line, or asked on the terminal\n"
               "--keep-blobs\tfetch each layer's blob whole at the end and keep it, as a\n"
               "\tfull pull does, for cairnfs --als (else: only its tar headers;\n"
               "\tan eStargz layer's blob is kept either way, from what the fill\n"
               "\tfetched and the bytes it lacked)\n"
               "--file SHA256\tfetch only the pending file of that content (as a mount's first\n"
               "\tread of it does) and print its blob's name\n"
               "--serve\tfetch pending files as a mount asks for them: a sha256 a line on\n"
               "\tstdin, \"SHA256 BLOB\" or \"SHA256 -ERRNO WHY\" a line on stdout, up to 4\n"
               "\tat once, until stdin ends (what cairnfs runs)\n",
};
