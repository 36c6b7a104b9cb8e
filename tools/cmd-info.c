/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-info.c — `cairn info [--json]`: what a bug report needs: cairn's
 * version; the cairn.conf files (read or not there); the store, where its
 * directory came from (--store, CAIRN_STORE, a cairn.conf, the default for
 * root, XDG_DATA_HOME or HOME), its schema version and how much it holds;
 * the pull jobs of cairn.conf; the libfuse that cairnfs (the one `cairn mount` runs)
 * uses, as its --version says; the kernel. The kernel's FUSE protocol
 * version is told only to a mounting daemon (FUSE_INIT), so info says it
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

static int info_run(struct cli *c, int argc, char **argv) {
  struct cli_listing l;
  cairn_store *st;
  int code = cli_listing_flags(argc, argv, cmd_info.usage, 0, false, &l);
  char dir[PATH_MAX];
  const char *from = "--store";
  const cairn_config *cfg = NULL;
  if (code == CAIRN_EXIT_OK) code = cli_config(c, &cfg);
  if (code == CAIRN_EXIT_OK && !c->store_dir &&
      cairn_store_dir_pick(cfg, dir, sizeof(dir), &from) < 0)
    from = "none";
  if (code == CAIRN_EXIT_OK) code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  char files[2][PATH_MAX + 16]; /* "PATH (read)", "PATH (not there)" */
  for (int f = 0; f < 2; f++)
    snprintf(files[f], sizeof(files[f]), "%s (%s)", cfg->paths[f] ? cfg->paths[f] : "no HOME",
             cfg->read[f] ? "read" : "not there");
  unsigned jobs = cfg->pull_jobs ? cfg->pull_jobs : 3;
  const char *jobs_from = cfg->pull_jobs ? cfg->paths[cfg->pull_jobs_from] : "the default";
  struct cairn_store_info si;
  int r = cairn_store_info(st, &si);
  if (r < 0) return report_fail(r, "info: %s", report_why(st, r));
  char bin[PATH_MAX], fuse[64];
  cli_cairnfs_path(bin, sizeof(bin));
  libfuse_version(bin, fuse, sizeof(fuse));
  struct utsname u;
  if (uname(&u) < 0) snprintf(u.release, sizeof(u.release), "unknown");
  bool dev_fuse = access("/dev/fuse", R_OK | W_OK) == 0;
  const char *proto_why = "unknown without a mount: the kernel tells it to the daemon at FUSE_INIT";
  if (l.json) {
    const char *git = version_git();
    json_t *o = json_pack(
        "{s:s, s:s?, s:{s:s, s:s, s:i, s:I, s:I, s:I, s:I}, s:{s:s?, s:s, s:n, s:s, s:s, s:b},"
        " s:{s:s?, s:b, s:s?, s:b, s:i, s:s}}",
        "version", version_number(), "git", *git ? git : NULL, "store", "dir", cairn_store_dir(st),
        "from", from, "schema_version", si.schema_version, "images", (json_int_t)si.images, "names",
        (json_int_t)si.names, "layers", (json_int_t)si.layers, "blobs", (json_int_t)si.blobs,
        "fuse", "libfuse", *fuse ? fuse : NULL, "cairnfs", bin, "kernel_protocol",
        "kernel_protocol_note", proto_why, "kernel", u.release, "dev_fuse", dev_fuse, "config",
        "system", cfg->paths[0], "system_read", cfg->read[0], "user", cfg->paths[1], "user_read",
        cfg->read[1], "pull_jobs", (int)jobs, "pull_jobs_from", jobs_from);
    if (!o) return report_fail(-ENOMEM, "info: out of memory");
    cli_print_json(o);
    json_decref(o);
    return CAIRN_EXIT_OK;
  }
  printf("cairn:                 ");
  version_print();
  printf("config files:          %s, %s\n"
         "store:                 %s\n"
         "store chosen by:       %s\n"
         "pull jobs:             %u (%s)\n"
         "schema version:        %d\n"
         "images:                %llu (%llu names)\n"
         "layers:                %llu\n"
         "blobs:                 %llu\n"
         "libfuse:               %s (of %s)\n"
         "kernel FUSE protocol:  %s\n"
         "kernel:                %s\n"
         "/dev/fuse:             %s\n",
         files[0], files[1], cairn_store_dir(st), from, jobs, jobs_from, si.schema_version,
         (unsigned long long)si.images, (unsigned long long)si.names, (unsigned long long)si.layers,
         (unsigned long long)si.blobs, *fuse ? fuse : "unknown (cairnfs did not say)", bin,
         proto_why, u.release, dev_fuse ? "usable" : "missing or not usable");
  return CAIRN_EXIT_OK;
}

const struct cli_command cmd_info = {
    .name = "info",
    .run = info_run,
    .usage = "cairn info [--json]",
    .summary = "Show cairn's version, the cairn.conf files read, the store (its directory,\n"
               "which of --store, CAIRN_STORE, cairn.conf or the default chose it, schema\n"
               "version, images, layers, blobs), the pull jobs, the libfuse cairnfs uses and\n"
               "the kernel.",
    .options = "--json\tone JSON object, exact numbers\n",
};
