/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn-snapshotter — containerd's snapshots API
 * (containerd.services.snapshots.v1.Snapshots) over gRPC on a unix
 * socket, served from a cairn store: containerd uses it as a proxy plugin
 * ([proxy_plugins.cairn] type = "snapshot" address = SOCK).
 *
 *   cairn-snapshotter [--store DIR] [--address SOCK] [--no-fill] [--idle SECS]
 *
 * A front end: it decodes each request (protobuf-c, generated at build
 * time from containerd's own .proto files), calls libcairn
 * (cairn/snapshot.h) and encodes the answer; the semantics are the
 * store's. THREADS calls at a time: each thread has its own store handle
 * (a handle is one thread's) and its own gRPC C core completion queue, on
 * which it asks for a call, serves it, and asks for the next; so a
 * Commit that writes a layer, or a Prepare or Mounts that starts a
 * chain's cairnfs, does not hold up containerd's other calls.
 *
 * The listening socket is ours (an accepting thread hands each connection
 * to gRPC), so that after --idle seconds without a call the process can
 * exec cairn-snapshotter-idle (libexec/cairn/, libc only), which holds the
 * socket and containerd's connections and execs us again, with them
 * (--listen-fd, --conn-fd), once a call comes: the same PID, and none of
 * gRPC's libraries resident meanwhile.
 */
#include "cairn.h"
#include "cleanup.h"
#include "report.h"
#include "self.h"
#include "version.h"

#include <errno.h>
#include <getopt.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <grpc/grpc_posix.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "github.com/containerd/containerd/api/services/snapshots/v1/snapshots.pb-c.h"
#include "google/protobuf/empty.pb-c.h"

#define DEFAULT_ADDRESS "/run/cairn/snapshotter.sock"
#define SERVICE "/containerd.services.snapshots.v1.Snapshots/"
#define USAGE "cairn-snapshotter [--store DIR] [--address SOCK] [--no-fill] [--idle SECS]"
#define LIST_BATCH 100  /* infos a List message carries, as containerd's service */
#define THREADS 4       /* calls served at once */
#define DEFAULT_IDLE 5  /* seconds without a call before the dormant form */
#define MAX_CONN_FDS 64 /* --conn-fd's: cairn-snapshotter-idle's MAX_CONNS */

/* the generated names, shorter */
#define SN(x) Containerd__Services__Snapshots__V1__##x
#define sn(x) containerd__services__snapshots__v1__##x
typedef SN(Info) Info;
typedef Containerd__Types__Mount Mount;

static const char usage_text[] =
    "usage: cairn-snapshotter [--store DIR] [--address SOCK] [--no-fill] [--idle SECS]\n"
    "       cairn-snapshotter --help | --version\n"
    "\n"
    "Serves containerd's snapshots API (a proxy plugin) from a cairn store.\n"
    "A container's root is an overlay on one cairnfs mount of its chain of\n"
    "layers (cairnfs beside this program, else on PATH; cairn mounts lists it).\n"
    "\n"
    "  --store DIR      the store (default: cairn's, as cairn(1) picks it)\n"
    "  --address SOCK   the unix socket to serve on (default " DEFAULT_ADDRESS ")\n"
    "  --no-fill        start no background fill of a chain's lazy layers when an\n"
    "                   image's last layer is prepared or its mount starts (cairn\n"
    "                   fill, beside this program, else on PATH): their files are\n"
    "                   fetched on first read only\n"
    "  --idle SECS      after SECS without a call (default 5; 0: never), wait\n"
    "                   dormant: the same process holds only the socket, with\n"
    "                   libc alone, and serves again when the next call comes\n"
    "  --help           this text\n"
    "  --version        the version\n";

/* ---- a call's answer -------------------------------------------------- */

struct answer {
  grpc_status_code code;
  char why[1200];
  grpc_call *call; /* where each message goes as it is made (List streams) */
  grpc_completion_queue *cq;
};

static bool wait_tag(grpc_completion_queue *cq, void *tag, bool stop);

/* Sends m now: a unary method's answer, or one of List's. */
static int answer_msg(struct answer *a, const ProtobufCMessage *m) {
  size_t len = protobuf_c_message_get_packed_size(m);
  grpc_slice s = grpc_slice_malloc(len);
  protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  grpc_op op;
  memset(&op, 0, sizeof(op));
  op.op = GRPC_OP_SEND_MESSAGE;
  op.data.send_message.send_message = bb;
  bool ok = grpc_call_start_batch(a->call, &op, 1, (void *)3, NULL) == GRPC_CALL_OK &&
            wait_tag(a->cq, (void *)3, false);
  grpc_byte_buffer_destroy(bb);
  if (ok) return 0;
  a->code = GRPC_STATUS_UNAVAILABLE;
  snprintf(a->why, sizeof(a->why), "the answer could not be sent");
  return -EPIPE;
}

/* libcairn's error as containerd's code (errdefs.ToGRPC's). */
static int answer_fail(struct answer *a, cairn_store *st, int err) {
  a->code = err == -ENOENT   ? GRPC_STATUS_NOT_FOUND
            : err == -EEXIST ? GRPC_STATUS_ALREADY_EXISTS
            : err == -EBUSY  ? GRPC_STATUS_FAILED_PRECONDITION
            : err == -EINVAL ? GRPC_STATUS_INVALID_ARGUMENT
                             : GRPC_STATUS_UNKNOWN;
  snprintf(a->why, sizeof(a->why), "%s", report_why(st, err));
  return err;
}

/* ---- requests into libcairn's types ----------------------------------- */

typedef struct {
  ProtobufCMessage base;
  char *key;
  char *value;
} LabelEntry; /* every map<string, string> entry has this layout */

static cairn_snapshot_label *labels_in(size_t n, void **entries) {
  cairn_snapshot_label *l = calloc(n + 1, sizeof(*l));
  for (size_t i = 0; l && i < n; i++) {
    LabelEntry *e = entries[i];
    l[i].key = e->key;
    l[i].value = e->value;
  }
  return l;
}

/* ---- answers from libcairn's types ------------------------------------ */

struct info_buf { /* an Info and what it points to */
  Info info;
  Google__Protobuf__Timestamp created, updated;
  SN(Info__LabelsEntry) * entries;
  SN(Info__LabelsEntry) * *ptrs;
};

static int info_out(struct info_buf *b, const cairn_snapshot *s) {
  sn(info__init)(&b->info);
  google__protobuf__timestamp__init(&b->created);
  google__protobuf__timestamp__init(&b->updated);
  b->info.name = s->name;
  b->info.parent = s->parent;
  b->info.kind = (SN(Kind))s->kind;
  b->created.seconds = s->created_ns / 1000000000;
  b->created.nanos = (int32_t)(s->created_ns % 1000000000);
  b->updated.seconds = s->updated_ns / 1000000000;
  b->updated.nanos = (int32_t)(s->updated_ns % 1000000000);
  b->info.created_at = &b->created;
  b->info.updated_at = &b->updated;
  b->entries = calloc(s->n_labels + 1, sizeof(*b->entries));
  b->ptrs = calloc(s->n_labels + 1, sizeof(*b->ptrs));
  if (!b->entries || !b->ptrs) return -ENOMEM;
  for (size_t i = 0; i < s->n_labels; i++) {
    sn(info__labels_entry__init)(&b->entries[i]);
    b->entries[i].key = s->labels[i].key;
    b->entries[i].value = s->labels[i].value;
    b->ptrs[i] = &b->entries[i];
  }
  b->info.n_labels = s->n_labels;
  b->info.labels = b->ptrs;
  return 0;
}

static void info_buf_free(struct info_buf *b) {
  free(b->entries);
  free(b->ptrs);
}

/* A mounts answer (Prepare, View, Mounts: the same layout). */
typedef struct {
  ProtobufCMessage base;
  size_t n_mounts;
  Mount **mounts;
} MountsAnswer;

/* cairnfs, which mounts a snapshot's chain, and cairn, whose fill fetches
 * a chain's lazy layers in the background: beside this program, else on
 * PATH. No fill with --no-fill (fill_bin NULL). */
static char cairnfs_bin[PATH_MAX] = "cairnfs";
static char cairn_bin[PATH_MAX] = "cairn";
static const char *fill_bin = cairn_bin;

static void cairnfs_find(void) {
  self_sibling("cairnfs", "cairnfs", cairnfs_bin, sizeof(cairnfs_bin));
  self_sibling("cairn", "cairn", cairn_bin, sizeof(cairn_bin));
}

static int mounts_answer(struct answer *a, cairn_store *st, const char *key,
                         const ProtobufCMessageDescriptor *desc) {
  cairn_snapshot_mount m;
  int r = cairn_snapshot_mounts_fill(st, key, cairnfs_bin, fill_bin, &m);
  if (r < 0) return answer_fail(a, st, r);
  Mount mount;
  containerd__types__mount__init(&mount);
  mount.type = m.type;
  mount.source = m.source;
  mount.target = (char *)"";
  mount.n_options = m.n_options;
  mount.options = m.options;
  Mount *mounts[1] = {&mount};
  MountsAnswer ans;
  protobuf_c_message_init(desc, &ans);
  ans.n_mounts = 1;
  ans.mounts = mounts;
  r = answer_msg(a, &ans.base);
  cairn_snapshot_mount_free(&m);
  return r;
}

static int empty_answer(struct answer *a) {
  Google__Protobuf__Empty e;
  google__protobuf__empty__init(&e);
  return answer_msg(a, &e.base);
}

/* ---- the methods ------------------------------------------------------ */

static int do_prepare(cairn_store *st, const uint8_t *in, size_t len, struct answer *a, bool view) {
  /* PrepareSnapshotRequest and ViewSnapshotRequest have one layout */
  SN(PrepareSnapshotRequest) *q =
      view ? (SN(PrepareSnapshotRequest) *)sn(view_snapshot_request__unpack)(NULL, len, in)
           : sn(prepare_snapshot_request__unpack)(NULL, len, in);
  if (!q) return -EBADMSG;
  cairn_autofree cairn_snapshot_label *labels = labels_in(q->n_labels, (void **)q->labels);
  int r = cairn_snapshot_prepare_fill(st, view ? CAIRN_SNAPSHOT_VIEW : CAIRN_SNAPSHOT_ACTIVE,
                                      q->key, q->parent, labels, q->n_labels, fill_bin);
  if (r < 0)
    answer_fail(a, st, r);
  else
    r = mounts_answer(a, st, q->key,
                      view ? &sn(view_snapshot_response__descriptor)
                           : &sn(prepare_snapshot_response__descriptor));
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return r;
}

static int do_mounts(cairn_store *st, const uint8_t *in, size_t len, struct answer *a) {
  SN(MountsRequest) *q = sn(mounts_request__unpack)(NULL, len, in);
  if (!q) return -EBADMSG;
  int r = mounts_answer(a, st, q->key, &sn(mounts_response__descriptor));
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return r;
}

static int do_commit(cairn_store *st, const uint8_t *in, size_t len, struct answer *a) {
  SN(CommitSnapshotRequest) *q = sn(commit_snapshot_request__unpack)(NULL, len, in);
  if (!q) return -EBADMSG;
  cairn_autofree cairn_snapshot_label *labels = labels_in(q->n_labels, (void **)q->labels);
  int r = cairn_snapshot_commit(st, q->name, q->key, labels, q->n_labels);
  r = r < 0 ? answer_fail(a, st, r) : empty_answer(a);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return r;
}

static int do_remove(cairn_store *st, const uint8_t *in, size_t len, struct answer *a) {
  SN(RemoveSnapshotRequest) *q = sn(remove_snapshot_request__unpack)(NULL, len, in);
  if (!q) return -EBADMSG;
  int r = cairn_snapshot_remove(st, q->key);
  r = r < 0 ? answer_fail(a, st, r) : empty_answer(a);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return r;
}

/* A StatSnapshotResponse or UpdateSnapshotResponse (one layout) of s. */
static int info_answer(struct answer *a, const cairn_snapshot *s, bool update) {
  struct info_buf b = {0};
  int r = info_out(&b, s);
  if (r == 0) {
    SN(StatSnapshotResponse) ans;
    protobuf_c_message_init(update ? &sn(update_snapshot_response__descriptor)
                                   : &sn(stat_snapshot_response__descriptor),
                            &ans);
    ans.info = &b.info;
    r = answer_msg(a, &ans.base);
  }
  info_buf_free(&b);
  return r;
}

static int do_stat(cairn_store *st, const uint8_t *in, size_t len, struct answer *a) {
  SN(StatSnapshotRequest) *q = sn(stat_snapshot_request__unpack)(NULL, len, in);
  if (!q) return -EBADMSG;
  cairn_snapshot s;
  int r = cairn_snapshot_stat(st, q->key, &s);
  r = r < 0 ? answer_fail(a, st, r) : info_answer(a, &s, false);
  cairn_snapshot_free(&s);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return r;
}

static int do_update(cairn_store *st, const uint8_t *in, size_t len, struct answer *a) {
  SN(UpdateSnapshotRequest) *q = sn(update_snapshot_request__unpack)(NULL, len, in);
  if (!q) return -EBADMSG;
  int r = -EBADMSG;
  if (q->info) {
    cairn_autofree cairn_snapshot_label *labels =
        labels_in(q->info->n_labels, (void **)q->info->labels);
    cairn_snapshot info = {.name = q->info->name,
                           .parent = q->info->parent,
                           .labels = labels,
                           .n_labels = q->info->n_labels};
    size_t n_paths = q->update_mask ? q->update_mask->n_paths : 0;
    const char *const *paths = q->update_mask ? (const char *const *)q->update_mask->paths : NULL;
    cairn_snapshot s;
    r = cairn_snapshot_update(st, &info, paths, n_paths, &s);
    r = r < 0 ? answer_fail(a, st, r) : info_answer(a, &s, true);
    cairn_snapshot_free(&s);
  }
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return r;
}

struct list_state {
  struct answer *a;
  struct info_buf bufs[LIST_BATCH];
  Info *infos[LIST_BATCH];
  cairn_snapshot snaps[LIST_BATCH];
  size_t n;
};

static int list_flush(struct list_state *ls) {
  if (ls->n == 0) return 0;
  SN(ListSnapshotsResponse) ans;
  sn(list_snapshots_response__init)(&ans);
  int r = 0;
  for (size_t i = 0; r == 0 && i < ls->n; i++) {
    r = info_out(&ls->bufs[i], &ls->snaps[i]);
    ls->infos[i] = &ls->bufs[i].info;
  }
  ans.n_info = ls->n;
  ans.info = ls->infos;
  if (r == 0) r = answer_msg(ls->a, &ans.base);
  for (size_t i = 0; i < ls->n; i++) {
    info_buf_free(&ls->bufs[i]);
    cairn_snapshot_free(&ls->snaps[i]);
  }
  memset(ls->bufs, 0, sizeof(ls->bufs));
  ls->n = 0;
  return r;
}

static int list_one(const cairn_snapshot *s, void *arg) {
  struct list_state *ls = arg;
  cairn_snapshot *c = &ls->snaps[ls->n++];
  c->name = strdup(s->name);
  c->parent = strdup(s->parent);
  c->kind = s->kind;
  c->created_ns = s->created_ns;
  c->updated_ns = s->updated_ns;
  c->labels = calloc(s->n_labels + 1, sizeof(*c->labels));
  if (!c->name || !c->parent || !c->labels) return -ENOMEM;
  for (size_t i = 0; i < s->n_labels; i++, c->n_labels++) {
    c->labels[i].key = strdup(s->labels[i].key);
    c->labels[i].value = strdup(s->labels[i].value);
    if (!c->labels[i].key || !c->labels[i].value) return -ENOMEM;
  }
  return ls->n == LIST_BATCH ? list_flush(ls) : 0;
}

static int do_list(cairn_store *st, const uint8_t *in, size_t len, struct answer *a) {
  SN(ListSnapshotsRequest) *q = sn(list_snapshots_request__unpack)(NULL, len, in);
  if (!q) return -EBADMSG;
  struct list_state *ls = calloc(1, sizeof(*ls));
  int r = -ENOMEM;
  if (ls) {
    ls->a = a;
    r = cairn_snapshot_walk(st, (const char *const *)q->filters, q->n_filters, list_one, ls);
    if (r == 0)
      r = list_flush(ls);
    else {
      answer_fail(a, st, r);
      for (size_t i = 0; i < ls->n; i++) cairn_snapshot_free(&ls->snaps[i]);
    }
    free(ls);
  }
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return r;
}

static int do_usage(cairn_store *st, const uint8_t *in, size_t len, struct answer *a) {
  SN(UsageRequest) *q = sn(usage_request__unpack)(NULL, len, in);
  if (!q) return -EBADMSG;
  SN(UsageResponse) ans;
  sn(usage_response__init)(&ans);
  int r = cairn_snapshot_usage(st, q->key, &ans.size, &ans.inodes);
  r = r < 0 ? answer_fail(a, st, r) : answer_msg(a, &ans.base);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return r;
}

static int do_cleanup(cairn_store *st, const uint8_t *in, size_t len, struct answer *a) {
  SN(CleanupRequest) *q = sn(cleanup_request__unpack)(NULL, len, in);
  if (!q) return -EBADMSG;
  int r = cairn_snapshot_cleanup(st);
  r = r < 0 ? answer_fail(a, st, r) : empty_answer(a);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return r;
}

/* Runs the method on the request's bytes into a. */
static void dispatch(cairn_store *st, const char *method, const uint8_t *in, size_t len,
                     struct answer *a) {
  int r;
  if (strncmp(method, SERVICE, strlen(SERVICE)) != 0) {
    a->code = GRPC_STATUS_UNIMPLEMENTED;
    snprintf(a->why, sizeof(a->why), "%s: no such service", method);
    return;
  }
  const char *m = method + strlen(SERVICE);
  if (strcmp(m, "Prepare") == 0)
    r = do_prepare(st, in, len, a, false);
  else if (strcmp(m, "View") == 0)
    r = do_prepare(st, in, len, a, true);
  else if (strcmp(m, "Mounts") == 0)
    r = do_mounts(st, in, len, a);
  else if (strcmp(m, "Commit") == 0)
    r = do_commit(st, in, len, a);
  else if (strcmp(m, "Remove") == 0)
    r = do_remove(st, in, len, a);
  else if (strcmp(m, "Stat") == 0)
    r = do_stat(st, in, len, a);
  else if (strcmp(m, "Update") == 0)
    r = do_update(st, in, len, a);
  else if (strcmp(m, "List") == 0)
    r = do_list(st, in, len, a);
  else if (strcmp(m, "Usage") == 0)
    r = do_usage(st, in, len, a);
  else if (strcmp(m, "Cleanup") == 0)
    r = do_cleanup(st, in, len, a);
  else {
    a->code = GRPC_STATUS_UNIMPLEMENTED;
    snprintf(a->why, sizeof(a->why), "%s: no such method", m);
    return;
  }
  if (r < 0 && a->code == GRPC_STATUS_OK) { /* not libcairn's: the request's or memory */
    a->code = r == -EBADMSG ? GRPC_STATUS_INVALID_ARGUMENT : GRPC_STATUS_INTERNAL;
    snprintf(a->why, sizeof(a->why), "%s: %s", m,
             r == -EBADMSG ? "a request that does not decode" : strerror(-r));
  }
}

/* ---- the server: a completion queue a thread, a call at a time each ---- */

static volatile sig_atomic_t stopping;
static void on_signal(int sig) {
  (void)sig;
  stopping = 1;
}

/* --idle: the server stops (dormant set) once no call was served for
 * idle_secs, none being served (busy), and main execs the dormant form. */
static unsigned idle_secs = DEFAULT_IDLE;
static atomic_int busy;           /* calls being served */
static atomic_llong last_call_ms; /* when the last one ended, CLOCK_MONOTONIC */
static bool dormant;

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether the first thread stops the server: a signal, or --idle. */
static bool should_stop(void) {
  if (stopping || dormant) return true;
  if (idle_secs == 0 || atomic_load(&busy) > 0 ||
      now_ms() - atomic_load(&last_call_ms) < (long long)idle_secs * 1000)
    return false;
  dormant = true;
  return true;
}

/* Waits for the event of tag on cq; false if it failed, or (stop) once a
 * signal or --idle asked us to stop. Only the first thread's wait for a
 * call stops so: the others, and every call's own batches, wait for gRPC
 * to end them (the server's shutdown fails the calls they asked for), so
 * that no thread leaves work of gRPC's pending on its queue; a call
 * another thread took as the idle time ran out is served before we go. */
static bool wait_tag(grpc_completion_queue *cq, void *tag, bool stop) {
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(
        cq, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(500, GPR_TIMESPAN)),
        NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
      if (stop && should_stop()) return false;
      continue;
    }
    if (ev.type != GRPC_OP_COMPLETE) return false;
    if (ev.tag == tag) return ev.success;
  }
}

