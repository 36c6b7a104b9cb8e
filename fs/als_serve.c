/* SPDX-License-Identifier: Apache-2.0 */
/*
 * als_serve.c — `cairnfs --als PATH`: serves the layers a cairn store recorded
 * at pull time as a containers/storage Additional Layer Store, for podman
 * (storage.conf `additionallayerstores = ["PATH:ref"]` or `["PATH"]`).
 *
 *   PATH/sha256:DIGEST/            one per recorded compressed digest
 *   PATH/B64.../sha256:DIGEST/     the same under any base64 reference
 *                                  directory (standard base64 may hold '/',
 *                                  so reference directories nest)
 *       info   the containers/storage Layer JSON (store/als.c)
 *       blob   the compressed bytes the pull kept
 *       diff/  the layer alone as an overlayfs lower: whiteouts 0/0
 *              character devices, opaque directories trusted.overlay.opaque=y
 *
 * Notifications: creating `use` in a layer directory takes a pin on the
 * layer (and on the images that use it) held by this daemon, counted per
 * layer; `rmdir` of a layer directory drops one use, the pins when none is
 * left. Both answer ENOENT, as containers/storage expects of a counting
 * store. The pins end with the daemon.
 *
 * Invariants: everything the store knows is asked of it (store/als.c), none
 * of it is decided here; one thread serves (fuse_session_loop), so the one
 * store handle, the inode tables and the counts need no lock; a layer's
 * tree, once built, is kept until exit. Inode numbers:
 *   1                       PATH
 *   1<<60 | H               a reference directory: H, 60 bits of the
 *                           XXH3 of its parent's inode and its name
 *   2<<60 | v<<32 | k       view v (a layer under root or a reference
 *                           directory): k 0 its directory, 1 info, 2 blob
 *   3<<60 | v<<32 | i       node i of view v's diff tree (root: i = 1)
 * Directory views are distinct per parent, so the kernel never sees one
 * directory under two names.
 *
 * Memory is bounded by what exists, not by what anyone asks for: a
 * reference directory has no state (its inode is its hash, and what it
 * holds does not depend on its name), a name that is not a recorded layer
 * leaves nothing behind, the layers (at most the store's) are found by
 * hash, and a view lives while the kernel holds one of its inodes: lookups
 * count, FORGET drops them, and the last one frees the view (its number is
 * used again). Directory listings give the layers' entries without making
 * views (the inode number a listing shows is informational).
 */
#include "cairnfs.h"
#include "report.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#define KIND(ino) ((ino) >> 60)
#define IDX(ino) (((ino) >> 32) & 0x0fffffffu)
#define SUB(ino) ((ino)&0xffffffffu)
#define INO(kind, idx, sub) ((uint64_t)(kind) << 60 | (uint64_t)(idx) << 32 | (uint64_t)(sub))
enum { K_ROOT = 0, K_REF = 1, K_VIEW = 2, K_DIFF = 3 };
enum { S_DIR = 0, S_INFO = 1, S_BLOB = 2 };
#define DIFF_TIMEOUT (365.0 * 24 * 3600) /* a layer never changes */

struct als_layer {
  struct als_layer *next; /* in its hash bucket */
  struct cairn_layer_blob rec;
  char *info;
  cairn_tree *tree; /* built on the first lookup of diff */
  cairn_pinset *pins;
  unsigned uses;
};

struct als_view {
  uint64_t parent;         /* PATH's or a reference directory's inode */
  struct als_layer *layer; /* NULL: a free slot */
  uint64_t nlookup;        /* the kernel's references to the view's inodes */
  uint32_t next;           /* in its hash bucket, or in the free list */
};

struct als {
  cairn_store *st;
  const char *path;
  char *purpose;
  struct als_layer **layers; /* hash buckets by digest, n_layer_buckets */
  size_t n_layers, n_layer_buckets;
  struct als_view *views;    /* views[v - 1] */
  size_t n_views, cap_views; /* slots made, slots allocated */
  uint32_t *view_buckets;    /* first view (1-based, 0: none) by (parent, layer) */
  size_t n_view_buckets, live_views;
  uint32_t free_views; /* first free slot, 0: none */
};

static struct als *als_of(fuse_req_t req) { return fuse_req_userdata(req); }

static size_t layer_hash(const char *digest) { return (size_t)XXH3_64bits(digest, strlen(digest)); }

/* Doubles the layer buckets once there are as many layers; false if out
 * of memory (the table stays as it was). */
