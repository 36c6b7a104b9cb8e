/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree.c — a merged root filesystem, built once in memory from layers.
 *
 * Applies layers bottom first by the OCI image-spec rules:
 * a later layer's entry replaces the one at the same path (a directory over
 * a directory keeps the lower contents and takes the new attributes; any
 * other replacement drops the lower subtree), ".wh.NAME" hides NAME and its
 * subtree in lower layers, ".wh..wh..opq" hides all lower contents of its
 * directory, missing parents are synthesized (0755, root, mtime 0) and
 * whiteouts are never part of the result. Hardlinks share one inode.
 *
 * Each layer is applied in three passes, because the store hands entries
 * out in path order, not tar order: (1) whiteouts and opaque markers, which
 * only act on lower layers; (2) every other entry but hardlinks, parents
 * before children; (3) hardlinks, whose first name may sort after them. A
 * hardlink whose first name a later entry of its layer replaced by another
 * hardlink follows that one; one whose first name became a directory is
 * an error (-EBADMSG), which import refuses before it commits the layer.
 *
 * The builder (libcairn_tree.h: merge_builder_*) takes each layer's entries from
 * any source: cairn_tree_build (merge.c) reads stored layers, import the
 * layer it has staged (layer.c), the fuzz target decoded bytes.
 *
 * While building, the tree is a set of inodes and of dentries (parent inode,
 * name → inode) found through one hash table; a replaced or whited-out
 * subtree simply becomes unreachable. Freezing walks what is reachable from
 * the root, numbers inodes 1.. in a fixed order (root = 1; same image, same
 * numbers), counts links, and writes the frozen tree in the index format
 * (libcairn_tree.h, index.c): flat arrays of fixed-width records, nodes indexed by
 * inode number, each directory's entries sorted by name for binary search,
 * and one pool of strings, all in one buffer with no pointers. That buffer
 * is what STORE/index/ID holds, and what a mount maps. Nothing here is
 * FUSE-aware.
 */
#include "libcairn_tree.h"

#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#define NONE UINT32_MAX

/* ---- arena: strings and xattr arrays that live as long as the tree ---- */

struct arena_chunk {
  struct arena_chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
};

struct arena {
  struct arena_chunk *head;
};

static void *arena_alloc(struct arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (!a->head || a->head->cap - a->head->used < n) {
    size_t cap = n > 256 * 1024 ? n : 256 * 1024;
    struct arena_chunk *c = malloc(sizeof(*c) + cap);
    if (!c) return NULL;
    c->next = a->head;
    c->used = 0;
    c->cap = cap;
    a->head = c;
  }
  void *p = a->head->data + a->head->used;
  a->head->used += n;
  return p;
}

static void *arena_dup(struct arena *a, const void *src, size_t n) {
  void *p = arena_alloc(a, n ? n : 1);
  if (p && n) memcpy(p, src, n);
  return p;
}

static char *arena_strdup(struct arena *a, const char *s) {
  return s ? arena_dup(a, s, strlen(s) + 1) : NULL;
}

static void arena_free(struct arena *a) {
  while (a->head) {
    struct arena_chunk *next = a->head->next;
    free(a->head);
    a->head = next;
  }
}

/* ---- build-time tree -------------------------------------------------- */

/* A node's attributes while building: the strings live in the arena. */
struct battr {
  uint32_t mode, uid, gid, nlink;
  uint64_t size, rdev;
  int64_t mtime_sec;
  uint32_t mtime_nsec;
  uint32_t parent, n_children; /* filled when freezing */
  const char *target, *blob;
  const cairn_xattr *xattrs;
  uint32_t n_xattrs;
};

struct binode {
  struct battr attr;
  uint32_t first_child; /* dentry list head (directories) */
  uint32_t final_ino;   /* 0 until numbered */
  uint32_t links;       /* reachable names (non-directories) */
};

struct bdentry {
  const char *name;
  uint64_t hash;
  uint32_t parent, inode;
  uint32_t hnext;      /* hash chain */
  uint32_t next, prev; /* siblings in parent's list */
};

