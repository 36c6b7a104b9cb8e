/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli_remote.c — what the commands that talk to a registry share: --creds
 * (pull, push, fill), --retries (pull, push, fsck --repair) and --jobs
 * (pull, push), and the reading of a line from stdin or the terminal
 * (login too).
 */
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

/* A line of f without its newline in *line (caller frees); false at EOF. */
bool cli_read_line(FILE *f, char **line) {
  size_t cap = 0;
  ssize_t n = getline(line, &cap, f);
  if (n < 0) return false;
  while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r')) (*line)[--n] = '\0';
  return true;
}

/* Asks the terminal for a line after prompt, echoing it unless secret. */
bool cli_prompt(const char *what, bool secret, char **line) {
  cairn_autofclose FILE *tty = fopen("/dev/tty", "r+e");
  if (!tty) return false;
  fprintf(tty, "%s: ", what);
  fflush(tty);
  struct termios old, quiet;
  bool hide = secret && tcgetattr(fileno(tty), &old) == 0;
  if (hide) {
    quiet = old;
    quiet.c_lflag &= ~(tcflag_t)ECHO;
    tcsetattr(fileno(tty), TCSAFLUSH, &quiet);
  }
  bool got = cli_read_line(tty, line);
  if (hide) {
    tcsetattr(fileno(tty), TCSAFLUSH, &old);
    fputc('\n', tty);
  }
  return got;
}

int cli_creds(const char *arg, const char *cmd, const char *usage, char **out) {
  *out = NULL;
  if (!*arg || *arg == ':') return report_usage(usage, "%s: --creds: needs USER[:PASS]", cmd);
  if (strchr(arg, ':')) {
    char warning[256];
    snprintf(warning, sizeof(warning),
             "%s: --creds USER:PASS: warning: every user sees the password in ps while this "
             "runs; --creds USER reads it from stdin, or use cairn login",
             cmd);
    report_notice(warning);
    if (!(*out = strdup(arg))) return report_fail(-ENOMEM, "%s: %s", cmd, strerror(ENOMEM));
    return CAIRN_EXIT_OK;
  }
  cairn_autofree char *password = NULL;
  bool from_stdin = !isatty(STDIN_FILENO);
  if (from_stdin ? !cli_read_line(stdin, &password) : !cli_prompt("Password", true, &password))
    return report_usage(usage,
                        from_stdin ? "%s: --creds %s: no password on stdin"
                                   : "%s: --creds %s: no terminal to ask for the password on",
                        cmd, arg);
  if (asprintf(out, "%s:%s", arg, password) < 0) {
    *out = NULL;
    return report_fail(-ENOMEM, "%s: %s", cmd, strerror(ENOMEM));
  }
  return CAIRN_EXIT_OK;
}

int cli_count(const char *s, unsigned max, unsigned *out) {
  char *end;
  unsigned long v = strtoul(s, &end, 10);
  if (!*s || *end || v == 0 || v > max) return -1;
  *out = (unsigned)v;
  return 0;
}

int cli_retries(const char *arg, const char *cmd, const char *usage, unsigned *attempts) {
  if (cli_count(arg, 100, attempts) < 0)
    return report_usage(usage, "%s: --retries: needs a number from 1 to 100 (attempts)", cmd);
  return CAIRN_EXIT_OK;
}
