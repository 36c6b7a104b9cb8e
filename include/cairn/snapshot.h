/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn/snapshot.h — libcairn's public face: containerd snapshots (store/snapshot.c),
 * what cairn-snapshotter serves. Included by cairn.h, whose comment gives
 * the conventions every function here keeps (errors, ids, handles).
 *
 * A snapshot is named by a key; it is active (writable), a view
 * (read-only) or committed, and has at most one parent, a committed
 * snapshot. The semantics are those of containerd's overlayfs snapshotter:
 * its records are rows of the store's database (tables snapshots and
 * snapshot_labels), its files the directories STORE/snapshots/ID/fs (and
 * work, for an active one); its mounts stack them as a kernel overlay, or
 * (cairn_snapshot_mounts_chain) put its own over one cairnfs mount of its
 * parent's chain of layers.
 * Errors, besides the contract's: -EEXIST a key that is taken,
 * -EBUSY a snapshot with children (remove), one not active (commit) or
 * a committed one (mounts),
 * -EINVAL a parent not committed, a label too long, a field that cannot be
 * updated or a bad filter.
 */
#ifndef CAIRN_SNAPSHOT_H
#define CAIRN_SNAPSHOT_H

#include "store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* containerd's numbers (snapshots.v1.Kind). */
enum cairn_snapshot_kind {
  CAIRN_SNAPSHOT_VIEW = 1,
  CAIRN_SNAPSHOT_ACTIVE = 2,
  CAIRN_SNAPSHOT_COMMITTED = 3,
};

typedef struct cairn_snapshot_label {
  char *key;
  char *value;
} cairn_snapshot_label;

typedef struct cairn_snapshot {
  char *name;
  char *parent; /* "" for none */
  enum cairn_snapshot_kind kind;
  int64_t created_ns, updated_ns; /* since the epoch, UTC */
  cairn_snapshot_label *labels;
  size_t n_labels;
} cairn_snapshot;

/* Frees what s holds (not s). */
void cairn_snapshot_free(cairn_snapshot *s);

/* A new active snapshot (kind CAIRN_SNAPSHOT_ACTIVE) or view
 * (CAIRN_SNAPSHOT_VIEW) key on parent ("" or NULL: none), with labels.
 * A remote snapshot: an active one labelled containerd.io/snapshot.ref
 * (the chain id containerd's unpack will commit it as) whose layer on
 * parent the store holds (a lazy pull's too), or records lazily from the
 * registry (labels containerd.io/snapshot/remote/stargz.reference and
 * .digest, or containerd.io/snapshot/cri.image-ref and .layer-digest,
 * naming an eStargz or zstd:chunked layer whose TOC the manifest vouches
 * for; no image stored), is not prepared: the committed snapshot
 * NAMESPACE/N/CHAIN_ID (key's prefix up to its last "/") is made of that
 * layer instead (nothing unpacked: the chain's cairnfs mount serves it;
 * its chain recorded, with these labels), and -EEXIST says so, as
 * containerd's remote snapshotters answer; containerd then downloads
 * nothing of it. A lazy pull that fails leaves it an ordinary Prepare.
 * Returns 0; -EEXIST: key is there, or a remote snapshot was made (or was there);
 * -ENOENT: no parent snapshot; -EINVAL: an empty key, another kind, a parent not
 * committed or a label too long. */
int cairn_snapshot_prepare(cairn_store *st, enum cairn_snapshot_kind kind, const char *key,
                           const char *parent, const cairn_snapshot_label *labels, size_t n_labels);
/* As cairn_snapshot_prepare; and when cairn is not NULL (the program
 * cairn, as cairn_snapshot_mounts_fill takes it) and a remote snapshot
 * was made of an image's last layer (the labels
 * containerd.io/snapshot/cri.image-layers or
 * containerd.io/snapshot/remote/stargz.layers, which list the layer and
 * those after it, list it alone) whose chain has files to fetch: the
 * chain's background fill, as cairn_snapshot_mounts_fill starts it (one a
 * chain), so that an image pulled and not run is fetched meanwhile. */
int cairn_snapshot_prepare_fill(cairn_store *st, enum cairn_snapshot_kind kind, const char *key,
                                const char *parent, const cairn_snapshot_label *labels,
                                size_t n_labels, const char *cairn);
/* The active snapshot key becomes the committed snapshot name, with these
 * labels (not its own) and its disk usage recorded; its directory is
 * emptied once its chain is recorded as layers (its files are its layer's).
 * Returns 0; -ENOENT: no snapshot key; -EEXIST: name is there; -EBUSY: key is not active;
 * -EINVAL: a label too long. */