static void serve_call(cairn_store *st, grpc_completion_queue *cq, grpc_call *call,
                       const char *method) {
  grpc_byte_buffer *req = NULL;
  grpc_op ops[4];
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_RECV_MESSAGE;
  ops[1].data.recv_message.recv_message = &req;
  if (grpc_call_start_batch(call, ops, 2, (void *)2, NULL) != GRPC_CALL_OK ||
      !wait_tag(cq, (void *)2, false))
    return;
  struct answer *a = calloc(1, sizeof(*a));
  if (!a) return;
  grpc_slice in = grpc_empty_slice();
  if (req) {
    grpc_byte_buffer_reader rd;
    if (grpc_byte_buffer_reader_init(&rd, req)) {
      in = grpc_byte_buffer_reader_readall(&rd);
      grpc_byte_buffer_reader_destroy(&rd);
    }
    grpc_byte_buffer_destroy(req);
  }
  a->call = call;
  a->cq = cq;
  dispatch(st, method, GRPC_SLICE_START_PTR(in), GRPC_SLICE_LENGTH(in), a);
  grpc_slice_unref(in);
  int cancelled = 0;
  grpc_slice details = grpc_slice_from_copied_string(a->why);
  memset(ops, 0, sizeof(ops));
  ops[0].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[0].data.send_status_from_server.status = a->code;
  ops[0].data.send_status_from_server.status_details = &details;
  ops[1].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[1].data.recv_close_on_server.cancelled = &cancelled;
  if (grpc_call_start_batch(call, ops, 2, (void *)4, NULL) == GRPC_CALL_OK)
    wait_tag(cq, (void *)4, false);
  grpc_slice_unref(details);
  free(a);
  /* answered: the handle's connection closed (the next call opens it
   * again) and the freed heap given back, so that what a call held (a
   * lazy Prepare's TOC and its JSON, a Commit's layer, the page cache)
   * is not kept by an idle snapshotter, in an arena per thread */
  cairn_store_idle(st);
}

