/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.h — what the two commands (cairn, cairn-pin) share: option parsing,
 * opening the store named by --store, printing listings. Their errors,
 * like cairnfs's, go through report.h.
 */
#ifndef CAIRN_CLI_H
#define CAIRN_CLI_H

#include "cairn.h"
#include "cleanup.h"
#include "report.h"
#include "rows.h"

#include <errno.h>
#include <jansson.h>

#include <stdbool.h>
#include <stdint.h>

struct cli {
  const char *store_dir; /* --store, or NULL for the default */
  cairn_store *st;       /* opened on first use by cli_store */
  cairn_config config;   /* cairn.conf, read on first use by cli_config */
  bool config_read;
  bool trust_store; /* --trust-store: root may use a store another user owns */
};

/* The shell's exit codes for a command we run (cairn-pin hold's, cairn
 * mount's cairnfs), as flock(1) and env(1) use them. */
enum cli_exit_exec {
  CLI_EXIT_EXEC_FAILED = 126,    /* found, but exec failed */
  CLI_EXIT_EXEC_NOT_FOUND = 127, /* no such command */
  CLI_EXIT_SIGNAL_BASE = 128,    /* plus the signal that killed the command */
};

/* A command of cairn, or a subcommand of cairn-pin: it runs with argv from
 * its name on (argv[0] is the name), --store taken out, and returns the
 * process's exit code. */
typedef int (*cli_command_fn)(struct cli *c, int argc, char **argv);

/* What `--help` says of a command, and what its usage errors repeat. */
struct cli_command {
  const char *name;
  cli_command_fn run;
  const char *usage;   /* the synopsis: "cairn rm [--wait[=SECONDS]] IMAGE..." */
  const char *summary; /* what it does, one line, as the command list shows it */
  const char *options; /* one line per option, "FLAG\tMEANING\n", or NULL */
};

/* The command named name among n, or NULL. */
const struct cli_command *cli_command_find(const struct cli_command *const *cmds, size_t n,
                                           const char *name);
/* The name of the command among n nearest to name, a mistyped one (for
 * "did you mean": cairn_near, or two neighbouring letters swapped), or
 * NULL. */
const char *cli_command_nearest(const struct cli_command *const *cmds, size_t n, const char *name);
/* True if argv (before any "--") holds -h or --help: every command and
 * subcommand answers it with its help, whatever else argv holds. */
bool cli_wants_help(int argc, char **argv);
/* Prints cmd's help on stdout: usage, summary, one aligned line per
 * option, -h/--help included. */
void cli_command_help(const struct cli_command *cmd);
/* Prints a program's help on stdout: its usage, its commands (one line
 * each), its global options, and where its store is. */
void cli_program_help(const char *usage, const struct cli_command *const *cmds, size_t n,
                      const char *options);
/* The help command (self) of a program whose commands are cmds: with no
 * argument program_help(), with one the help of that command (what names
 * one: "command" or "subcommand"). Returns the exit code. */
int cli_help_run(const struct cli_command *self, const struct cli_command *const *cmds, size_t n,
                 void (*program_help)(void), const char *what, int argc, char **argv);

/* The version command of cairn and cairn-pin: prints the version
 * (version.h); a usage error if argv has more than the name. */
int cli_version_run(struct cli *c, int argc, char **argv);

/* The cairnfs binary next to ours (or the bin of the full cairn's
 * install), else "cairnfs" for a PATH search. */
void cli_cairnfs_path(char *out, size_t len);

/* Removes every --store DIR / --store=DIR before a "--" from argv. */
int cli_take_store_option(struct cli *c, int *argc, char **argv);
/* Reads cairn.conf once into *cfg; returns CAIRN_EXIT_OK, or the exit code
 * of the failure it reported ("PROG: PATH:LINE: WHY", exit 2 for a bad
 * line). */
int cli_config(struct cli *c, const cairn_config **cfg);
/* Opens the store once into *st: --store, else the one cairn.conf and the
 * environment pick (cairn_store_dir_pick); returns CAIRN_EXIT_OK, or the
 * exit code of the failure it reported. */
int cli_store(struct cli *c, cairn_store **st);
/* cli_store with flags: CAIRN_STORE_CREATE (a command that adds to the
 * store: import, pull, login) makes a missing store, saying so on stderr
 * ("created store at DIR", unless CLI_STORE_QUIET); CAIRN_STORE_LAZY opens the
 * database only when a call needs it; CLI_STORE_MISSING_OK (a listing) sets *st to
 * NULL for a missing store, said nothing, to be read as an empty one.
 * Without either a missing store is exit 3, "store: DIR: no store here". */