static bool layers_grow(struct als *a) {
  if (a->n_layers < a->n_layer_buckets) return true;
  size_t n = a->n_layer_buckets ? 2 * a->n_layer_buckets : 64;
  struct als_layer **b = calloc(n, sizeof *b);
  if (!b) return false;
  for (size_t i = 0; i < a->n_layer_buckets; i++)
    for (struct als_layer *l = a->layers[i], *next; l; l = next) {
      next = l->next;
      size_t h = layer_hash(l->rec.digest) & (n - 1);
      l->next = b[h];
      b[h] = l;
    }
  free(a->layers);
  a->layers = b;
  a->n_layer_buckets = n;
  return true;
}

/* The layer recorded as digest (loaded once), or NULL (errno). A digest
 * the store has no record of leaves nothing behind. */
static struct als_layer *layer_get(struct als *a, const char *digest) {
  if (a->n_layer_buckets)
    for (struct als_layer *l = a->layers[layer_hash(digest) & (a->n_layer_buckets - 1)]; l;
         l = l->next)
      if (strcmp(l->rec.digest, digest) == 0) return l;
  struct cairn_layer_blob rec;
  int r = cairn_layer_blob_get(a->st, digest, &rec);
  if (r < 0) {
    errno = -r;
    return NULL;
  }
  struct als_layer *l = calloc(1, sizeof *l);
  if (!l || !layers_grow(a) || !(l->info = cairn_layer_blob_info(&rec))) {
    free(l);
    errno = ENOMEM;
    return NULL;
  }
  l->rec = rec;
  size_t h = layer_hash(rec.digest) & (a->n_layer_buckets - 1);
  l->next = a->layers[h];
  a->layers[h] = l;
  a->n_layers++;
  return l;
}

/* True if the layer can be served now: still stored, its blob kept. */
static bool layer_present(struct als *a, struct als_layer *l) {
  struct cairn_layer_blob rec;
  if (cairn_layer_blob_get(a->st, l->rec.digest, &rec) < 0) return false;
  int fd = cairn_layer_blob_open(a->st, l->rec.digest);
  struct stat sb;
  bool ok = fd >= 0 && fstat(fd, &sb) == 0 && (uint64_t)sb.st_size == l->rec.size;
  if (fd >= 0) close(fd);
  return ok;
}

static size_t view_hash(uint64_t parent, const struct als_layer *l) {
  uint64_t key[2] = {parent, (uint64_t)(uintptr_t)l};
  return (size_t)XXH3_64bits(key, sizeof key);
}

static struct als_view *view_of(struct als *a, uint64_t ino) {
  uint32_t v = IDX(ino);
  return v >= 1 && v <= a->n_views && a->views[v - 1].layer ? &a->views[v - 1] : NULL;
}

/* The view of layer l under parent, if there is one: its number, or 0. */
static uint32_t view_find(struct als *a, uint64_t parent, const struct als_layer *l) {
  if (!a->n_view_buckets) return 0;
  for (uint32_t v = a->view_buckets[view_hash(parent, l) & (a->n_view_buckets - 1)]; v;
       v = a->views[v - 1].next)
    if (a->views[v - 1].parent == parent && a->views[v - 1].layer == l) return v;
  return 0;
}

static void view_link(struct als *a, uint32_t v) {
  struct als_view *w = &a->views[v - 1];
  size_t h = view_hash(w->parent, w->layer) & (a->n_view_buckets - 1);
  w->next = a->view_buckets[h];
  a->view_buckets[h] = v;
}

/* The view of layer l under parent, made if needed: its number, or 0 (out
 * of memory, or 2^28 views held at once). */
static uint32_t view_get(struct als *a, uint64_t parent, struct als_layer *l) {
  uint32_t v = view_find(a, parent, l);
  if (v) return v;
  if (a->live_views + 1 > a->n_view_buckets) { /* rehash into twice as many */
    size_t n = a->n_view_buckets ? 2 * a->n_view_buckets : 64;
    uint32_t *b = calloc(n, sizeof *b);
    if (!b) return 0;
    free(a->view_buckets);
    a->view_buckets = b;
    a->n_view_buckets = n;
    for (uint32_t i = 1; i <= a->n_views; i++)
      if (a->views[i - 1].layer) view_link(a, i);
  }
  if (a->free_views) {
    v = a->free_views;
    a->free_views = a->views[v - 1].next;
  } else {
    if (a->n_views >= 0x0fffffffu) return 0;
    if (a->n_views == a->cap_views) {
      size_t cap = a->cap_views ? 2 * a->cap_views : 64;
      struct als_view *w = realloc(a->views, cap * sizeof *w);
      if (!w) return 0;
      a->views = w;
      a->cap_views = cap;
    }
    v = (uint32_t)++a->n_views;
  }
  a->views[v - 1] = (struct als_view){.parent = parent, .layer = l};
  view_link(a, v);
  a->live_views++;
  return v;
}