/* A serving thread: its store handle and completion queue, and the call
 * it asked gRPC for, which gRPC writes into when it comes (or fails): it
 * lives as long as serve()'s frame, past the server's shutdown. */
struct server_thread {
  grpc_server *server;
  grpc_completion_queue *cq;
  cairn_store *st;
  pthread_t tid;
  bool first; /* the signals' thread: it stops the server */
  bool asked; /* a call asked for, its event not seen */
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array md;
};

static void request_done(struct server_thread *t) {
  if (t->call) grpc_call_unref(t->call);
  t->call = NULL;
  grpc_call_details_destroy(&t->details);
  grpc_metadata_array_destroy(&t->md);
  t->asked = false;
}

/* Asks for a call on the thread's queue and serves it, until the first
 * thread is asked to stop (the call it asked for is then ended by serve(),
 * once the server's shutdown failed it), or (the others) the shutdown
 * fails the call asked for. */
static void *serve_loop(void *arg) {
  struct server_thread *t = arg;
  while (!(t->first && (stopping || dormant))) {
    t->call = NULL;
    grpc_call_details_init(&t->details);
    grpc_metadata_array_init(&t->md);
    t->asked = true;
    if (grpc_server_request_call(t->server, &t->call, &t->details, &t->md, t->cq, t->cq,
                                 (void *)1) != GRPC_CALL_OK) {
      request_done(t);
      break;
    }
    bool got = wait_tag(t->cq, (void *)1, t->first);
    if (!got && t->first && (stopping || dormant)) break; /* maybe still asked: serve() ends it */
    if (got && t->call) {
      atomic_fetch_add(&busy, 1);
      char *method = grpc_slice_to_c_string(t->details.method);
      serve_call(t->st, t->cq, t->call, method);
      gpr_free(method);
      atomic_store(&last_call_ms, now_ms());
      atomic_fetch_sub(&busy, 1);
    }
    request_done(t);
    if (!got) break;
  }
  return NULL;
}