int cairn_snapshot_commit(cairn_store *st, const char *name, const char *key,
                          const cairn_snapshot_label *labels, size_t n_labels);
/* Removes the snapshot key and its files.
 * Returns 0; -ENOENT: no snapshot key; -EBUSY: it has children. */
int cairn_snapshot_remove(cairn_store *st, const char *key);
/* The snapshot key's record, into *out (cairn_snapshot_free it).
 * Returns 0; -ENOENT: no snapshot key. */
int cairn_snapshot_stat(cairn_store *st, const char *key, cairn_snapshot *out);
/* Updates the snapshot info->name's labels as containerd does: with no
 * paths all of them; else each path "labels" (all) or "labels.KEY" (one;
 * an empty value removes it). Its new record into *out.
 * Returns 0; -ENOENT: no such snapshot; -EINVAL: any other path, or a label too long. */
int cairn_snapshot_update(cairn_store *st, const cairn_snapshot *info, const char *const *paths,
                          size_t n_paths, cairn_snapshot *out);
/* Calls fn for every snapshot that matches one of the filters (all with
 * none), in containerd's filter syntax on the fields name, parent, kind
 * (active, view, committed) and labels.KEY: terms joined by ",", each
 * FIELD, FIELD==VALUE, FIELD!=VALUE or FIELD~=REGEX, a part or a value
 * quoted with "" if need be.
 * Returns 0, or fn's non-zero return (which stops the walk); -EINVAL: a filter not understood. */
typedef int (*cairn_snapshot_walk_fn)(const cairn_snapshot *s, void *arg);
int cairn_snapshot_walk(cairn_store *st, const char *const *filters, size_t n_filters,
                        cairn_snapshot_walk_fn fn, void *arg);
/* The bytes (allocated blocks) and inodes the snapshot key's own files
 * use: counted now for an active one, as recorded at commit else.
 * Returns 0; -ENOENT: no snapshot key. */
int cairn_snapshot_usage(cairn_store *st, const char *key, int64_t *size, int64_t *inodes);

/* A mount as containerd gives it to mount(8): type, source, options. */
typedef struct cairn_snapshot_mount {
  char *type;
  char *source;
  char **options;
  size_t n_options;
} cairn_snapshot_mount;
void cairn_snapshot_mount_free(cairn_snapshot_mount *m);
/* The mount of the snapshot key, active or a view (-EBUSY for a committed
 * one, as containerd's), in *out (cairn_snapshot_mount_free it). With no
 * parent, a bind mount of its directory. Else, its parent's chain being
 * cairn layers (one per ancestor, as every commit records them), ONE
 * read-only cairnfs mount of that chain: of the chain image (an image of
 * the chain's layers, no name, not listed by cairn images), at
 * STORE/snapshot-mounts/ID, started by running cairnfs (a path, or a name
 * looked up on PATH; cairn_snapshot_mounts: "cairnfs") unless it is
 * mounted and answers; snapshots on the same chain share it, and it ends
 * (lazily) with the chain image when the last of them is removed or
 * committed. A view's is a read-only bind of it, an active snapshot's a
 * kernel overlay with its own upper and work directories on it. Only a
 * chain recorded before chains were gets an overlay of its ancestors'
 * directories (a bind of its one parent's, for a view): a committed
 * snapshot whose chain is layers keeps its directory empty.
 * Returns 0; -ENOENT: no snapshot key; -EBUSY: it is committed; else the
 * chain mount's failure (-EIO: cairnfs failed). */
int cairn_snapshot_mounts(cairn_store *st, const char *key, cairn_snapshot_mount *out);
int cairn_snapshot_mounts_chain(cairn_store *st, const char *key, const char *cairnfs,
                                cairn_snapshot_mount *out);
/* As cairn_snapshot_mounts_chain; and when cairn is not NULL (the program
 * cairn, a path or a name looked up on PATH) and the chain's layers have
 * files a lazy pull or a lazy remote snapshot left to fetch, a background
 * `cairn fill` of the chain image (in a session of its own, its log
 * STORE/tmp/fill-ID12.log) unless one runs; it returns once that fill
 * holds its pins. A fill that does not start fails nothing. */
int cairn_snapshot_mounts_fill(cairn_store *st, const char *key, const char *cairnfs,
                               const char *cairn, cairn_snapshot_mount *out);
/* Removes the directories of STORE/snapshots/ no snapshot owns (left by an
 * interrupted prepare or remove, or by an older cairn's unpack of a
 * remote snapshot whose process is gone).
 * Returns 0. */
int cairn_snapshot_cleanup(cairn_store *st);

#ifdef __cplusplus
}
#endif

#endif