struct merge_builder {
  cairn_store *st;
  struct arena arena; /* strings, until the tree is frozen */
  struct binode *inodes;
  size_t n_inodes, cap_inodes;
  struct bdentry *dentries;
  size_t n_dentries, cap_dentries;
  uint32_t *buckets;
  size_t n_buckets; /* power of two */
  uint32_t root;
};

static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t ncap = *cap ? *cap * 2 : 1024;
  while (ncap < need) ncap *= 2;
  void *p = realloc(*arr, ncap * elem);
  if (!p) return -ENOMEM;
  *arr = p;
  *cap = ncap;
  return 0;
}

static uint64_t name_hash(uint32_t parent, const char *name, size_t len) {
  return XXH3_64bits_withSeed(name, len, parent);
}

static int inode_new(merge_builder *b, uint32_t *out) {
  if (b->n_inodes >= NONE - 1) return -EOVERFLOW;
  int r = grow((void **)&b->inodes, &b->cap_inodes, b->n_inodes + 1, sizeof(*b->inodes));
  if (r < 0) return r;
  struct binode *n = &b->inodes[b->n_inodes];
  memset(n, 0, sizeof(*n));
  n->first_child = NONE;
  *out = (uint32_t)b->n_inodes++;
  return 0;
}

static int synth_dir(merge_builder *b, uint32_t *out) {
  int r = inode_new(b, out);
  if (r < 0) return r;
  b->inodes[*out].attr.mode = S_IFDIR | 0755;
  return 0;
}

static int rehash(merge_builder *b) {
  size_t nb = b->n_buckets ? b->n_buckets * 2 : 4096;
  uint32_t *buckets = malloc(nb * sizeof(*buckets));
  if (!buckets) return -ENOMEM;
  memset(buckets, 0xff, nb * sizeof(*buckets));
  /* Every dentry still in a chain is re-chained; unlinked ones have
   * hash == 0 and parent == NONE. */
  for (size_t i = 0; i < b->n_dentries; i++) {
    struct bdentry *d = &b->dentries[i];
    if (d->parent == NONE) continue;
    size_t k = d->hash & (nb - 1);
    d->hnext = buckets[k];
    buckets[k] = (uint32_t)i;
  }
  free(b->buckets);
  b->buckets = buckets;
  b->n_buckets = nb;
  return 0;
}

static struct bdentry *dentry_find(merge_builder *b, uint32_t parent, const char *name, size_t len,
                                   uint64_t *hash_out) {
  uint64_t h = name_hash(parent, name, len);
  if (hash_out) *hash_out = h;
  if (!b->n_buckets) return NULL;
  for (uint32_t i = b->buckets[h & (b->n_buckets - 1)]; i != NONE; i = b->dentries[i].hnext) {
    struct bdentry *d = &b->dentries[i];
    if (d->hash == h && d->parent == parent && strncmp(d->name, name, len) == 0 &&
        d->name[len] == '\0')
      return d;
  }
  return NULL;
}

static int dentry_add(merge_builder *b, uint32_t parent, const char *name, size_t len,
                      uint64_t hash, uint32_t inode) {
  if (b->n_dentries >= NONE - 1) return -EOVERFLOW;
  if (b->n_dentries + 1 > b->n_buckets) {
    int r = rehash(b);
    if (r < 0) return r;
  }
  int r = grow((void **)&b->dentries, &b->cap_dentries, b->n_dentries + 1, sizeof(*b->dentries));
  if (r < 0) return r;
  char *s = arena_alloc(&b->arena, len + 1);
  if (!s) return -ENOMEM;
  memcpy(s, name, len);
  s[len] = '\0';
  uint32_t i = (uint32_t)b->n_dentries++;
  struct bdentry *d = &b->dentries[i];
  struct binode *p = &b->inodes[parent];
  size_t k = hash & (b->n_buckets - 1);
  *d = (struct bdentry){.name = s,
                        .hash = hash,
                        .parent = parent,
                        .inode = inode,
                        .hnext = b->buckets[k],
                        .next = p->first_child,
                        .prev = NONE};
  b->buckets[k] = i;
  if (p->first_child != NONE) b->dentries[p->first_child].prev = i;
  p->first_child = i;
  return 0;
}