/* The accepting thread: each connection on the listening socket, handed
 * to gRPC, until stop. */
struct acceptor {
  grpc_server *server;
  grpc_server_credentials *creds;
  int lfd;
  atomic_bool stop;
  pthread_t tid;
};

static void *accept_loop(void *arg) {
  struct acceptor *ac = arg;
  while (!atomic_load(&ac->stop)) {
    struct pollfd p = {.fd = ac->lfd, .events = POLLIN};
    if (poll(&p, 1, 500) <= 0) continue;
    int c = accept4(ac->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c >= 0)
      grpc_server_add_channel_from_fd(ac->server, c, ac->creds);
    else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
      poll(NULL, 0, 100); /* out of fds, say: not a spin */
  }
  return NULL;
}

/* A listening unix socket on address, root's only from the start (no chmod
 * after), CLOEXEC (no cairnfs we start holds it); a socket an earlier run
 * left there is replaced (nothing else is removed). The fd, or a negative
 * errno. */
static int listen_on(const char *address) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", address);
  struct stat sb;
  if (lstat(address, &sb) == 0 && S_ISSOCK(sb.st_mode)) unlink(address);
  mode_t mask = umask(0077);
  int r = bind(fd, (struct sockaddr *)&sun, sizeof(sun));
  umask(mask);
  if (r < 0 || listen(fd, SOMAXCONN) < 0) {
    r = -errno;
    close(fd);
    return r;
  }
  return fd;
}

