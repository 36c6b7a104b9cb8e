/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fetch.c — the first read of a pending file (a lazy pull's): the daemon's
 * client of its fetcher, `cairn fill --serve`, and the table of fetches in
 * flight that reads wait or park on. The comment below says how; ops.c's
 * reads and rw_copyup.c's copy-up call it (cairnfs.h).
 */
#include "cairnfs.h"
#include "self.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Pending files (doc/lazy-pulls.md).
 * A node whose blob is "sha256:HEX" is a file the store did not have when
 * the mount started: its first read looks whether the store has it now
 * (the fill stored it: stored_find), else fetches it, once however many
 * threads ask: the first one sends the request, the others wait on the
 * same entry of the in-flight table, which the fetcher's answer settles.
 * A read does not wait in its worker thread: it is parked on the entry,
 * and the thread that routes the fetcher's answers replies to it, so that reads of
 * pending files, however many and however slow the registry, leave the
 * workers to lookups, listings and reads of what the store has (an open
 * for passthrough, a copy-up or an lseek still waits in its thread).
 * The fetcher is one `cairn fill --serve` per daemon (the cairn beside
 * this cairnfs, which execs the full one), started on the first pending
 * read: it fetches and stores each file as cairn_lazy_fetch does
 * (verifying every byte, under the content's lock across processes), up
 * to 4 at once, with each layer's TOC parsed once; the daemon itself maps
 * none of the pull's libraries (curl, OpenSSL, libarchive:
 * test_mount_libs.sh). Its stdin and stdout are one end of a socket pair:
 * a request a line ("sha256:HEX"), an answer a line ("sha256:HEX BLOB" or
 * "sha256:HEX -ERRNO WHY"), which a reader thread of ours routes to the
 * entry. When it dies (or a request cannot be written) the entries
 * waiting on it fail with EIO, and the next request starts another, not
 * more than once every SERVE_RESTART_MS. It ends when the daemon does,
 * or once no fetch has been in flight for FETCH_IDLE_MS (the reads of a
 * container's start are over, or a fill stored the rest): its stdin
 * closes, and the next pending read starts another at once. A mount whose
 * first reads are done costs this daemon alone, not a `cairn` with the
 * pull's libraries and the layers' TOCs in memory.
 * A fetch that failed answers EIO, and again at once to reads within
 * FETCH_RETRY_MS of it (the fetch's own retries are bounded), then is
 * tried again. Entries live as long as the daemon (a file's blob name,
 * once fetched, is read from it: the index the mount mapped keeps saying
 * "sha256:HEX"). */
#define FETCH_BUCKETS 1024
#define FETCH_RETRY_MS 2000
#define SERVE_RESTART_MS 1000
#define FETCH_IDLE_MS 5000

/* A read waiting for a fetch. */
struct parked {
  struct parked *next;
  fuse_req_t req;
  uint64_t size; /* the node's */
  off_t off;
  size_t len;
  const char *blob; /* set when settled: the blob, or NULL (EIO) */
};

struct fetch {
  struct fetch *next;
  char *sha256;          /* the node's blob string */
  char blob[48];         /* once fetched */
  int state;             /* 1 fetching, 0 fetched, -errno failed */
  uint64_t when;         /* failed at (ms) */
  unsigned gen;          /* the fetcher asked for it (state 1): serve_gen then */
  struct parked *parked; /* reads waiting for it (state 1) */
};

static struct fetch *fetches[FETCH_BUCKETS];
static pthread_mutex_t fetch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fetch_cv = PTHREAD_COND_INITIALIZER;
/* The session is over (cairnfs_fetch_stop): parked reads are dropped, not
 * answered. Replies to parked reads under way (fetch_mu). */
static bool fetch_stopped;
static unsigned fetch_replying;

/* The fetcher (under fetch_mu): our end of its socket pair (-1: none
 * running), when it was last started, how many were started (the
 * current one's number), when it was last asked or answered. */
static int serve_fd = -1;
static uint64_t serve_started;
static unsigned serve_gen;
static uint64_t serve_last;

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The bucket of sha256's entry in fetches. */
static size_t fetch_bucket(const char *sha256) {
  size_t k = 5381;
  for (const char *p = sha256; *p; p++) k = k * 33 + (unsigned char)*p;
  return k % FETCH_BUCKETS;
}

static struct fetch *fetch_find(const char *sha256) {
  struct fetch *f = fetches[fetch_bucket(sha256)];
  while (f && strcmp(f->sha256, sha256) != 0) f = f->next;
  return f;
}

struct serve_reader {
  struct cairnfs *fs;
  int fd;
  pid_t pid;
  unsigned gen;
};

/* Moves f's parked reads onto *out, settled as f is (under fetch_mu);
 * once the session is over, drops them. */
static void parked_settle(struct fetch *f, struct parked **out) {
  while (f->parked) {
    struct parked *p = f->parked;
    f->parked = p->next;
    if (fetch_stopped) {
      free(p);
      continue;
    }
    p->blob = f->state == 0 ? f->blob : NULL;
    p->next = *out;
    *out = p;
  }
}

/* Replies to settled parked reads (fetch_mu not held; fetch_replying
 * counts the caller). */
static void parked_reply(struct cairnfs *fs, struct parked *p) {
  while (p) {
    struct parked *next = p->next;
    int fd = p->blob ? cairn_blob_open(fs->st, p->blob) : -EIO;
    struct stat sb;
    if (fd >= 0 &&
        (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != p->size)) {
      close(fd);
      fd = -EIO;
    }
    if (fd < 0) {
      fuse_reply_err(p->req, EIO);
    } else {
      cairnfs_reply_fd(p->req, fd, p->off, p->len);
      close(fd);
    }
    free(p);
    p = next;
  }
}

/* Lets fetch_mu go (held) and replies to settled, counted in
 * fetch_replying meanwhile (cairnfs_fetch_stop waits for it). */
static void unlock_and_reply(struct cairnfs *fs, struct parked *settled) {
  if (settled) fetch_replying++;
  pthread_mutex_unlock(&fetch_mu);
  if (!settled) return;
  parked_reply(fs, settled);
  pthread_mutex_lock(&fetch_mu);
  fetch_replying--;
  pthread_cond_broadcast(&fetch_cv);
  pthread_mutex_unlock(&fetch_mu);
}

/* One answer: settles its entry if it waits, its parked reads onto
 * *settled. Under fetch_mu. */
static void serve_answer(struct cairnfs *fs, char *line, struct parked **settled) {
  char *sp = strchr(line, ' ');
  if (!sp) return;
  *sp++ = '\0';
  struct fetch *f = fetch_find(line);
  if (!f || f->state != 1) return;
  size_t n = strcspn(sp, " ");
  if (sp[0] != '-' && n > 0 && n < sizeof f->blob && !sp[n]) {
    memcpy(f->blob, sp, n + 1);
    f->state = 0;
  } else {
    if (fs->debug_fetch) fprintf(stderr, "cairnfs: fetching %s: %s\n", line, sp);
    f->state = -EIO;
  }
  f->when = now_ms();
  serve_last = f->when;
  parked_settle(f, settled);
  pthread_cond_broadcast(&fetch_cv);
}

/* Whether fetcher gen has a fetch in flight. Under fetch_mu. */
static bool serve_busy(unsigned gen) {
  for (size_t k = 0; k < FETCH_BUCKETS; k++)
    for (struct fetch *f = fetches[k]; f; f = f->next)
      if (f->state == 1 && f->gen == gen) return true;
  return false;
}

/* How long sr's reader waits for an answer before it looks whether its
 * fetcher is idle (ms; -1: forever, it is stopped already), its fetcher
 * stopped when it is: FETCH_IDLE_MS since the last request or answer,
 * none in flight. The next request starts another at once. */
static int serve_idle(struct serve_reader *sr) {
  pthread_mutex_lock(&fetch_mu);
  int wait = -1;
  if (serve_fd == sr->fd) {
    uint64_t quiet = now_ms() - serve_last;
    if (quiet < FETCH_IDLE_MS || serve_busy(sr->gen)) {
      wait = quiet < FETCH_IDLE_MS ? (int)(FETCH_IDLE_MS - quiet) : FETCH_IDLE_MS;
    } else {
      serve_fd = -1;
      serve_started = 0;
      shutdown(sr->fd, SHUT_WR); /* its stdin ends: it exits, and so does our read */
      if (sr->fs->debug_fetch) fprintf(stderr, "cairnfs: the fetcher is idle: stopped\n");
    }
  }
  pthread_mutex_unlock(&fetch_mu);
  return wait;
}

/* The reader thread of one fetcher: routes its answers until it ends,
 * then fails what waits on it and reaps it. */
static void *serve_read(void *arg) {
  struct serve_reader *sr = arg;
  char buf[4096];
  size_t have = 0;
  for (;;) {
    int wait = serve_idle(sr);
    struct pollfd pf = {.fd = sr->fd, .events = POLLIN};
    int ready = poll(&pf, 1, wait);
    if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
    ssize_t k = read(sr->fd, buf + have, sizeof buf - 1 - have);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    have += (size_t)k;
    buf[have] = '\0';
    char *line = buf, *nl;
    struct parked *settled = NULL;
    pthread_mutex_lock(&fetch_mu);
    while ((nl = strchr(line, '\n'))) {
      *nl = '\0';
      serve_answer(sr->fs, line, &settled);
      line = nl + 1;
    }
    unlock_and_reply(sr->fs, settled);
    have -= (size_t)(line - buf);
    memmove(buf, line, have);
    if (have == sizeof buf - 1) have = 0; /* no answer is this long */
  }
  struct parked *settled = NULL;
  pthread_mutex_lock(&fetch_mu);
  if (serve_fd == sr->fd) serve_fd = -1;
  uint64_t now = now_ms();
  for (size_t k = 0; k < FETCH_BUCKETS; k++)
    for (struct fetch *f = fetches[k]; f; f = f->next)
      if (f->state == 1 && f->gen == sr->gen) {
        f->state = -EIO;
        f->when = now;
        parked_settle(f, &settled);
      }
  pthread_cond_broadcast(&fetch_cv);
  unlock_and_reply(sr->fs, settled);
  close(sr->fd);
  int status = 0;
  while (waitpid(sr->pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (sr->fs->debug_fetch) fprintf(stderr, "cairnfs: the fetcher ended (status %d)\n", status);
  free(sr);
  return NULL;
}

/* Starts `cairn fill --serve` and its reader. Under fetch_mu. */
static int serve_start(struct cairnfs *fs) {
  uint64_t now = now_ms();
  if (serve_started && now - serve_started < SERVE_RESTART_MS) return -EIO;
  serve_started = now;
  char exe[PATH_MAX];
  self_sibling("cairn", "cairn", exe, sizeof exe); /* else on PATH */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return -errno;
  struct serve_reader *sr = malloc(sizeof *sr);
  if (!sr) {
    close(sv[0]);
    close(sv[1]);
    return -ENOMEM;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, sv[1], STDOUT_FILENO);
  char *argv[] = {exe, "--store", (char *)cairn_store_dir(fs->st), "fill", "--serve", NULL};
  extern char **environ;
  pid_t pid;
  int r = posix_spawnp(&pid, exe, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  if (r != 0) {
    if (fs->debug_fetch) fprintf(stderr, "cairnfs: %s: %s\n", exe, strerror(r));
    close(sv[0]);
    free(sr);
    return -r;
  }
  *sr = (struct serve_reader){.fs = fs, .fd = sv[0], .pid = pid, .gen = serve_gen + 1};
  pthread_t tid;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  r = pthread_create(&tid, &at, serve_read, sr);
  pthread_attr_destroy(&at);
  if (r != 0) { /* its stdin closed: it ends; reaped as a zombie's parent */
    close(sv[0]);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    free(sr);
    return -r;
  }
  serve_fd = sv[0];
  serve_gen++;
  serve_last = now;
  return 0;
}

/* Asks the fetcher (started if none runs) for sha256. Under fetch_mu. A
 * request not written whole stops that fetcher: its reader then fails
 * what waits on it. */
static int serve_ask(struct cairnfs *fs, const char *sha256) {
  if (serve_fd < 0) {
    int r = serve_start(fs);
    if (r < 0) return r;
  }
  char line[128];
  int n = snprintf(line, sizeof line, "%s\n", sha256);
  if (n < 0 || (size_t)n >= sizeof line) return -EINVAL;
  ssize_t k;
  while ((k = send(serve_fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT)) < 0 && errno == EINTR) {
  }
  if (k == n) {
    serve_last = now_ms();
    return 0;
  }
  if (fs->debug_fetch)
    fprintf(stderr, "cairnfs: fetching %s: the fetcher does not take it\n", sha256);
  shutdown(serve_fd, SHUT_RDWR);
  return -EIO;
}

/* The entry of the pending blob b, made if none (under fetch_mu); NULL:
 * out of memory. */
static struct fetch *fetch_entry(const char *b) {
  struct fetch *f = fetch_find(b);
  if (f) return f;
  size_t k = fetch_bucket(b);
  f = calloc(1, sizeof *f);
  if (!f || !(f->sha256 = strdup(b))) {
    free(f);
    return NULL;
  }
  f->state = -EAGAIN;
  f->next = fetches[k];
  fetches[k] = f;
  return f;
}

/* Where f stands (under fetch_mu), the fetcher asked if it is not yet,
 * or failed long enough ago: 0 fetched, 1 fetching, -EIO failed. */
static int fetch_state(struct cairnfs *fs, struct fetch *f) {
  for (;;) {
    if (f->state == 0 || f->state == 1) return f->state;
    if (f->state != -EAGAIN && now_ms() - f->when < FETCH_RETRY_MS) return -EIO;
    f->state = 1;
    int asked = serve_ask(fs, f->sha256);
    f->gen = serve_gen;
    if (asked < 0) {
      f->state = -EIO;
      f->when = now_ms();
      pthread_cond_broadcast(&fetch_cv);
    }
  }
}

/* A handle of our own for stored_find (look_mu): the database is asked
 * by one thread at a time, and closed after each question. */
static pthread_mutex_t look_mu = PTHREAD_MUTEX_INITIALIZER;
static cairn_store *look_st;

/* Whether the store holds the content of the pending blob b already
 * (stored by the fill, or a fetch by another mount), its entry then set
 * fetched: a blob is in the store only once verified and durable, so
 * what it names needs no fetcher. Asked once per entry not yet asked,
 * and again as a failed fetch is retried, while no fetcher runs: one
 * that runs finds a stored file itself, and a container's first reads
 * do not pay the question on top of the fetch; fetch_mu not held. */
static void stored_find(struct cairnfs *fs, const char *b) {
  pthread_mutex_lock(&fetch_mu);
  struct fetch *f = fetch_find(b);
  bool ask = serve_fd < 0 &&
             (!f || f->state == -EAGAIN || (f->state < 0 && now_ms() - f->when >= FETCH_RETRY_MS));
  pthread_mutex_unlock(&fetch_mu);
  if (!ask) return;
  char blob[48];
  pthread_mutex_lock(&look_mu);
  if (!look_st && cairn_store_open_lazy_flags(cairn_store_dir(fs->st), 0, &look_st) < 0) {
    cairn_store_close(look_st);
    look_st = NULL;
  }
  int r = look_st ? cairn_blob_find_sha256(look_st, b, blob) : -EIO;
  if (look_st) cairn_store_idle(look_st);
  pthread_mutex_unlock(&look_mu);
  if (r <= 0) return;
  pthread_mutex_lock(&fetch_mu);
  f = fetch_stopped ? NULL : fetch_entry(b);
  if (f && f->state != 0 && f->state != 1) {
    memcpy(f->blob, blob, sizeof f->blob);
    f->state = 0;
    if (fs->debug_fetch) fprintf(stderr, "cairnfs: %s is stored: %s\n", b, blob);
  }
  pthread_mutex_unlock(&fetch_mu);
}

int cairnfs_blob_name(struct cairnfs *fs, const cairn_node *n, const char **name) {
  const char *b = n->blob ? cairn_tree_str(fs->tree, n->blob) : NULL;
  *name = b;
  if (!b || !cairn_blob_is_pending(b)) return 0;
  stored_find(fs, b);
  pthread_mutex_lock(&fetch_mu);
  struct fetch *f = fetch_entry(b);
  int r = f ? 1 : -ENOMEM;
  while (r == 1 && (r = fetch_state(fs, f)) == 1) pthread_cond_wait(&fetch_cv, &fetch_mu);
  pthread_mutex_unlock(&fetch_mu);
  if (r == 0) *name = f->blob;
  return r;
}

int cairnfs_read_park(fuse_req_t req, struct cairnfs *fs, const cairn_node *n, off_t off,
                      size_t len) {
  const char *b = cairn_tree_str(fs->tree, n->blob);
  if (!cairn_blob_is_pending(b)) return 0;
  stored_find(fs, b);
  struct parked *p = malloc(sizeof *p);
  if (!p) return 0;
  *p = (struct parked){.req = req, .size = n->size, .off = off, .len = len};
  pthread_mutex_lock(&fetch_mu);
  struct fetch *f = fetch_stopped ? NULL : fetch_entry(b);
  bool parked = f && fetch_state(fs, f) == 1;
  if (parked) {
    p->next = f->parked;
    f->parked = p;
  }
  pthread_mutex_unlock(&fetch_mu);
  if (!parked) free(p);
  return parked;
}

void cairnfs_fetch_stop(void) {
  pthread_mutex_lock(&fetch_mu);
  fetch_stopped = true;
  for (size_t k = 0; k < FETCH_BUCKETS; k++)
    for (struct fetch *f = fetches[k]; f; f = f->next) {
      struct parked *none = NULL;
      parked_settle(f, &none);
    }
  while (fetch_replying) pthread_cond_wait(&fetch_cv, &fetch_mu);
  pthread_mutex_unlock(&fetch_mu);
  pthread_mutex_lock(&look_mu);
  cairn_store_close(look_st);
  look_st = NULL;
  pthread_mutex_unlock(&look_mu);
}