/* The kernel holds n more (or, forgetting, fewer) references to inodes of
 * view v; a view none holds is freed, its slot reused. */
static void view_ref(struct als *a, uint64_t ino, int64_t n) {
  struct als_view *w = KIND(ino) == K_VIEW || KIND(ino) == K_DIFF ? view_of(a, ino) : NULL;
  if (!w) return;
  if (n >= 0) {
    w->nlookup += (uint64_t)n;
    return;
  }
  w->nlookup -= (uint64_t)-n < w->nlookup ? (uint64_t)-n : w->nlookup;
  if (w->nlookup) return;
  uint32_t v = IDX(ino);
  uint32_t *p = &a->view_buckets[view_hash(w->parent, w->layer) & (a->n_view_buckets - 1)];
  while (*p && *p != v) p = &a->views[*p - 1].next;
  if (*p) *p = w->next;
  w->layer = NULL;
  w->next = a->free_views;
  a->free_views = v;
  a->live_views--;
}

static uint64_t ref_ino(uint64_t parent, const char *name) {
  uint64_t h = XXH3_64bits_withSeed(name, strlen(name), parent);
  return (uint64_t)K_REF << 60 | (h & ((UINT64_C(1) << 60) - 1));
}

/* The diff tree of a view's layer, built on first use. */
static cairn_tree *view_tree(struct als *a, struct als_view *v) {
  if (!v->layer->tree && cairn_layer_diff_tree(a->st, v->layer->rec.diff_id, &v->layer->tree) < 0)
    fprintf(stderr, "cairnfs: als: layer %s: %s\n", v->layer->rec.diff_id, cairn_errmsg(a->st));
  return v->layer->tree;
}

static bool is_base64(const char *s) {
  if (!*s) return false;
  for (; *s; s++)
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
          *s == '+' || *s == '='))
      return false;
  return true;
}

static void dir_stat(uint64_t ino, struct stat *st) {
  memset(st, 0, sizeof *st);
  st->st_ino = ino;
  st->st_mode = S_IFDIR | 0755;
  st->st_nlink = 2;
}

/* Attributes of ino: 0, or an errno. */
static int ino_stat(struct als *a, uint64_t ino, struct stat *st) {
  if (ino == FUSE_ROOT_ID || KIND(ino) == K_REF) {
    dir_stat(ino, st);
    return 0;
  }
  struct als_view *v = view_of(a, ino);
  if (!v) return ESTALE;
  if (KIND(ino) == K_VIEW) {
    if (SUB(ino) == S_DIR) {
      dir_stat(ino, st);
      return 0;
    }
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    /* blob holds every file of the layer, compressed, whatever their
     * modes: only its owner (root, podman) reads it, as diff/ shows each
     * file with its own mode. */
    st->st_mode = S_IFREG | (SUB(ino) == S_BLOB ? 0400 : 0444);
    st->st_nlink = 1;
    st->st_size = SUB(ino) == S_INFO ? (off_t)strlen(v->layer->info) : (off_t)v->layer->rec.size;
    st->st_blocks = (st->st_size + 511) / 512;
    return 0;
  }
  cairn_tree *t = view_tree(a, v);
  const cairn_node *n = t ? cairn_tree_node(t, SUB(ino)) : NULL;
  if (!n) return t ? ESTALE : EIO;
  cairnfs_node_stat(n, ino, st);
  return 0;
}

/* Answers a lookup with ino; the kernel then holds one more reference to
 * it (counted for a view's inodes). */
static void reply_entry(fuse_req_t req, uint64_t ino, double timeout) {
  struct fuse_entry_param e = {.ino = ino, .generation = 1};
  e.attr_timeout = e.entry_timeout = timeout;
  struct als *a = als_of(req);
  int err = ino_stat(a, ino, &e.attr);
  if (err)
    fuse_reply_err(req, err);
  else if (fuse_reply_entry(req, &e) == 0)
    view_ref(a, ino, 1);
}