/* Serves on the listening socket *lfd at address, and the connections
 * conns (accepted by the dormant form), with THREADS threads: the first
 * uses st, the others a handle each of the same store. Returns once a
 * signal or --idle (dormant) stopped it, every call it took answered;
 * unless dormant, address removed and *lfd closed (-1). */
static int serve(cairn_store *st, const char *address, int *lfd, const int *conns, int n_conns) {
  struct server_thread t[THREADS] = {{0}};
  t[0].st = st;
  t[0].first = true;
  for (int i = 1; i < THREADS; i++) {
    int r = cairn_store_open_flags(cairn_store_dir(st), CAIRN_STORE_OWN, &t[i].st);
    if (r < 0) {
      int code = report_fail(r, "%s: %s", cairn_store_dir(st), report_why(t[i].st, r));
      for (int j = 1; j <= i; j++) cairn_store_close(t[j].st);
      return code;
    }
  }
  grpc_init();
  grpc_server *server = grpc_server_create(NULL, NULL);
  for (int i = 0; i < THREADS; i++) {
    t[i].server = server;
    t[i].cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(server, t[i].cq, NULL);
  }
  struct acceptor ac = {.server = server, .lfd = *lfd};
  ac.creds = grpc_insecure_server_credentials_create();
  grpc_server_start(server);
  atomic_store(&last_call_ms, now_ms());
  for (int i = 0; i < n_conns; i++) grpc_server_add_channel_from_fd(server, conns[i], ac.creds);
  /* the signals are the first thread's, which runs on this one */
  sigset_t sigs, old;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, &old);
  bool accepting = pthread_create(&ac.tid, NULL, accept_loop, &ac) == 0;
  int started = 1;
  for (; started < THREADS; started++)
    if (pthread_create(&t[started].tid, NULL, serve_loop, &t[started]) != 0) break;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  int code = 0;
  if (!accepting) {
    code = report_fail(-EAGAIN, "cannot start a thread");
    stopping = 1;
  } else {
    serve_loop(&t[0]);
    /* no connection more */
    atomic_store(&ac.stop, true);
    pthread_join(ac.tid, NULL);
  }
  /* Stopping, the socket is removed, then closed, before gRPC's GOAWAY:
   * containerd's dialer, which dials again at once, retries a socket not
   * there every 10 ms until the next daemon makes it, where a socket
   * there that refuses (closed first) or resets (closed last) would put
   * its client in a backoff of a second or more, failing the calls made
   * meanwhile. Dormant, it stays open: the client's dial waits there for
   * the dormant form, and the calls being served end as they would. The
   * shutdown fails the calls the other threads asked for, which ends
   * them once the call each serves is done. */
  if (!dormant) {
    unlink(address);
    close(*lfd);
    *lfd = -1;
  }
  grpc_server_shutdown_and_notify(server, t[0].cq, (void *)5);
  if (!dormant) grpc_server_cancel_all_calls(server);
  wait_tag(t[0].cq, (void *)5, false);
  for (int i = 1; i < started; i++) pthread_join(t[i].tid, NULL);
  grpc_server_destroy(server);
  grpc_server_credentials_release(ac.creds);
  for (int i = 0; i < THREADS; i++) {
    grpc_completion_queue_shutdown(t[i].cq);
    while (grpc_completion_queue_next(t[i].cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(t[i].cq);
    if (t[i].asked) request_done(&t[i]);
  }
  grpc_shutdown();
  for (int i = 1; i < THREADS; i++) cairn_store_close(t[i].st);
  return code;
}

/* The dormant form: cairn-snapshotter-idle (libexec's: self_libexec)
 * holding lfd, which runs this program (its file as
 * it is now: an upgraded one) with these options again once a call comes.
 * Returns only if it could not be run (a negative errno). */
static int exec_dormant(int lfd, const char *store_dir, const char *address) {
  char idle_bin[PATH_MAX], self[PATH_MAX], fd_s[16], idle_s[16];
  self_libexec("cairn-snapshotter-idle", idle_bin, sizeof(idle_bin));
  int r = self_exe(self, sizeof(self));
  if (r < 0) return r;
  snprintf(fd_s, sizeof(fd_s), "%d", lfd);
  snprintf(idle_s, sizeof(idle_s), "%u", idle_secs);
  const char *argv[] = {idle_bin,
                        fd_s,
                        address,
                        self,
                        "--store",
                        store_dir,
                        "--address",
                        address,
                        "--idle",
                        idle_s,
                        fill_bin ? NULL : "--no-fill",
                        NULL};
  int flags = fcntl(lfd, F_GETFD);
  if (flags < 0 || fcntl(lfd, F_SETFD, flags & ~FD_CLOEXEC) < 0) return -errno;
  execv(idle_bin, (char *const *)argv);
  r = -errno;
  fcntl(lfd, F_SETFD, flags);
  return r;
}

/* An fd number of --listen-fd or --conn-fd (the dormant form's), or -1. */
static int fd_arg(const char *s) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  return errno || *end || end == s || v < 0 || v > INT_MAX ? -1 : (int)v;
}