enum {
  CLI_STORE_MISSING_OK = 1u << 8,
  CLI_STORE_QUIET = 1u << 9, /* -q: not even "created store at DIR" */
};
int cli_store_open(struct cli *c, unsigned flags, cairn_store **st);
void cli_close(struct cli *c);

/* The usage error for the option getopt_long just refused, returning o
 * ('?', or ':' for a missing value: every optstring starts with ':', after
 * a '+' if any) with longopts: "CMD: OPTION: unknown option" (or "needs a
 * value", "takes no value"), naming the option as typed. The mains set
 * opterr = 0, so this is the only line said about it. */
struct option;
int cli_bad_option(const char *usage, char **argv, int o, const struct option *longopts);
/* For a command that takes no option: refuses any (cli_bad_option) among
 * its arguments, or only before its first operand if operands_end (its
 * operands may hold options of a command it runs), leaving optind at the
 * first operand. Returns CAIRN_EXIT_OK, or the exit code of the error. */
int cli_no_options(int argc, char **argv, const char *usage, bool operands_end);

/* How a listing prints its rows. */
struct cli_listing {
  bool json;          /* --json (or --format json) */
  bool quiet;         /* -q: the ids only (id or target; else the first column) */
  bool no_trunc;      /* --no-trunc: ids in full */
  const char *format; /* --format TEMPLATE: "{{.Field}}" per column, \t, \n */
  const char *cmd;    /* the command's name, for its errors */
};
/* The help lines of the flags of a listing of rows; _REST those after -q,
 * for a listing whose -q prints something else than ids (mounts). */
#define CLI_LISTING_OPTIONS "-q, --quiet\tprint the ids only\n" CLI_LISTING_OPTIONS_REST
#define CLI_LISTING_OPTIONS_REST                                                                   \
  "--no-trunc\tprint ids in full (64 hex digits)\n"                                                \
  "--format TEMPLATE\tprint each row as TEMPLATE: {{.Field}} for a column ({{.ID}},\n"             \
  "\t{{.Names}}...: a wrong one lists them), \\t, \\n; --format json is --json\n"
/* Parses the flags of a listing from argv[0] on, leaving optind at the
 * first operand: --json, and for a listing of rows (tables) also -q,
 * --no-trunc and --format. At most max_operands may follow. Returns
 * CAIRN_EXIT_OK, or the exit code of a usage error it printed. */
int cli_listing_flags(int argc, char **argv, const char *usage, int max_operands, bool rows,
                      struct cli_listing *l);

/* Prints a JSON array (listing) on stdout followed by a newline. */
void cli_print_json(json_t *rows);
/* t (seconds since the epoch) as RFC 3339 in UTC, "2026-12-01T09:23:26Z". */
void cli_rfc3339(int64_t t, char *buf, size_t len);
/* How long before now t was, as podman says it: "3 minutes ago". */
void cli_time_ago(int64_t t, int64_t now, char *buf, size_t len);
/* An image as `cairn inspect` shows it; pins is an array of pin rows, or
 * NULL (left out). Takes the reference to pins. */
json_t *cli_inspect_json(const struct cairn_image_info *info, json_t *pins);

/* The same image with podman image inspect's fields (Id, Digest: the
 * config's, cairn keeps no manifest; RepoTags, Created, Config: the
 * config's "config", Architecture, Os, Size, RootFS.Layers: the diff_ids,
 * Labels, History, ...), for inspect --format. */
json_t *cli_inspect_podman_json(const struct cairn_image_info *info);

/* Prints obj by a Go-template-like tmpl, as podman inspect --format: each
 * {{.Key}} (case aside; {{.A.B}} a member's member; {{json .Key}} as
 * JSON; {{.}} the object itself) is the value, a string as it is and
 * anything else as JSON; {{range .Key}}...{{end}} the body once per element
 * of a list, the element its {{.}}; \t and \n a tab and a newline; a
 * newline at the end. A path obj does not have is looked up in fallback
 * (or NULL); one neither has is a usage error naming their keys. Returns
 * the exit code. */
int cli_json_template_print(const char *cmd, const char *usage, const char *tmpl, json_t *obj,
                            json_t *fallback);

/* podman's --tls-verify[=true|false] (arg NULL: true): *insecure is its
 * opposite. -1 for another value. */
int cli_tls_verify(const char *arg, bool *insecure);

/* Parses a number of seconds ("5", "0.5", "1e10", "inf") into *ms,
 * rounded down; a wait longer than int64 milliseconds hold (inf included)
 * is INT64_MAX, for ever in practice. -1 for anything else: empty,
 * negative, nan, trailing text. */
int cli_parse_seconds(const char *s, int64_t *ms);

#endif
