/*
 * proc.c — facts about processes read from /proc: a process's start time
 * (to tell a live pid from a reused one) and its command name.
 */
#include "internal.h"

#include <string.h>

uint64_t proc_start_time(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* comm may hold spaces and parentheses: fields resume after the last ')'. */
  char *p = strrchr(buf, ')');
  if (!p) return 0;
  p++;
  /* starttime is field 22; after ')' we are before field 3. */
  for (int field = 3; field < 22 && p; field++) p = strchr(p + 1, ' ');
  return p ? strtoull(p + 1, NULL, 10) : 0;
}

char *proc_command(pid_t pid) {
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
