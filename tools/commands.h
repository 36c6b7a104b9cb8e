/* SPDX-License-Identifier: Apache-2.0 */
/*
 * commands.h — the commands of `cairn`, one file each (tools/cmd-*.c):
 * each defines its struct cli_command (name, function, help).
 */
#ifndef CAIRN_COMMANDS_H
#define CAIRN_COMMANDS_H

#include "cli.h"

extern const struct cli_command cmd_import;
extern const struct cli_command cmd_images;
extern const struct cli_command cmd_layers;
extern const struct cli_command cmd_inspect;
extern const struct cli_command cmd_rm;
extern const struct cli_command cmd_gc;
extern const struct cli_command cmd_fsck;
extern const struct cli_command cmd_commit;
extern const struct cli_command cmd_export;
extern const struct cli_command cmd_fill;
extern const struct cli_command cmd_pull;
extern const struct cli_command cmd_push;
extern const struct cli_command cmd_mount;
extern const struct cli_command cmd_umount;
extern const struct cli_command cmd_mounts;
extern const struct cli_command cmd_df;
extern const struct cli_command cmd_info;
extern const struct cli_command cmd_bundle;
extern const struct cli_command cmd_tag;
extern const struct cli_command cmd_history;
extern const struct cli_command cmd_login;
extern const struct cli_command cmd_logout;

/* Shared by cmd-mount.c (which defines them) and cmd-bundle.c. */
/* Starts cairnfs serving image at dir (absolute, resolved) with -o opts
 * unless NULL, and returns once the mount answers; failures are reported.
 * Returns the exit code. */
int cli_mount_start(cairn_store *st, const char *image, const char *dir, const char *opts);
/* The same, mounting through dir_fd, an O_PATH fd of the directory dir
 * names (cairnfs is given /proc/self/fd/N): the mount lands on that
 * directory, whatever dir names when cairnfs mounts. */
int cli_mount_start_at(cairn_store *st, const char *image, const char *dir, int dir_fd,
                       const char *opts);
/* Unmounts the directory name (as typed) as `cairn umount` does (see
 * cmd-mount.c's top): one not mounted (or absent) is a success, said on
 * stderr; the changes of a --rw mount are kept (Kept: ...), or with
 * discard dropped (Dropped: ...), said on stdout unless quiet; the
 * directory is not named (the caller does). Returns the exit code. */
int cli_umount_one(cairn_store *st, const char *name, bool quiet, bool discard);

/* What the registry commands share (tools/cli_remote.c). */
/* A line of f without its newline in *line (caller frees); false at EOF. */
bool cli_read_line(FILE *f, char **line);
/* Asks the terminal for a line after "WHAT: ", echoing it unless secret;
 * false if there is no terminal or it ends. */
bool cli_prompt(const char *what, bool secret, char **line);
/* A count from 1 to max in *out; -1 if s is not one. */
int cli_count(const char *s, unsigned max, unsigned *out);
/* --retries N (attempts, 1 to 100) in *attempts; the exit code (a usage
 * error is reported with usage, cmd naming the command). */
int cli_retries(const char *arg, const char *cmd, const char *usage, unsigned *attempts);
/* --creds: "USER:PASS" as given (ps shows it to every user), or USER alone
 * and the password from the first line of stdin when it is no terminal,
 * else asked on the terminal without echo; *out is "USER:PASS" (the
 * caller frees it). Returns the exit code (a usage error is reported with
 * usage, cmd naming the command). */
int cli_creds(const char *arg, const char *cmd, const char *usage, char **out);
/* The help lines of the registry options pull and push share (--creds,
 * --insecure, --tls-verify, --cert-dir), for their .options. */
#define CLI_REGISTRY_OPTIONS                                                                       \
  "--creds USER[:PASS]\tregistry credentials (default: auth.json, as podman);\n"                   \
  "\ta PASS given here is seen by every user (ps): with USER alone\n"                              \
  "\tit is read from stdin's first line, or asked on the terminal\n"                               \
  "--insecure\tno TLS checks, and plain HTTP if the registry speaks no TLS\n"                      \
  "\t(cairn.conf: insecure = true, per registry)\n"                                                \
  "--tls-verify[=BOOL]\t--tls-verify=false is --insecure, as podman's\n"                           \
  "--cert-dir DIR\tCA certificates (*.crt) and client cert/key for the registry\n"

#endif
