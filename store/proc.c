/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proc.c — facts about processes read from /proc: a process's start time
 * (to tell a live pid from a reused one), whether it still runs (a zombie
 * waiting for its reaper has released everything and does not) and its
 * command name.
 */
#include "libcairn_store.h"

#include <string.h>

/* Reads /proc/PID/stat: command name, state letter and start time. */
static int proc_stat(pid_t pid, char *comm, size_t len, char *state, uint64_t *start) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f) return -errno;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* comm may hold spaces and parentheses: fields resume after the last ')'. */
  char *open = strchr(buf, '('), *close = strrchr(buf, ')');
  if (!open || !close || close < open || close[1] != ' ') return -EIO;
  snprintf(comm, len, "%.*s", (int)(close - open - 1), open + 1);
  *state = close[2];
  /* starttime is field 22; after ')' we are before field 3. */
  char *p = close + 1;
  for (int field = 3; field < 22 && p; field++) p = strchr(p + 1, ' ');
  *start = p ? strtoull(p + 1, NULL, 10) : 0;
  return 0;
}

uint64_t cn_proc_start_time(pid_t pid) {
  char comm[64], state;
  uint64_t start;
  return proc_stat(pid, comm, sizeof(comm), &state, &start) == 0 ? start : 0;
}

bool cairn_process_running(pid_t pid, const char *name) {
  char comm[64], state;
  uint64_t start;
  if (pid <= 0 || proc_stat(pid, comm, sizeof(comm), &state, &start) < 0) return false;
  return state != 'Z' && state != 'X' && (!name || strcmp(comm, name) == 0);
}

char *cn_proc_command(pid_t pid) {
  char path[64], buf[256] = "";
  snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
  FILE *f = fopen(path, "re");
  if (f) {
    if (!fgets(buf, sizeof(buf), f)) buf[0] = '\0';
    fclose(f);
  }
  buf[strcspn(buf, "\n")] = '\0';
  return strdup(buf[0] ? buf : "?");
}