static void dentry_remove(merge_builder *b, struct bdentry *d) {
  uint32_t i = (uint32_t)(d - b->dentries);
  uint32_t *link = &b->buckets[d->hash & (b->n_buckets - 1)];
  while (*link != i) link = &b->dentries[*link].hnext;
  *link = d->hnext;
  if (d->prev != NONE)
    b->dentries[d->prev].next = d->next;
  else
    b->inodes[d->parent].first_child = d->next;
  if (d->next != NONE) b->dentries[d->next].prev = d->prev;
  d->parent = NONE;
  d->hash = 0;
}

static bool is_dir(const merge_builder *b, uint32_t inode) {
  return S_ISDIR(b->inodes[inode].attr.mode);
}

/* Finds the directory inode that path (len bytes) names. With create,
 * missing or non-directory components become synthesized directories;
 * without it, *out is NONE when the path does not name a directory. */
static int dir_resolve(merge_builder *b, const char *path, size_t len, bool create, uint32_t *out) {
  uint32_t cur = b->root;
  size_t i = 0;
  while (i < len) {
    const char *name = path + i;
    const char *slash = memchr(name, '/', len - i);
    size_t n = slash ? (size_t)(slash - name) : len - i;
    uint64_t h;
    struct bdentry *d = dentry_find(b, cur, name, n, &h);
    if (d && is_dir(b, d->inode)) {
      cur = d->inode;
    } else if (!create) {
      *out = NONE;
      return 0;
    } else {
      uint32_t dir;
      int r = synth_dir(b, &dir);
      if (r < 0) return r;
      d = dentry_find(b, cur, name, n, NULL); /* inodes may have moved */
      if (d) {
        d->inode = dir;
      } else {
        r = dentry_add(b, cur, name, n, h, dir);
        if (r < 0) return r;
      }
      cur = dir;
    }
    i += n + 1;
  }
  *out = cur;
  return 0;
}

/* What a path (len bytes) names: its parent directory (dir; NONE when that
 * is not a directory and create is false), its last component, and that
 * component's dentry if there is one (d, else NULL; hash for adding it). */
struct found {
  uint32_t dir;
  const char *name;
  size_t name_len;
  uint64_t hash;
  struct bdentry *d;
};

static int path_lookup(merge_builder *b, const char *path, size_t len, bool create,
                       struct found *f) {
  const char *slash = memrchr(path, '/', len);
  size_t dir_len = slash ? (size_t)(slash - path) : 0;
  f->name = slash ? slash + 1 : path;
  f->name_len = len - (size_t)(f->name - path);
  f->d = NULL;
  int r = dir_resolve(b, path, dir_len, create, &f->dir);
  if (r < 0 || f->dir == NONE) return r;
  f->d = dentry_find(b, f->dir, f->name, f->name_len, &f->hash);
  return 0;
}

/* ---- applying one layer ------------------------------------------------ */

/* An entry copied out of the store's callback (whose strings are fleeting). */
struct lentry {
  const char *path;
  enum cairn_entry_type type;
  struct battr attr;
};

struct layer_entries {
  merge_builder *b;
  struct lentry *v;
  size_t n, cap;
};

static uint32_t type_bits(enum cairn_entry_type t) {
  switch (t) {
  case CAIRN_DIR: return S_IFDIR;
  case CAIRN_SYMLINK: return S_IFLNK;
  case CAIRN_CHR: return S_IFCHR;
  case CAIRN_BLK: return S_IFBLK;
  case CAIRN_FIFO: return S_IFIFO;
  case CAIRN_SOCK: return S_IFSOCK;
  default: return S_IFREG;
  }
}