static void als_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
  struct als *a = als_of(req);
  if (parent == FUSE_ROOT_ID || KIND(parent) == K_REF) {
    if (strncmp(name, "sha256:", 7) == 0) {
      struct als_layer *l = layer_get(a, name);
      bool present = l && layer_present(a, l);
      uint32_t v = present ? view_get(a, parent, l) : 0;
      if (!v) {
        fuse_reply_err(req, present || (!l && errno == ENOMEM) ? ENOMEM : ENOENT);
        return;
      }
      reply_entry(req, INO(K_VIEW, v, S_DIR), 0); /* asked again: it may go */
    } else if (is_base64(name)) {
      reply_entry(req, ref_ino(parent, name), 0);
    } else {
      fuse_reply_err(req, ENOENT);
    }
    return;
  }
  struct als_view *v = view_of(a, parent);
  if (!v) {
    fuse_reply_err(req, ESTALE);
    return;
  }
  uint32_t vi = IDX(parent);
  if (KIND(parent) == K_VIEW) {
    if (strcmp(name, "info") == 0) {
      reply_entry(req, INO(K_VIEW, vi, S_INFO), DIFF_TIMEOUT);
    } else if (strcmp(name, "blob") == 0) {
      reply_entry(req, INO(K_VIEW, vi, S_BLOB), DIFF_TIMEOUT);
    } else if (strcmp(name, "diff") == 0) {
      if (!view_tree(a, v))
        fuse_reply_err(req, EIO);
      else
        reply_entry(req, INO(K_DIFF, vi, 1), DIFF_TIMEOUT);
    } else {
      fuse_reply_err(req, ENOENT); /* "use" never exists */
    }
    return;
  }
  cairn_tree *t = view_tree(a, v);
  const cairn_node *dir = t ? cairn_tree_node(t, SUB(parent)) : NULL;
  if (!dir || !S_ISDIR(dir->mode)) {
    fuse_reply_err(req, !dir ? ESTALE : ENOTDIR);
    return;
  }
  const cairn_dirent *de = cairn_tree_lookup(t, dir, name);
  if (!de) {
    struct fuse_entry_param e = {.entry_timeout = DIFF_TIMEOUT};
    fuse_reply_entry(req, &e);
    return;
  }
  reply_entry(req, INO(K_DIFF, vi, de->ino), DIFF_TIMEOUT);
}

static void als_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)fi;
  struct stat st;
  int err = ino_stat(als_of(req), ino, &st);
  if (err)
    fuse_reply_err(req, err);
  else
    fuse_reply_attr(req, &st, KIND(ino) == K_DIFF ? DIFF_TIMEOUT : 0);
}

static void als_readlink(fuse_req_t req, fuse_ino_t ino) {
  struct als *a = als_of(req);
  struct als_view *v = KIND(ino) == K_DIFF ? view_of(a, ino) : NULL;
  cairn_tree *t = v ? view_tree(a, v) : NULL;
  const cairn_node *n = t ? cairn_tree_node(t, SUB(ino)) : NULL;
  if (!n || !S_ISLNK(n->mode) || !n->target)
    fuse_reply_err(req, EINVAL);
  else
    fuse_reply_readlink(req, cairn_tree_str(t, n->target));
}

/* fi->fh: an fd of the bytes (blob, a diff file), or -1 for info. */
static void als_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  struct als *a = als_of(req);
  if ((fi->flags & O_ACCMODE) != O_RDONLY) {
    fuse_reply_err(req, EROFS);
    return;
  }
  struct als_view *v = view_of(a, ino);
  int fd = -1;
  if (!v || (KIND(ino) != K_VIEW && KIND(ino) != K_DIFF)) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if (KIND(ino) == K_VIEW && SUB(ino) == S_BLOB) {
    fd = cairn_layer_blob_open(a->st, v->layer->rec.digest);
  } else if (KIND(ino) == K_DIFF) {
    cairn_tree *t = view_tree(a, v);
    const cairn_node *n = t ? cairn_tree_node(t, SUB(ino)) : NULL;
    if (!n || !S_ISREG(n->mode)) {
      fuse_reply_err(req, n ? EISDIR : ESTALE);
      return;
    }
    fd = n->blob ? cairn_blob_open(a->st, cairn_tree_str(t, n->blob)) : -1;
    if (n->blob && fd < 0) {
      fuse_reply_err(req, EIO);
      return;
    }
  } else if (SUB(ino) != S_INFO) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if (KIND(ino) == K_VIEW && SUB(ino) == S_BLOB && fd < 0) {
    fuse_reply_err(req, EIO);
    return;
  }
  fi->fh = (uint64_t)(int64_t)fd;
  fi->keep_cache = 1;
  if (fuse_reply_open(req, fi) != 0 && fd >= 0) close(fd);
}

