/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-info.c — `cairn info [--json]`: what a bug report needs: cairn's
 * version; the cairn.conf files (read or not there); the store, where its
 * directory came from (--store, CAIRN_STORE, a cairn.conf, the default for
 * root, XDG_DATA_HOME or HOME), its schema version and how much it holds;
 * the pull jobs of cairn.conf; the libfuse that cairnfs (the one `cairn mount` runs)
 * uses, as its --version says; the kernel. The kernel's FUSE protocol
 * version is told only to a mounting daemon (FUSE_INIT): info reads it
 * from the request a live mount's daemon keeps, and without one says it
 * cannot know it rather than mount something to ask.
 */
#include "commands.h"
#include "version.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

/* The libfuse version "cairnfs --version" prints ("libfuse X"), in out;
 * "" if cairnfs cannot be run or does not say. */
static void libfuse_version(const char *bin, char *out, size_t len) {
  out[0] = '\0';
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) return;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], STDOUT_FILENO);
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) dup2(null, STDERR_FILENO);
    execlp(bin, "cairnfs", "--version", (char *)NULL);
    _exit(CLI_EXIT_EXEC_NOT_FOUND);
  }
  close(p[1]);
  cairn_autofclose FILE *f = pid > 0 ? fdopen(p[0], "r") : NULL;
  if (!f) close(p[0]);
  char line[256];
  while (f && fgets(line, sizeof(line), f))
    if (strncmp(line, "libfuse ", 8) == 0)
      snprintf(out, len, "%.*s", (int)strcspn(line + 8, "\n"), line + 8);
  while (pid > 0 && waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
}

#define STORE_HINT "use --store DIR or CAIRN_STORE=DIR for a store of yours"

/* Why the store cannot be opened, in a line for the store's row: "none
 * here yet ..." (missing: not an error), "not usable" (missing, and this
 * user cannot make it), or the reason, and a hint. */
static void store_state(int r, bool unmakable, const char *why, char *buf, size_t len) {
  if (r == -ENOENT)
    snprintf(buf, len, "none here yet (cairn import or pull makes it)");
  else if (unmakable)
    snprintf(buf, len, "not usable: %s (" STORE_HINT ")", why);
  else
    snprintf(buf, len, "cannot be opened: %s (" STORE_HINT ")", why);
}

/* The kernel's FUSE protocol, as the first live mount's daemon was told it. */
struct proto_find {
  char version[32]; /* "7.41", or "" */
  char dir[PATH_MAX];
};

static int proto_visit(const cairn_mount_rec *m, void *arg) {
  struct proto_find *p = arg;
  unsigned major, minor;
  if (m->state != CAIRN_MOUNT_LIVE || cairn_mount_kernel_protocol(m->pid, &major, &minor) < 0)
    return 0;
  snprintf(p->version, sizeof p->version, "%u.%u", major, minor);
  snprintf(p->dir, sizeof p->dir, "%s", m->dir);
  return 1;
}

/* A count of the store's, or null if not known (a store that cannot be opened). */
static json_t *count_json(bool known, uint64_t n) {
  return known ? json_integer((json_int_t)n) : json_null();
}