static int collect_entry(const cairn_entry *e, void *arg) {
  struct layer_entries *le = arg;
  struct arena *a = &le->b->arena;
  int r = grow((void **)&le->v, &le->cap, le->n + 1, sizeof(*le->v));
  if (r < 0) return r;
  struct lentry *l = &le->v[le->n];
  memset(l, 0, sizeof(*l));
  l->type = e->type;
  l->path = arena_strdup(a, e->path);
  if (!l->path) return -ENOMEM;
  if (e->type == CAIRN_WHITEOUT || e->type == CAIRN_OPAQUE) {
    le->n++;
    return 0;
  }
  struct battr *n = &l->attr;
  n->mode = type_bits(e->type) | (e->mode & 07777);
  n->uid = e->uid;
  n->gid = e->gid;
  n->mtime_sec = e->mtime_sec;
  n->mtime_nsec = e->mtime_nsec;
  if (e->type == CAIRN_REG) n->size = e->size;
  if (e->type == CAIRN_CHR || e->type == CAIRN_BLK) n->rdev = e->rdev;
  if (e->target) {
    n->target = arena_strdup(a, e->target);
    if (!n->target) return -ENOMEM;
    if (e->type == CAIRN_SYMLINK) n->size = strlen(e->target);
  }
  if (e->blob && e->type == CAIRN_REG) {
    n->blob = arena_strdup(a, e->blob);
    if (!n->blob) return -ENOMEM;
  }
  if (e->n_xattrs) {
    cairn_xattr *x = arena_alloc(a, e->n_xattrs * sizeof(*x));
    if (!x) return -ENOMEM;
    for (size_t i = 0; i < e->n_xattrs; i++) {
      x[i].name = arena_strdup(a, e->xattrs[i].name);
      x[i].value = arena_dup(a, e->xattrs[i].value, e->xattrs[i].len);
      x[i].len = e->xattrs[i].len;
      if (!x[i].name || !x[i].value) return -ENOMEM;
    }
    if (e->n_xattrs > UINT32_MAX) return -EOVERFLOW;
    n->xattrs = x;
    n->n_xattrs = (uint32_t)e->n_xattrs;
  }
  le->n++;
  return 0;
}

static int apply_whiteout(merge_builder *b, const struct lentry *l) {
  struct found wh;
  int r = path_lookup(b, l->path, strlen(l->path), false, &wh);
  if (r < 0 || wh.dir == NONE) return r;
  if (l->type == CAIRN_OPAQUE) {
    /* The directory gets a fresh, empty inode with its attributes: the
     * lower children stay keyed by the old one and are unreachable. */
    uint32_t fresh;
    r = inode_new(b, &fresh);
    if (r < 0) return r;
    b->inodes[fresh].attr = b->inodes[wh.dir].attr;
    if (wh.dir == b->root) {
      b->root = fresh;
      return 0;
    }
    struct found up; /* the directory's own entry in its parent */
    r = path_lookup(b, l->path, (size_t)(wh.name - 1 - l->path), false, &up);
    if (r == 0 && up.d) up.d->inode = fresh;
    return r;
  }
  if (wh.name_len < 4 || strncmp(wh.name, ".wh.", 4) != 0)
    return cairn_fail(b->st, -EBADMSG, "whiteout %s does not start with .wh.", l->path);
  struct bdentry *d = dentry_find(b, wh.dir, wh.name + 4, wh.name_len - 4, NULL);
  if (d) dentry_remove(b, d);
  return 0;
}

/* Puts inode at path (a file or a hardlink's second name), replacing what
 * is there. */
static int place(merge_builder *b, const char *path, uint32_t inode) {
  struct found f;
  int r = path_lookup(b, path, strlen(path), true, &f);
  if (r < 0) return r;
  if (f.d) {
    f.d->inode = inode;
    return 0;
  }
  return dentry_add(b, f.dir, f.name, f.name_len, f.hash, inode);
}