static void als_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                     struct fuse_file_info *fi) {
  int fd = (int)(int64_t)fi->fh;
  if (fd < 0) { /* info, or an empty file */
    struct als_view *v = view_of(als_of(req), ino);
    const char *s = v && KIND(ino) == K_VIEW ? v->layer->info : "";
    size_t len = strlen(s);
    if (off < 0 || (size_t)off >= len) {
      fuse_reply_buf(req, NULL, 0);
      return;
    }
    fuse_reply_buf(req, s + off, len - (size_t)off < size ? len - (size_t)off : size);
    return;
  }
  cairnfs_reply_fd(req, fd, off, size);
}

static void als_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)ino;
  int fd = (int)(int64_t)fi->fh;
  if (fd >= 0) close(fd);
  fuse_reply_err(req, 0);
}

/* A directory listing, made at opendir and handed out by offset. */
struct listing {
  size_t n, cap;
  struct lent {
    char *name;
    uint64_t ino;
    mode_t mode;
  } * v;
};

static int listing_add(struct listing *l, const char *name, uint64_t ino, mode_t mode) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    struct lent *v = realloc(l->v, cap * sizeof *v);
    if (!v) return -ENOMEM;
    l->v = v;
    l->cap = cap;
  }
  if (!(l->v[l->n].name = strdup(name))) return -ENOMEM;
  l->v[l->n].ino = ino;
  l->v[l->n++].mode = mode;
  return 0;
}

static void listing_free(struct listing *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i].name);
  free(l->v);
  free(l);
}

struct list_arg {
  struct als *a;
  uint64_t parent;
  struct listing *l;
};

/* A layer's entry: its view's inode if it has one, else a number no inode
 * has (view 0), as a listing's numbers are only shown. */
static int list_layer(const struct cairn_layer_blob *b, void *arg) {
  struct list_arg *la = arg;
  struct als_layer *l = layer_get(la->a, b->digest);
  if (!l) return -ENOMEM;
  uint32_t v = view_find(la->a, la->parent, l);
  uint64_t ino = v ? INO(K_VIEW, v, S_DIR)
                   : INO(K_VIEW, 0, (uint32_t)XXH3_64bits(b->digest, strlen(b->digest)));
  return listing_add(la->l, b->digest, ino, S_IFDIR);
}

static void als_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  struct als *a = als_of(req);
  struct listing *l = calloc(1, sizeof *l);
  if (!l) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  int r = listing_add(l, ".", ino, S_IFDIR);
  if (r == 0) r = listing_add(l, "..", FUSE_ROOT_ID, S_IFDIR);
  if (r == 0 && (ino == FUSE_ROOT_ID || KIND(ino) == K_REF)) {
    struct list_arg la = {a, ino, l};
    r = cairn_layer_blobs_foreach(a->st, list_layer, &la);
  } else if (r == 0 && KIND(ino) == K_VIEW && SUB(ino) == S_DIR) {
    uint32_t v = IDX(ino);
    if ((r = listing_add(l, "diff", INO(K_DIFF, v, 1), S_IFDIR)) == 0 &&
        (r = listing_add(l, "info", INO(K_VIEW, v, S_INFO), S_IFREG)) == 0)
      r = listing_add(l, "blob", INO(K_VIEW, v, S_BLOB), S_IFREG);
  } else if (r == 0 && KIND(ino) == K_DIFF) {
    struct als_view *v = view_of(a, ino);
    cairn_tree *t = v ? view_tree(a, v) : NULL;
    const cairn_node *dir = t ? cairn_tree_node(t, SUB(ino)) : NULL;
    if (!dir || !S_ISDIR(dir->mode)) {
      r = dir ? -ENOTDIR : -ESTALE;
    } else {
      const cairn_dirent *c = cairn_tree_children(t, dir);
      for (uint32_t i = 0; r == 0 && i < dir->n_children; i++) {
        const cairn_node *n = cairn_tree_node(t, c[i].ino);
        r = n ? listing_add(l, cairn_tree_str(t, c[i].name), INO(K_DIFF, IDX(ino), c[i].ino),
                            n->mode & S_IFMT)
              : -EIO;
      }
    }
  } else if (r == 0) {
    r = -ENOTDIR;
  }
  if (r < 0) {
    listing_free(l);
    fuse_reply_err(req, r == -ENOMEM || r == -ENOTDIR || r == -ESTALE ? -r : EIO);
    return;
  }
  fi->fh = (uint64_t)(uintptr_t)l;
  if (fuse_reply_open(req, fi) != 0) listing_free(l);
}

