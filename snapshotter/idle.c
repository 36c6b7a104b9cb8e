/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn-snapshotter-idle — what an idle cairn-snapshotter execs into
 * (--idle): the same process, holding only its listening unix socket and
 * the connections containerd makes to it, with libc alone mapped.
 *
 *   cairn-snapshotter-idle LISTEN_FD SOCK PROGRAM [ARG...]
 *
 * containerd's client (grpc-go) dials again as soon as a connection ends,
 * and fails a call at once while it has no ready connection: so a
 * connection is accepted and made ready for it (the server's HTTP/2
 * SETTINGS frame, the one thing a client waits for), and then only looked
 * at (MSG_PEEK), nothing of it read. Once a connection brings more than
 * its opening (the preface, SETTINGS and WINDOW_UPDATE frames): a call,
 * PROGRAM ARG... --listen-fd LISTEN_FD --conn-fd FD... is exec'd (the full
 * cairn-snapshotter), whose gRPC adopts each connection and reads it from
 * its start. SIGTERM or SIGINT: SOCK removed, exit 0, as the daemon's.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS 64 /* held connections; one more wakes the daemon */
#define PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define PREFACE_LEN 24

static volatile sig_atomic_t stopping;
static void on_signal(int sig) {
  (void)sig;
  stopping = 1;
}

/* What the connection's bytes so far are: 0 its opening only (wait for
 * more), 1 more than that (a call: wake). */
static int has_call(const unsigned char *b, size_t n) {
  size_t p = PREFACE_LEN;
  if (memcmp(b, PREFACE, n < PREFACE_LEN ? n : PREFACE_LEN) != 0) return 1;
  while (p + 9 <= n) { /* a frame's header: length (24 bits), type, flags, stream */
    size_t len = (size_t)b[p] << 16 | (size_t)b[p + 1] << 8 | b[p + 2];
    if (b[p + 3] != 4 && b[p + 3] != 8) return 1; /* neither SETTINGS nor WINDOW_UPDATE */
    p += 9 + len;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fputs("usage: cairn-snapshotter-idle LISTEN_FD SOCK PROGRAM [ARG...]\n"
          "(cairn-snapshotter runs it: see cairn-snapshotter(8), --idle)\n",
          stderr);
    return 2;
  }
  int lfd = atoi(argv[1]);
  const char *sock = argv[2];
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  /* the signals are taken only in epoll_pwait (the daemon exec'd us with
   * them blocked: one sent meanwhile is pending, taken there) */
  sigset_t block, waitmask;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  sigprocmask(SIG_BLOCK, &block, &waitmask);
  sigdelset(&waitmask, SIGTERM);
  sigdelset(&waitmask, SIGINT);

  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0) {
    fprintf(stderr, "cairn-snapshotter: %s: cannot wait on it: %s\n", sock, strerror(errno));
    return 1;
  }
  int conns[MAX_CONNS];
  int n_conns = 0;
  bool wake = false;
  while (!wake && !stopping) {
    struct epoll_event evs[8];
    int n = epoll_pwait(ep, evs, 8, -1, &waitmask);
    for (int i = 0; i < n && !wake; i++) {
      int fd = evs[i].data.fd;
      if (fd == lfd) {
        if (n_conns == MAX_CONNS) {
          wake = true; /* the daemon accepts it */
          break;
        }
        int c = accept(lfd, NULL, NULL); /* inherited by the daemon: no CLOEXEC */
        if (c < 0) continue;
        /* the server's opening, an empty SETTINGS frame: the client's
         * connection is ready; the daemon's gRPC sends its own after */
        static const unsigned char settings[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0};
        struct epoll_event cev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.fd = c};
        if (send(c, settings, sizeof settings, MSG_NOSIGNAL) != sizeof settings ||
            epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev) < 0) {
          close(c);
          continue;
        }
        conns[n_conns++] = c;
        continue;
      }
      unsigned char buf[4096];
      ssize_t got = recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
      if (got > 0 && (has_call(buf, (size_t)got) || got == (ssize_t)sizeof buf)) {
        wake = true;
      } else if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR) ||
                 (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
        /* the client is gone, with nothing but the opening: dropped */
        epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
        close(fd);
        for (int j = 0; j < n_conns; j++)
          if (conns[j] == fd) conns[j] = conns[--n_conns];
      }
    }
    if (n < 0 && errno != EINTR) {
      fprintf(stderr, "cairn-snapshotter: %s: %s\n", sock, strerror(errno));
      break;
    }
  }
  if (!wake) { /* stopped (or failed): as the daemon ends */
    unlink(sock);
    return stopping ? 0 : 1;
  }
  /* PROGRAM ARG... --listen-fd LISTEN_FD --conn-fd FD..., the signals
   * still blocked (the daemon unblocks them once it handles them) */
  close(ep);
  char **args = calloc((size_t)argc + 2 + 2 * (size_t)n_conns + 1, sizeof(*args));
  char(*nums)[16] = calloc((size_t)n_conns + 1, sizeof(*nums));
  if (!args || !nums) {
    fprintf(stderr, "cairn-snapshotter: %s\n", strerror(ENOMEM));
    unlink(sock);
    return 1;
  }
  int a = 0;
  for (int i = 3; i < argc; i++) args[a++] = argv[i];
  args[a++] = (char *)"--listen-fd";
  args[a++] = argv[1];
  for (int i = 0; i < n_conns; i++) {
    snprintf(nums[i], sizeof nums[i], "%d", conns[i]);
    args[a++] = (char *)"--conn-fd";
    args[a++] = nums[i];
  }
  args[a] = NULL;
  execv(argv[3], args);
  fprintf(stderr, "cairn-snapshotter: %s: %s\n", argv[3], strerror(errno));
  unlink(sock);
  return 1;
}