static int info_run(struct cli *c, int argc, char **argv) {
  struct cli_listing l;
  int code = cli_listing_flags(argc, argv, cmd_info.usage, 0, false, &l);
  char dir[PATH_MAX] = "";
  const char *from = "--store";
  const cairn_config *cfg = NULL;
  if (code == CAIRN_EXIT_OK) code = cli_config(c, &cfg);
  if (code == CAIRN_EXIT_OK && !c->store_dir &&
      cairn_store_dir_pick(cfg, dir, sizeof(dir), &from) < 0)
    from = "none";
  if (code != CAIRN_EXIT_OK) return code;
  /* Opened here, not by cli_store: a store that cannot be opened (missing,
   * or another user's) is one more thing info reports, after the rest. */
  const char *store_dir = c->store_dir ? c->store_dir : dir;
  cairn_store *st = NULL;
  int open_r = *store_dir ? cairn_store_open_flags(store_dir, 0, &st)
                          : -ENOENT; /* no HOME: nowhere to look */
  char why[1200] = "";
  bool unmakable = false;
  if (open_r < 0) {
    snprintf(why, sizeof(why), "%s", *store_dir ? report_why(st, open_r) : "no directory");
    cairn_store_close(st);
    st = NULL;
    char blocker[1024];
    int cr = open_r == -ENOENT && *store_dir
                 ? cairn_store_creatable(store_dir, blocker, sizeof blocker)
                 : 0;
    if (cr < 0) { /* none, and none can be made: import would fail */
      open_r = cr;
      unmakable = true;
      snprintf(why, sizeof(why), "there is none, and none can be made: %.1024s: %s", blocker,
               cr == -EACCES ? "not writable by this user" : strerror(-cr));
    }
  } else {
    c->st = st; /* closed by cli_close */
    if (cairn_store_notice(st)) report_notice(cairn_store_notice(st));
  }
  char files[2][PATH_MAX + 32]; /* "PATH (read)", "PATH (not there)" */
  for (int f = 0; f < 2; f++)
    snprintf(files[f], sizeof(files[f]), "%s (%s)", cfg->paths[f] ? cfg->paths[f] : "no HOME",
             cfg->read[f]             ? "read"
             : f == 1 && cfg->not_own ? "not yours: not read"
                                      : "not there");
  unsigned jobs = cfg->pull_jobs ? cfg->pull_jobs : 3;
  const char *jobs_from = cfg->pull_jobs ? cfg->paths[cfg->pull_jobs_from] : "the default";
  struct cairn_store_info si = {0};
  int r = st ? cairn_store_info(st, &si) : 0;
  bool counted = st || open_r == -ENOENT; /* a missing store: empty */
  if (r < 0) return report_fail(r, "info: %s", report_why(st, r));
  const char *state = st ? "ready" : open_r == -ENOENT ? "missing" : "unusable";
  char state_line[1400] = "";
  if (!st) store_state(open_r, unmakable, why, state_line, sizeof(state_line));
  char bin[PATH_MAX], fuse[64];
  cli_cairnfs_path(bin, sizeof(bin));
  libfuse_version(bin, fuse, sizeof(fuse));
  struct utsname u;
  if (uname(&u) < 0) snprintf(u.release, sizeof(u.release), "unknown");
  bool dev_fuse = access("/dev/fuse", R_OK | W_OK) == 0;
  const char *proto_why = "unknown without a mount: the kernel tells it to the daemon at FUSE_INIT";
  struct proto_find proto = {.version = ""};
  char proto_note[PATH_MAX + 64], proto_line[PATH_MAX + 128];
  if (st) cairn_mounts_foreach(st, proto_visit, &proto);
  if (proto.version[0]) { /* as the kernel told a live mount's daemon */
    snprintf(proto_note, sizeof proto_note, "as told to the mount at %.*s", PATH_MAX - 64,
             proto.dir);
    proto_why = proto_note;
  }
  snprintf(proto_line, sizeof proto_line, "%s%s%s%s", proto.version, proto.version[0] ? " (" : "",
           proto_why, proto.version[0] ? ")" : "");
  const char *shown_dir = st ? cairn_store_dir(st) : store_dir;
  if (l.json) {
    const char *git = version_git();
    json_t *o = json_pack(
        "{s:s, s:s?, s:{s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:s, s:s?}, s:{s:s?, s:s, s:s?, s:s, "
        "s:s, s:b}, s:{s:s?, s:b, s:s?, s:b, s:i, s:s}}",
        "version", version_number(), "git", *git ? git : NULL, "store", "dir", shown_dir, "from",
        from, "schema_version", st ? json_integer(si.schema_version) : json_null(), "images",
        count_json(counted, si.images), "names", count_json(counted, si.names), "layers",
        count_json(counted, si.layers), "blobs", count_json(counted, si.blobs), "state", state,
        "error", st ? NULL : why, "fuse", "libfuse", *fuse ? fuse : NULL, "cairnfs", bin,
        "kernel_protocol", proto.version[0] ? proto.version : NULL, "kernel_protocol_note",
        proto_why, "kernel", u.release, "dev_fuse", dev_fuse, "config", "system", cfg->paths[0],
        "system_read", cfg->read[0], "user", cfg->paths[1], "user_read", cfg->read[1], "pull_jobs",
        (int)jobs, "pull_jobs_from", jobs_from);
    if (!o) return report_fail(-ENOMEM, "info: out of memory");
    cli_print_json(o);
    json_decref(o);
  } else {
    printf("cairn:                 ");
    version_print();
    printf("config files:          %s, %s\n"
           "store:                 %s\n"
           "store chosen by:       %s\n"
           "pull jobs:             %u (%s)\n",
           files[0], files[1], shown_dir, from, jobs, jobs_from);
    if (st)
      printf("schema version:        %d\n"
             "images:                %llu (%llu names)\n"
             "layers:                %llu\n"
             "blobs:                 %llu\n",
             si.schema_version, (unsigned long long)si.images, (unsigned long long)si.names,
             (unsigned long long)si.layers, (unsigned long long)si.blobs);
    else
      printf("store state:           %s\n", state_line);
    printf("libfuse:               %s (of %s)\n"
           "kernel FUSE protocol:  %s\n"
           "kernel:                %s\n"
           "/dev/fuse:             %s\n",
           *fuse ? fuse : "unknown (cairnfs did not say)", bin, proto_line, u.release,
           dev_fuse ? "usable" : "missing or not usable");
  }
  /* A store that is missing is no failure (an empty one); one that cannot
   * be opened is, said last, once info said what it knows. */
  if (st || open_r == -ENOENT) return CAIRN_EXIT_OK;
  return report_fail(open_r, "info: store: %s (" STORE_HINT ")", why);
}

const struct cli_command cmd_info = {
    .name = "info",
    .run = info_run,
    .usage = "cairn info [--json]",
    .summary = "Show cairn's version, its configuration, the store, libfuse and the kernel.\n"
               "That is: the cairn.conf files read, the store (its directory, which of\n"
               "--store, CAIRN_STORE, cairn.conf or the default chose it, schema version,\n"
               "images, layers, blobs), the pull jobs, the libfuse cairnfs uses and the\n"
               "kernel. A store that is missing or cannot be opened is said, not fatal:\n"
               "info tells what it knows (exit 0 if missing, 1 if it cannot be opened, or\n"
               "is missing and cannot be made: a directory this user may not write to).",
    .options = "--json\tone JSON object, exact numbers\n",
};