static void als_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                        struct fuse_file_info *fi) {
  (void)ino;
  struct listing *l = (struct listing *)(uintptr_t)fi->fh;
  char *buf = malloc(size);
  if (!buf) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  size_t used = 0;
  for (size_t i = off < 0 ? 0 : (size_t)off; i < l->n; i++) {
    struct stat st = {.st_ino = l->v[i].ino, .st_mode = l->v[i].mode};
    size_t len = fuse_add_direntry(req, buf + used, size - used, l->v[i].name, &st, (off_t)i + 1);
    if (len > size - used) break;
    used += len;
  }
  fuse_reply_buf(req, buf, used);
  free(buf);
}

static void als_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void)ino;
  listing_free((struct listing *)(uintptr_t)fi->fh);
  fuse_reply_err(req, 0);
}

/* `use` created in a layer directory: one more use of the layer, its pins
 * taken with the first. Answers ENOENT (a counting store), or the error. */
static int layer_use(struct als *a, fuse_ino_t parent, const char *name) {
  struct als_view *v = KIND(parent) == K_VIEW && SUB(parent) == S_DIR ? view_of(a, parent) : NULL;
  if (!v || strcmp(name, "use") != 0) return EACCES;
  struct als_layer *l = v->layer;
  if (l->uses == 0) {
    if (!(l->pins = cairn_pinset_new(a->purpose, true))) return ENOMEM;
    int r = cairn_layer_pin_users(a->st, l->pins, l->rec.diff_id);
    if (r < 0) {
      fprintf(stderr, "cairnfs: als: pinning layer %s: %s\n", l->rec.diff_id, cairn_errmsg(a->st));
      cairn_pinset_release(a->st, l->pins);
      l->pins = NULL;
      return EIO;
    }
  }
  l->uses++;
  return ENOENT;
}

static void als_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                       struct fuse_file_info *fi) {
  (void)mode;
  (void)fi;
  fuse_reply_err(req, layer_use(als_of(req), parent, name));
}

static void als_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      dev_t rdev) {
  (void)mode;
  (void)rdev;
  fuse_reply_err(req, layer_use(als_of(req), parent, name));
}

/* rmdir of a layer directory: one use fewer, the pins dropped with the
 * last. Answers ENOENT; a release with no use counted is ignored. */
static void als_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
  struct als *a = als_of(req);
  if ((parent != FUSE_ROOT_ID && KIND(parent) != K_REF) || strncmp(name, "sha256:", 7) != 0) {
    fuse_reply_err(req, EACCES);
    return;
  }
  struct als_layer *l = layer_get(a, name);
  if (l && l->uses > 0 && --l->uses == 0) {
    cairn_pinset_release(a->st, l->pins);
    l->pins = NULL;
  }
  fuse_reply_err(req, ENOENT);
}

static void als_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
  struct als *a = als_of(req);
  struct als_view *v = KIND(ino) == K_DIFF ? view_of(a, ino) : NULL;
  cairn_tree *t = v ? view_tree(a, v) : NULL;
  const cairn_node *n = t ? cairn_tree_node(t, SUB(ino)) : NULL;
  cairnfs_reply_getxattr(req, t, n, name, size); /* no node: no xattrs */
}

static void als_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  struct als *a = als_of(req);
  struct als_view *v = KIND(ino) == K_DIFF ? view_of(a, ino) : NULL;
  cairn_tree *t = v ? view_tree(a, v) : NULL;
  const cairn_node *n = t ? cairn_tree_node(t, SUB(ino)) : NULL;
  cairnfs_reply_listxattr(req, t, n, size);
}

static void als_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  view_ref(als_of(req), ino, -(int64_t)(nlookup > INT64_MAX ? INT64_MAX : nlookup));
  fuse_reply_none(req);
}

static void als_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f) {
  for (size_t i = 0; i < count; i++)
    view_ref(als_of(req), f[i].ino,
             -(int64_t)(f[i].nlookup > INT64_MAX ? INT64_MAX : f[i].nlookup));
  fuse_reply_none(req);
}

static void als_statfs(fuse_req_t req, fuse_ino_t ino) {
  (void)ino;
  struct statvfs sv = {.f_bsize = 4096, .f_frsize = 4096, .f_namemax = 255};
  fuse_reply_statfs(req, &sv);
}

static const struct fuse_lowlevel_ops als_ops = {
    .lookup = als_lookup,
    .forget = als_forget,
    .forget_multi = als_forget_multi,
    .getattr = als_getattr,
    .readlink = als_readlink,
    .mknod = als_mknod,
    .rmdir = als_rmdir,
    .open = als_open,
    .read = als_read,
    .release = als_release,
    .opendir = als_opendir,
    .readdir = als_readdir,
    .releasedir = als_releasedir,
    .statfs = als_statfs,
    .getxattr = als_getxattr,
    .listxattr = als_listxattr,
    .create = als_create,
};