static int apply_entry(merge_builder *b, const struct lentry *l) {
  if (l->path[0] == '\0') { /* the layer's root */
    if (l->type != CAIRN_DIR)
      return cairn_fail(b->st, -EBADMSG, "the layer root is not a directory");
    b->inodes[b->root].attr = l->attr;
    return 0;
  }
  if (l->type == CAIRN_DIR) {
    struct found f;
    int r = path_lookup(b, l->path, strlen(l->path), true, &f);
    if (r < 0) return r;
    if (f.d && is_dir(b, f.d->inode)) {
      b->inodes[f.d->inode].attr = l->attr;
      return 0;
    }
  }
  uint32_t inode;
  int r = inode_new(b, &inode);
  if (r < 0) return r;
  b->inodes[inode].attr = l->attr;
  return place(b, l->path, inode);
}

/* The entry of this layer at path, if entries are in path order. */
static const struct lentry *layer_find(const struct layer_entries *le, const char *path) {
  size_t lo = 0, hi = le->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(path, le->v[mid].path);
    if (c == 0) return &le->v[mid];
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}

/* A hardlink's target may itself be a hardlink of this layer when a later
 * entry replaced the name it was made to (its first name): it then names
 * what that hardlink names. Follows such a chain to its end, bounded by
 * the number of entries (a cycle never ends in a file). */
static int hardlink_target(merge_builder *b, const struct layer_entries *le, const struct lentry *l,
                           const char **target) {
  *target = l->attr.target;
  for (size_t steps = 0; *target; steps++) {
    const struct lentry *t = layer_find(le, *target);
    if (!t || t->type != CAIRN_HARDLINK) return 0;
    if (steps == le->n)
      return cairn_fail(b->st, -EBADMSG, "hardlink %s: its targets form a cycle", l->path);
    *target = t->attr.target;
  }
  return cairn_fail(b->st, -EBADMSG, "hardlink %s has no target", l->path);
}

static int apply_hardlink(merge_builder *b, const struct layer_entries *le,
                          const struct lentry *l) {
  const char *target;
  int r = hardlink_target(b, le, l, &target);
  if (r < 0) return r;
  struct found f;
  if ((r = path_lookup(b, target, strlen(target), false, &f)) < 0) return r;
  if (!f.d || is_dir(b, f.d->inode))
    return cairn_fail(b->st, -EBADMSG, "hardlink %s points at %s, which is not a file", l->path,
                      l->attr.target);
  return place(b, l->path, f.d->inode);
}

int cn_merge_builder_add_layer(merge_builder *b, merge_source_fn source, void *src) {
  struct layer_entries le = {.b = b};
  int r = source(src, collect_entry, &le);
  for (size_t i = 0; r == 0 && i < le.n; i++)
    if (le.v[i].type == CAIRN_WHITEOUT || le.v[i].type == CAIRN_OPAQUE)
      r = apply_whiteout(b, &le.v[i]);
  for (size_t i = 0; r == 0 && i < le.n; i++)
    if (le.v[i].type != CAIRN_WHITEOUT && le.v[i].type != CAIRN_OPAQUE &&
        le.v[i].type != CAIRN_HARDLINK)
      r = apply_entry(b, &le.v[i]);
  for (size_t i = 0; r == 0 && i < le.n; i++)
    if (le.v[i].type == CAIRN_HARDLINK) r = apply_hardlink(b, &le, &le.v[i]);
  free(le.v);
  if (r == -ENOMEM) r = cairn_fail(b->st, r, "out of memory building the merged tree");
  if (r == -EOVERFLOW) r = cairn_fail(b->st, r, "too many files for one merged tree");
  return r;
}

/* ---- freezing ------------------------------------------------------------ */

struct fdirent {
  const char *name;
  uint32_t ino;
};

struct freezer {
  merge_builder *b;
  uint32_t next_ino;
  uint32_t *order; /* order[ino - 1] = build inode */
  struct fdirent *dirents;
  size_t n_dirents, cap_dirents;
  uint32_t *dir_first; /* per ino: first dirent index */
};

static int dirent_cmp(const void *a, const void *b) {
  return strcmp(((const struct fdirent *)a)->name, ((const struct fdirent *)b)->name);
}

/* Numbers the directory's children, sorts them and recurses (depth is
 * bounded by the path length of a tar entry). */
