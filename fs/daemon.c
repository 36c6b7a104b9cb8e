/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon.c — cairnfs's processes and the verdict: the fork that leaves the
 * caller waiting (main.c), the pipe the daemon gives its verdict on (the
 * mount answers, or an exit code and the message of its failure: report.h's
 * sink), and the fds of a process that serves (stdio on /dev/null once
 * serving; a server forked without exec closing what an exec would).
 * And a server's messages to its supervisor after the ready byte (a move
 * by cairn commit). main.c, supervisor.c, conn.c, als_serve.c and
 * rw_rebase.c call it; it calls none of them.
 */
#include "cairnfs.h"
#include "report.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Where the verdict goes: the waiting parent's pipe, or stderr with -f. */
static int verdict_fd = -1;
/* A server's status pipe to its supervisor (conn.c sets it). */
static int status_fd = -1;

void cairnfs_status_fd_set(int fd) { status_fd = fd; }

void cairnfs_report_moved(const char *image, int upper_fd) {
  char msg[1 + 64 + 10 + 1];
  if (status_fd < 0 || strlen(image) != 64 || upper_fd < 0) return;
  snprintf(msg, sizeof(msg), "%c%s%010d", CAIRNFS_STATUS_MOVED, image, upper_fd);
  if (write(status_fd, msg, sizeof(msg) - 1) < 0) {
    /* The supervisor is gone: the session goes with it. */
  }
}

void cairnfs_report_moving(const char *upper) {
  char msg[1 + 64 + 1];
  if (status_fd < 0 || strlen(upper) != 64) return;
  snprintf(msg, sizeof(msg), "%c%s", CAIRNFS_STATUS_MOVING, upper);
  if (write(status_fd, msg, sizeof(msg) - 1) < 0) {
    /* The supervisor is gone: the session goes with it. */
  }
}

void cairnfs_stdio_null(void) {
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    close(null);
  }
}

void cairnfs_as_exec(void) {
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == dirfd(d)) continue;
    int fl = fcntl(fd, F_GETFD);
    if (fl >= 0 && (fl & FD_CLOEXEC)) close(fd);
  }
  if (d) closedir(d);
  verdict_fd = -1; /* closed above: the pipe is O_CLOEXEC */
  report_sink_set(NULL);
}

/* The sink of the daemon's failure (report.h): the parent waiting for the
 * verdict gets its exit code (one byte) and its message, then EOF. Once the
 * verdict is given (or the parent is gone) failures go to stderr. */
static int verdict_send(int code, const char *msg) {
  if (verdict_fd < 0) return -1;
  unsigned char c = (unsigned char)code;
  size_t len = strlen(msg);
  if (write(verdict_fd, &c, 1) != 1 || write(verdict_fd, msg, len) != (ssize_t)len) return -1;
  close(verdict_fd);
  verdict_fd = -1;
  return 0;
}

void cairnfs_report_ready(void) {
  if (verdict_fd < 0) return;
  unsigned char c = CAIRN_EXIT_OK;
  if (write(verdict_fd, &c, 1) < 0) {
    /* The parent is gone; nobody is waiting for the verdict. */
  }
  close(verdict_fd);
  verdict_fd = -1;
  cairnfs_stdio_null();
  if (chdir("/") < 0) {
    /* Not fatal: only keeps the daemon off the caller's cwd. */
  }
}

/* Parent side of daemonizing: waits for the daemon's verdict. */
static int await_daemon(int fd, pid_t pid) {
  unsigned char code = CAIRN_EXIT_FAILURE;
  char msg[2048];
  ssize_t n = read(fd, &code, 1);
  size_t len = 0;
  while (n == 1 && len < sizeof(msg) - 1) {
    ssize_t m = read(fd, msg + len, sizeof(msg) - 1 - len);
    if (m <= 0) break;
    len += (size_t)m;
  }
  msg[len] = '\0';
  if (n == 1 && code == CAIRN_EXIT_OK) return CAIRN_EXIT_OK;
  if (n == 1) {
    report_notice(msg);
    return code;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return report_fail(-ESRCH, "the daemon died before mounting (%s %d)",
                     WIFSIGNALED(status) ? "signal" : "status",
                     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

bool cairnfs_daemonize(int *code) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) {
    *code = report_fail(-errno, "pipe: %s", strerror(errno));
    return false;
  }
  pid_t pid = fork();
  if (pid < 0) {
    *code = report_fail(-errno, "fork: %s", strerror(errno));
    return false;
  }
  if (pid > 0) {
    close(p[1]);
    *code = await_daemon(p[0], pid);
    return false;
  }
  close(p[0]);
  verdict_fd = p[1];
  report_sink_set(verdict_send);
  setsid();
  return true;
}