/* The uses podman's layers already make of this store, taken again at
 * start (a restarted daemon's pins died with the old one): containers/storage
 * writes, in each layer it made from an additional layer,
 * GRAPHROOT/overlay/ID/additionallayer naming the layer directory it uses
 * (PATH[/REF...]/sha256:DIGEST). One use per such podman layer, as
 * podman's own use of it counts one; lookups in flight are not counted.
 * Returns how many it took. */
static size_t uses_rebuild(struct als *a, const char *real, const char *graphroot) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/overlay", graphroot);
  DIR *d = opendir(dir);
  if (!d) { /* none yet (a fresh podman root): no layer of podman's to pin */
    if (errno != ENOENT) fprintf(stderr, "cairnfs: als: %s: %s\n", dir, strerror(errno));
    return 0;
  }
  size_t taken = 0, rlen = strlen(real);
  for (struct dirent *de; (de = readdir(d));) {
    if (de->d_name[0] == '.' || strlen(de->d_name) > 255) continue;
    char file[4400], line[4096];
    snprintf(file, sizeof file, "%s/%s/additionallayer", dir, de->d_name);
    FILE *f = fopen(file, "re");
    if (!f) continue;
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    const char *digest = got ? strrchr(line, '/') : NULL;
    if (!digest || strncmp(line, real, rlen) != 0 || line[rlen] != '/') continue;
    struct als_layer *l = layer_get(a, digest + 1);
    if (!l) {
      fprintf(stderr, "cairnfs: als: %s: podman's layer %s is no longer in the store\n", file,
              digest + 1);
      continue;
    }
    if (l->uses == 0) {
      if (!(l->pins = cairn_pinset_new(a->purpose, true)) ||
          cairn_layer_pin_users(a->st, l->pins, l->rec.diff_id) < 0) {
        fprintf(stderr, "cairnfs: als: pinning layer %s: %s\n", l->rec.diff_id,
                cairn_errmsg(a->st));
        cairn_pinset_release(a->st, l->pins);
        l->pins = NULL;
        continue;
      }
    }
    l->uses++;
    taken++;
  }
  closedir(d);
  return taken;
}

/* Sends code to the waiting parent (fd >= 0) and returns it. */
static int als_verdict(int fd, int code) {
  if (fd >= 0) {
    unsigned char c = (unsigned char)code;
    if (write(fd, &c, 1) < 0) { /* the parent is gone */
    }
    close(fd);
  }
  return code;
}

/* Opens the store, mounts PATH and serves it until unmounted; tells the
 * waiting parent (verdict_fd, or -1) its exit code once mounted or failed. */
static int als_serve(const char *path, const char *store, bool trust, bool debug, int verdict_fd,
                     char *const *graphroots, size_t n_graphroots) {
  struct als a = {.path = path};
  /* As root, a store another user owns only with --trust-store. */
  int r = cairn_store_open_flags(store, CAIRN_STORE_CREATE | (trust ? 0 : CAIRN_STORE_OWN), &a.st);
  if (r < 0) {
    r = report_fail(r, "opening the store: %s", cairn_errmsg(a.st));
    cairn_store_close(a.st); /* the handle a refusal leaves for its message */
    return als_verdict(verdict_fd, r);
  }
  char *real = realpath(path, NULL);
  if (!real) return als_verdict(verdict_fd, report_fail(-errno, "%s: %s", path, strerror(errno)));
  if (asprintf(&a.purpose, "als %s (podman)", real) < 0)
    return als_verdict(verdict_fd, report_fail(-ENOMEM, "out of memory"));

  for (size_t i = 0; i < n_graphroots; i++) uses_rebuild(&a, real, graphroots[i]);

  char opts[512];
  snprintf(opts, sizeof opts, "-osubtype=cairn-als,fsname=cairn-als,default_permissions%s",
           geteuid() == 0 ? ",allow_other,nosuid,nodev" : "");
  char *fargv[] = {"cairnfs", opts, debug ? "-d" : NULL, NULL};
  struct fuse_args args = FUSE_ARGS_INIT(debug ? 3 : 2, fargv);
  struct fuse_session *se = fuse_session_new(&args, &als_ops, sizeof als_ops, &a);
  fuse_opt_free_args(&args); /* what libfuse added to them */
  if (!se) return als_verdict(verdict_fd, report_fail(-EIO, "cannot start a FUSE session"));
  if (fuse_session_mount(se, real) != 0) {
    fuse_session_destroy(se);
    return als_verdict(verdict_fd, report_fail(-EIO, "cannot mount on %s", real));
  }
  /* Recorded as a mount with no image: cairn mounts lists it, cairn
   * umount stops it (and --restore leaves it to its unit). */
  char dev[32];
  bool recorded = cairn_mountpoint_dev(real, dev, sizeof dev) == 0 &&
                  cairn_mount_record(a.st, real, "", getpid(), dev, false) == 0;
  if (verdict_fd >= 0) {
    als_verdict(verdict_fd, CAIRN_EXIT_OK);
    cairnfs_stdio_null();
    if (chdir("/") < 0) { /* not fatal */
    }
  }
  fuse_set_signal_handlers(se);
  r = fuse_session_loop(se);
  fuse_remove_signal_handlers(se);
  fuse_session_unmount(se);
  fuse_session_destroy(se);
  if (recorded) cairn_mount_forget(a.st, real, getpid());
  for (size_t i = 0; i < a.n_layer_buckets; i++)
    for (struct als_layer *l = a.layers[i], *next; l; l = next) {
      next = l->next;
      if (l->pins) cairn_pinset_release(a.st, l->pins);
      cairn_tree_free(l->tree);
      free(l->info);
      free(l);
    }
  free(a.view_buckets);
  free(a.views);
  free(a.layers);
  free(a.purpose);
  free(real);
  cairn_store_close(a.st);
  return r == 0 ? CAIRN_EXIT_OK : CAIRN_EXIT_FAILURE;
}