static int freeze_dir(struct freezer *f, uint32_t dir_inode, uint32_t dir_ino) {
  merge_builder *b = f->b;
  size_t first = f->n_dirents, count = 0;
  for (uint32_t i = b->inodes[dir_inode].first_child; i != NONE; i = b->dentries[i].next) {
    int r = grow((void **)&f->dirents, &f->cap_dirents, f->n_dirents + 1, sizeof(*f->dirents));
    if (r < 0) return r;
    /* ino temporarily holds the build inode; renumbered below. */
    f->dirents[f->n_dirents++] =
        (struct fdirent){.name = b->dentries[i].name, .ino = b->dentries[i].inode};
    count++;
  }
  if (count > 1) qsort(f->dirents + first, count, sizeof(*f->dirents), dirent_cmp);
  uint32_t subdirs = 0;
  for (size_t k = first; k < first + count; k++) {
    struct binode *c = &b->inodes[f->dirents[k].ino];
    if (!c->final_ino) {
      c->final_ino = ++f->next_ino;
      f->order[c->final_ino - 1] = f->dirents[k].ino;
    }
    c->links++;
    if (S_ISDIR(c->attr.mode)) {
      subdirs++;
      c->attr.parent = dir_ino;
    }
    f->dirents[k].ino = c->final_ino;
  }
  struct binode *d = &b->inodes[dir_inode];
  d->attr.nlink = 2 + subdirs;
  d->attr.n_children = (uint32_t)count;
  f->dir_first[dir_ino - 1] = (uint32_t)first;
  for (size_t k = first; k < first + count; k++) {
    uint32_t ino = f->dirents[k].ino;
    uint32_t inode = f->order[ino - 1];
    if (S_ISDIR(b->inodes[inode].attr.mode)) {
      int r = freeze_dir(f, inode, ino);
      if (r < 0) return r;
    }
  }
  return 0;
}

/* The string pool of the index being written: offset 0 is "no string". */
struct pool {
  char *base;
  size_t used;
};

static uint32_t pool_put(struct pool *p, const void *s, size_t len) {
  uint32_t off = (uint32_t)p->used;
  if (len) memcpy(p->base + off, s, len);
  p->used += len;
  return off;
}

static uint32_t pool_str(struct pool *p, const char *s) {
  return s ? pool_put(p, s, strlen(s) + 1) : 0;
}