/* Whether fd is a stream socket, listening (listen) or connected, and is
 * made ours only (no cairnfs or fill we start holds it) and, for gRPC,
 * non-blocking. */
static bool fd_take(int fd, bool listen) {
  int v = 0;
  socklen_t len = sizeof(v);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) < 0 || v != listen) return false;
  int fl = fcntl(fd, F_GETFL);
  return fcntl(fd, F_SETFD, FD_CLOEXEC) == 0 && fl >= 0 &&
         (listen || fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0);
}

int main(int argc, char **argv) {
  report_prog = "cairn-snapshotter";
  static const struct option opts[] = {
      {"store", required_argument, NULL, 's'},
      {"address", required_argument, NULL, 'a'},
      {"no-fill", no_argument, NULL, 'F'}, /* no background fill: fill_bin NULL */
      {"idle", required_argument, NULL, 'i'},
      {"listen-fd", required_argument, NULL, 'L'}, /* the dormant form's: internal */
      {"conn-fd", required_argument, NULL, 'C'},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0},
  };
  const char *store_dir = NULL, *address = DEFAULT_ADDRESS;
  int lfd = -1, conns[MAX_CONN_FDS], n_conns = 0;
  int c;
  char *end;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 's': store_dir = optarg; break;
    case 'a': address = optarg; break;
    case 'F': fill_bin = NULL; break;
    case 'i': {
      errno = 0;
      unsigned long v = strtoul(optarg, &end, 10);
      if (errno || *end || end == optarg || optarg[0] == '-' || v > 86400 * 365)
        return report_usage(USAGE, "--idle %s: not a number of seconds", optarg);
      idle_secs = (unsigned)v;
      break;
    }
    case 'L':
      if ((lfd = fd_arg(optarg)) < 0)
        return report_usage(USAGE, "--listen-fd %s: not an fd", optarg);
      break;
    case 'C':
      if (n_conns == MAX_CONN_FDS || (conns[n_conns++] = fd_arg(optarg)) < 0)
        return report_usage(USAGE, "--conn-fd %s: not an fd", optarg);
      break;
    case 'h': fputs(usage_text, stdout); return 0;
    case 'V': version_print(); return 0;
    default: return report_usage(USAGE, "%s: unknown option", argv[optind - 1]);
    }
  }
  if (optind < argc) return report_usage(USAGE, "%s: unexpected", argv[optind]);
  if (address[0] != '/') return report_usage(USAGE, "--address %s: not an absolute path", address);
  if (strlen(address) >= 108)
    return report_usage(USAGE, "--address %s: longer than a unix socket's path may be", address);
  if (n_conns > 0 && lfd < 0) return report_usage(USAGE, "--conn-fd: needs --listen-fd");
  /* the listening socket and connections the dormant form passed */
  if (lfd >= 0 && !fd_take(lfd, true))
    return report_usage(USAGE, "--listen-fd %d: not a listening socket", lfd);
  for (int i = 0; i < n_conns; i++)
    if (!fd_take(conns[i], false))
      return report_usage(USAGE, "--conn-fd %d: not a connected socket", conns[i]);
  cairn_store *st = NULL;
  int r = cairn_store_open_flags(store_dir, CAIRN_STORE_CREATE | CAIRN_STORE_OWN, &st);
  if (r < 0) {
    int code = report_fail(r, "%s: %s", store_dir ? store_dir : "store", report_why(st, r));
    cairn_store_close(st);
    return code;
  }
  cairnfs_find();
  /* what a crash left: a chain's mount no snapshot uses, directories no
   * row owns (not when the dormant form wakes us: nothing crashed) */
  if (lfd < 0 && (r = cairn_snapshot_cleanup(st)) < 0)
    report_fail(r, "%s: cleanup: %s", cairn_store_dir(st), report_why(st, r));
  if (strcmp(address, DEFAULT_ADDRESS) == 0) mkdir("/run/cairn", 0700);
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  /* the dormant form execs us with them blocked: one sent meanwhile is
   * taken now */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigprocmask(SIG_UNBLOCK, &sigs, NULL);
  if (lfd < 0 && (lfd = listen_on(address)) < 0) {
    r = report_fail(-EADDRNOTAVAIL, "%s: cannot listen there: %s", address, strerror(-lfd));
    cairn_store_close(st);
    return r;
  }
  for (;;) {
    r = serve(st, address, &lfd, conns, n_conns);
    n_conns = 0;
    if (!dormant) break;
    /* a signal from here on is pending until the dormant form takes it */
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    if (stopping) break;
    int e = exec_dormant(lfd, cairn_store_dir(st), address);
    report_fail(e, "cannot wait dormant (serving on, --idle 0): %s", strerror(-e));
    sigprocmask(SIG_UNBLOCK, &sigs, NULL);
    idle_secs = 0;
    dormant = false;
  }
  if (lfd >= 0) { /* a signal as it went dormant */
    unlink(address);
    close(lfd);
  }
  cairn_store_close(st);
  return r;
}