#define ALS_USAGE                                                                                  \
  "cairnfs --als [-f] [-d] [--store DIR] [--trust-store] [--podman-root DIR]... PATH\n"            \
  "  serve the layers the store's pulls recorded as a containers/storage\n"                        \
  "  Additional Layer Store at PATH (storage.conf additionallayerstores =\n"                       \
  "  [\"PATH:ref\"]); podman's use of a layer pins it (see cairnfs(8))\n"                          \
  "  -f            stay in the foreground\n"                                                       \
  "  -d            debug output (implies -f)\n"                                                    \
  "  --store DIR   the cairn store (default as for a mount)\n"                                     \
  "  --trust-store as root, use a store another user owns\n"                                       \
  "  --podman-root DIR\n"                                                                          \
  "                podman's graphroot: at start, pin again the layers its\n"                       \
  "                images use from PATH (up to 16)"

int cairnfs_als_main(int argc, char **argv) {
  bool foreground = false, debug = false, trust = false;
  const char *store = NULL, *path = NULL;
  char *roots[16];
  size_t n_roots = 0;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
      printf("usage: %s\n", ALS_USAGE);
      return CAIRN_EXIT_OK;
    } else if (strcmp(s, "-f") == 0) {
      foreground = true;
    } else if (strcmp(s, "-d") == 0) {
      foreground = debug = true;
    } else if (strcmp(s, "--podman-root") == 0 && i + 1 < argc) {
      if (n_roots < sizeof roots / sizeof roots[0]) roots[n_roots++] = argv[++i];
    } else if (strcmp(s, "--trust-store") == 0) {
      trust = true;
    } else if (strcmp(s, "--store") == 0 && i + 1 < argc) {
      store = argv[++i];
    } else if (strncmp(s, "--store=", 8) == 0) {
      store = s + 8;
    } else if (s[0] == '-') {
      return report_usage(ALS_USAGE, "%s: unknown option", s);
    } else if (!path) {
      path = s;
    } else {
      return report_usage(ALS_USAGE, "%s: unexpected argument", s);
    }
  }
  if (!path) return report_usage(ALS_USAGE, "--als: needs a directory");

  /* Forks first: the store's SQLite connection and its locks must be the
   * serving process's own (fcntl locks do not cross a fork). The parent
   * waits for the child's verdict: one byte, its exit code, once mounted. */
  int verdict[2] = {-1, -1};
  if (!foreground) {
    if (pipe(verdict) < 0) return report_fail(-errno, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) return report_fail(-errno, "fork: %s", strerror(errno));
    if (pid > 0) {
      close(verdict[1]);
      unsigned char code = CAIRN_EXIT_FAILURE;
      if (read(verdict[0], &code, 1) != 1) waitpid(pid, NULL, 0);
      return code;
    }
    close(verdict[0]);
    setsid();
  }
  int code = als_serve(path, store, trust, debug, verdict[1], roots, n_roots);
  return code;
}