/* Writes the numbered tree as an index image (libcairn_tree.h) into one buffer. */
static int serialize(struct freezer *f, cairn_tree **out) {
  merge_builder *b = f->b;
  /* byte 0 (offset 0: no string) and a last NUL, which ends every string */
  size_t n = f->next_ino, n_x = 0, pool_size = 2;
  for (size_t i = 0; i < n; i++) {
    const struct battr *a = &b->inodes[f->order[i]].attr;
    if (a->target) pool_size += strlen(a->target) + 1;
    if (a->blob) pool_size += strlen(a->blob) + 1;
    for (size_t k = 0; k < a->n_xattrs; k++)
      pool_size += strlen(a->xattrs[k].name) + 1 + a->xattrs[k].len;
    n_x += a->n_xattrs;
  }
  for (size_t i = 0; i < f->n_dirents; i++) pool_size += strlen(f->dirents[i].name) + 1;
  if (pool_size > UINT32_MAX || n_x > UINT32_MAX || f->n_dirents > UINT32_MAX) return -EOVERFLOW;
  struct cn_index_header h = {
      .magic = CN_INDEX_MAGIC,
      .version = CN_INDEX_VERSION,
      .header_size = sizeof(h),
      .n_nodes = (uint32_t)n,
      .n_dirents = (uint32_t)f->n_dirents,
      .n_xattrs = (uint32_t)n_x,
  };
  h.nodes_off = sizeof(h);
  h.dirents_off = h.nodes_off + n * sizeof(cairn_node);
  h.xattrs_off = h.dirents_off + f->n_dirents * sizeof(cairn_dirent);
  h.strings_off = h.xattrs_off + n_x * sizeof(struct cn_index_xattr);
  h.strings_size = pool_size;
  h.file_size = h.strings_off + pool_size;
  unsigned char *buf = calloc(1, h.file_size);
  if (!buf) return -ENOMEM;
  cairn_node *nodes = (cairn_node *)(buf + h.nodes_off);
  cairn_dirent *dirents = (cairn_dirent *)(buf + h.dirents_off);
  struct cn_index_xattr *xattrs = (struct cn_index_xattr *)(buf + h.xattrs_off);
  struct pool p = {.base = (char *)buf + h.strings_off, .used = 1};
  for (size_t i = 0; i < f->n_dirents; i++)
    dirents[i] = (cairn_dirent){.name = pool_str(&p, f->dirents[i].name), .ino = f->dirents[i].ino};
  uint32_t x = 0;
  for (size_t i = 0; i < n; i++) {
    const struct binode *bn = &b->inodes[f->order[i]];
    const struct battr *a = &bn->attr;
    cairn_node *o = &nodes[i];
    *o = (cairn_node){.mode = a->mode,
                      .uid = a->uid,
                      .gid = a->gid,
                      .nlink = S_ISDIR(a->mode) ? a->nlink : bn->links,
                      .size = a->size,
                      .rdev = a->rdev,
                      .mtime_sec = a->mtime_sec,
                      .mtime_nsec = a->mtime_nsec,
                      .parent = a->parent,
                      .target = pool_str(&p, a->target),
                      .blob = pool_str(&p, a->blob),
                      .xattrs = x,
                      .n_xattrs = a->n_xattrs};
    h.blocks += (a->size + 4095) / 4096;
    if (S_ISDIR(a->mode) && a->n_children) {
      o->children = f->dir_first[i];
      o->n_children = a->n_children;
    }
    for (size_t k = 0; k < a->n_xattrs; k++, x++) {
      xattrs[x].name = pool_str(&p, a->xattrs[k].name);
      xattrs[x].value = pool_put(&p, a->xattrs[k].value, a->xattrs[k].len);
      xattrs[x].len = (uint32_t)a->xattrs[k].len;
    }
  }
  memcpy(buf, &h, sizeof(h)); /* after the nodes, which sum its blocks */
  cn_index_seal(buf);
  return cn_tree_wrap(b->st, buf, h.file_size, false, false, out);
}

static int freeze(merge_builder *b, cairn_tree **out) {
  struct freezer f = {.b = b};
  int r = -ENOMEM;
  f.order = malloc(b->n_inodes * sizeof(*f.order));
  f.dir_first = calloc(b->n_inodes, sizeof(*f.dir_first));
  if (!f.order || !f.dir_first) goto out;
  struct binode *root = &b->inodes[b->root];
  root->final_ino = f.next_ino = 1;
  root->attr.parent = 1;
  f.order[0] = b->root;
  r = freeze_dir(&f, b->root, 1);
  if (r == 0) r = serialize(&f, out);
out:
  free(f.order);
  free(f.dir_first);
  free(f.dirents);
  return r;
}

/* ---- public ---------------------------------------------------------------- */

int cn_merge_builder_new(cairn_store *st, merge_builder **out) {
  merge_builder *b = calloc(1, sizeof(*b));
  if (!b) return cairn_fail(st, -ENOMEM, "out of memory building the merged tree");
  b->st = st;
  int r = synth_dir(b, &b->root);
  if (r < 0) {
    cn_merge_builder_free(b);
    return cairn_fail(st, r, "out of memory building the merged tree");
  }
  *out = b;
  return 0;
}

void cn_merge_builder_free(merge_builder *b) {
  if (!b) return;
  arena_free(&b->arena);
  free(b->inodes);
  free(b->dentries);
  free(b->buckets);
  free(b);
}

int cn_merge_builder_finish(merge_builder *b, cairn_tree **out) {
  *out = NULL;
  int r = freeze(b, out);
  if (r == -ENOMEM) r = cairn_fail(b->st, r, "out of memory building the merged tree");
  if (r == -EOVERFLOW) r = cairn_fail(b->st, r, "too many files for one merged tree");
  cn_merge_builder_free(b);
  return r;
}
