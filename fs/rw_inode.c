/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rw_inode.c — the inode table of a writable mount (rw.h says how the
 * upper is laid out and served).
 *
 * The inodes the kernel holds, by nodeid (buckets) and, after a rebase,
 * by key (xbuckets): every lookup of an entry finds the one inode of its
 * identity (a lower entry's tree inode, 2^32 + an upper-made entry's
 * backing inode), so that every name of a file is one inode. An inode
 * lives while refs (the kernel's lookups + children naming it as
 * parent) is not 0; a restored one's count is unknown (inode_forget).
 * Its place (parent, name) is a hint only: what acts on an object acts
 * through its fd. Orphans (work/orphan.NODEID) keep a file whose last
 * name went while the kernel holds it. rw_resolve() is the one way from a
 * directory and a name to an inode, merging the upper over the tree.
 * Callers hold mu.
 */
#include "rw.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

/* ---- the inode table (callers hold mu) ------------------------------- */

struct rw_inode *rw_inode_get(struct cairnfs_rw *rw, uint64_t id) {
  for (struct rw_inode *i = rw->buckets[id % NBUCKETS]; i; i = i->hnext)
    if (i->id == id) return i;
  return NULL;
}

struct rw_inode *rw_inode_new(struct cairnfs_rw *rw, uint64_t id, uint32_t lower) {
  struct rw_inode *i = calloc(1, sizeof(*i));
  if (!i) return NULL;
  i->id = id;
  i->key = id;
  i->lower = lower;
  i->fd = -1;
  i->hnext = rw->buckets[id % NBUCKETS];
  rw->buckets[id % NBUCKETS] = i;
  return i;
}

/* The key table (rebases only): inodes found by a key not their nodeid. */
static void key_unlink(struct cairnfs_rw *rw, struct rw_inode *i) {
  if (i->key == i->id || i->key == 0) return;
  struct rw_inode **pp = &rw->xbuckets[i->key % NBUCKETS];
  while (*pp && *pp != i) pp = &(*pp)->xnext;
  if (*pp) *pp = i->xnext;
  i->xnext = NULL;
}

void rw_key_set(struct cairnfs_rw *rw, struct rw_inode *i, uint64_t key) {
  key_unlink(rw, i);
  i->key = key;
  if (key == i->id || key == 0) return;
  i->xnext = rw->xbuckets[key % NBUCKETS];
  rw->xbuckets[key % NBUCKETS] = i;
}

/* The inode the kernel knows as the entry of identity key, or NULL. */
struct rw_inode *rw_key_find(struct cairnfs_rw *rw, uint64_t key) {
  if (!rw->rebased) return rw_inode_get(rw, key);
  for (struct rw_inode *i = rw->xbuckets[key % NBUCKETS]; i; i = i->xnext)
    if (i->key == key) return i;
  struct rw_inode *i = rw_inode_get(rw, key);
  return i && i->key == key ? i : NULL;
}

/* The nodeids given to keys not their numbers whose inodes the kernel
 * forgot since the last rebase. A file the kernel forgets is found again
 * by its key; given its key's number, it would change st_ino, to one
 * another file may have shown moments before (the inode held at the move
 * under that number, then forgotten too): a scan (tar's, rsync's hardlink
 * detection, find -inum) would see two files as one. So each key keeps
 * the nodeid it was given, and no other key is given that number, until
 * the next rebase renumbers the view. */
static size_t given_hash(uint64_t v) { return (size_t)(v ^ (v >> 32)) % GIVEN_BUCKETS; }

static struct rw_given *given_of_key(struct cairnfs_rw *rw, uint64_t key) {
  for (struct rw_given *g = rw->given_key[given_hash(key)]; g; g = g->knext)
    if (g->key == key) return g;
  return NULL;
}

static bool given_has_id(struct cairnfs_rw *rw, uint64_t id) {
  for (struct rw_given *g = rw->given_id[given_hash(id)]; g; g = g->inext)
    if (g->id == id) return true;
  return false;
}

static void given_add(struct cairnfs_rw *rw, uint64_t key, uint64_t id) {
  struct rw_given *g = malloc(sizeof(*g));
  if (!g) return; /* best effort: the key gets a number of its own */
  *g = (struct rw_given){.key = key, .id = id};
  g->knext = rw->given_key[given_hash(key)];
  rw->given_key[given_hash(key)] = g;
  g->inext = rw->given_id[given_hash(id)];
  rw->given_id[given_hash(id)] = g;
}

static void given_del(struct cairnfs_rw *rw, struct rw_given *g) {
  struct rw_given **pp = &rw->given_key[given_hash(g->key)];
  while (*pp != g) pp = &(*pp)->knext;
  *pp = g->knext;
  pp = &rw->given_id[given_hash(g->id)];
  while (*pp != g) pp = &(*pp)->inext;
  *pp = g->inext;
  free(g);
}

void rw_given_clear(struct cairnfs_rw *rw) {
  for (size_t b = 0; b < GIVEN_BUCKETS; b++) {
    for (struct rw_given *g = rw->given_key[b], *next; g; g = next) {
      next = g->knext;
      free(g);
    }
    rw->given_key[b] = rw->given_id[b] = NULL;
  }
}

/* A new inode of identity key: its nodeid is the one the key was given
 * before the kernel forgot it, else key unless the kernel still holds
 * that number for another entry or it was given to another key (after a
 * rebase; or, for all a restarted server knows, the node table says it
 * may). */
struct rw_inode *rw_key_new(struct cairnfs_rw *rw, uint64_t key, uint32_t lower) {
  struct rw_given *g = rw->rebased ? given_of_key(rw, key) : NULL;
  uint64_t id = 0;
  if (g) {
    id = g->id;
    given_del(rw, g);
    if (rw_inode_get(rw, id)) id = 0;
  } else if (!rw->rebased || (!rw_inode_get(rw, key) && !given_has_id(rw, key) &&
                              !cairnfs_nodetab_names_else(rw->nodes, key, lower))) {
    return rw_inode_new(rw, key, lower);
  }
  if (!id) {
    do id = ++rw->next_id;
    while (rw_inode_get(rw, id) || cairnfs_nodetab_has(rw->nodes, id) || given_has_id(rw, id));
  }
  struct rw_inode *i = rw_inode_new(rw, id, lower);
  if (i) rw_key_set(rw, i, key);
  /* For a later server: which tree inode this nodeid is (an upper
   * object's is recorded once bound, inode_noted). */
  if (i && lower) cairnfs_nodetab_note_lower(rw->nodes, id, lower);
  return i;
}

/* The d_ino of the entry of identity key in a listing. */
uint64_t rw_key_ino(struct cairnfs_rw *rw, uint64_t key) {
  struct rw_inode *i = rw->rebased ? rw_key_find(rw, key) : NULL;
  struct rw_given *g = rw->rebased && !i ? given_of_key(rw, key) : NULL;
  return i ? i->id : g ? g->id : key;
}

/* Orphans. A file whose last name goes while the kernel still holds it
 * (open, maybe) keeps a name in work/, orphan.NODEID, until the kernel
 * forgets it: a server that restarts meanwhile opens it again by its
 * file handle (the dead server's fds, which kept it, are gone), so that
 * it is still read and written through the handles open on it. Never
 * shown, never committed; a server's start removes those of nodeids with
 * no record (cairnfs_rw_setup). */
void rw_orphan_name(char *buf, size_t len, uint64_t nodeid) {
  snprintf(buf, len, "orphan.%" PRIu64, nodeid);
}

static void orphan_drop(struct cairnfs_rw *rw, uint64_t nodeid) {
  char name[40];
  rw_orphan_name(name, sizeof(name), nodeid);
  unlinkat(rw->work_fd, name, 0);
}

/* Before the last name of regular file x goes: an orphan if the kernel
 * holds it (refs beyond the caller's own, held). Best effort. */
void rw_orphan_keep(struct cairnfs_rw *rw, struct rw_inode *x, uint64_t held) {
  struct stat st;
  if (x->orphan || x->indexed || x->fd < 0 || x->refs <= held) return;
  if (fstatat(x->fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
      st.st_nlink != 1)
    return;
  char self[PBUF], name[40];
  fd_path(self, sizeof(self), x->fd, NULL);
  rw_orphan_name(name, sizeof(name), x->id);
  unlinkat(rw->work_fd, name, 0); /* a dead server's, of an object now gone */
  if (linkat(AT_FDCWD, self, rw->work_fd, name, AT_SYMLINK_FOLLOW) == 0) x->orphan = true;
}

void rw_lower_keep(struct cairnfs_rw *rw, struct rw_inode *x, uint64_t held) {
  if (x->fd >= 0 || !x->lower || x->refs <= held) return;
  cairnfs_nodetab_note_lower(rw->nodes, x->id, x->lower);
}

/* At a move (rw_rebase.c), with rw's work/ the fresh upper's: x, held by
 * the kernel with no place in the new view, keeps its object (a regular
 * file of the old upper, which the move drops) as an orphan of the fresh
 * upper, so that a later server opens it again by its file handle as the
 * dead one would have served it. Best effort. */
void rw_orphan_move(struct cairnfs_rw *rw, struct rw_inode *x) {
  struct stat st;
  x->orphan = false; /* its name in the old upper's work/ goes with it */
  if (x->indexed || x->fd < 0 || fstatat(x->fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ||
      !S_ISREG(st.st_mode) || st.st_nlink == 0)
    return;
  char self[PBUF], name[40];
  fd_path(self, sizeof(self), x->fd, NULL);
  rw_orphan_name(name, sizeof(name), x->id);
  unlinkat(rw->work_fd, name, 0);
  if (linkat(AT_FDCWD, self, rw->work_fd, name, AT_SYMLINK_FOLLOW) == 0) x->orphan = true;
}

/* Whether fd (a restored inode's object) is the orphan of nodeid. */
bool rw_orphan_is(struct cairnfs_rw *rw, uint64_t nodeid, int fd) {
  char name[40];
  struct stat a, b;
  rw_orphan_name(name, sizeof(name), nodeid);
  return fstatat(rw->work_fd, name, &a, AT_SYMLINK_NOFOLLOW) == 0 &&
         fstatat(fd, "", &b, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino &&
         a.st_dev == b.st_dev;
}

/* Drops n references of i (kid: a child's), and i if it was the last. */
static void inode_unref_as(struct cairnfs_rw *rw, struct rw_inode *i, uint64_t n, bool kid) {
  while (i) {
    if (kid && i->kids) i->kids--;
    if (i->refs > n) {
      i->refs -= n;
      return;
    }
    struct rw_inode **pp = &rw->buckets[i->id % NBUCKETS];
    while (*pp != i) pp = &(*pp)->hnext;
    *pp = i->hnext;
    key_unlink(rw, i);
    /* Its nodeid stays its key's (rw_key_new); its record too, so that a
     * later server, which restores every recorded nodeid after a move,
     * gives the key that nodeid as well. */
    bool given = rw->rebased && i->key && i->key != i->id;
    if (given) given_add(rw, i->key, i->id);
    struct rw_inode *parent = i->parent;
    /* A restored inode's count was a guess: the kernel may still hold it,
     * so its record stays, for inode_restore to find it again; unless it
     * is an orphan with no other name, which no lookup can give again. */
    struct stat st;
    bool sure = !i->restored ||
                (i->orphan && fstatat(i->fd, "", &st, AT_EMPTY_PATH) == 0 && st.st_nlink == 1);
    if (sure && !given) cairnfs_nodetab_forget(rw->nodes, i->id); /* if recorded */
    if (i->orphan && sure) orphan_drop(rw, i->id);
    if (i->fd >= 0) close(i->fd);
    free(i->name);
    free(i);
    i = parent;
    n = 1;
    kid = true;
  }
}

void rw_inode_unref(struct cairnfs_rw *rw, struct rw_inode *i, uint64_t n) {
  inode_unref_as(rw, i, n, false);
}

/* The kernel forgot n lookups of i (a FORGET). Never more than it has
 * (refs less its children's, which stay while they name i as parent). A
 * restored inode's count is unknown: its first FORGET is taken as all
 * its lookups, though it may be fewer (a single FORGET of one lookup the
 * kernel could not use, or one queued before the restart, reaching this
 * server after it handed the nodeid out again): if the kernel still
 * holds it, its record (kept: inode_unref_as) restores it again. */
void rw_inode_forget(struct cairnfs_rw *rw, struct rw_inode *i, uint64_t n) {
  if (i->base) {
    i->base = false;
    n = UINT64_MAX;
  }
  uint64_t lookups = i->refs > i->kids ? i->refs - i->kids : 0;
  if (n > lookups) n = lookups;
  if (n) rw_inode_unref(rw, i, n);
}

/* A FORGET of nodeid ino, n lookups. One of an inode this server does not
 * hold changes nothing: it was dropped on a FORGET already (a restored
 * one's, whose record stays, since the kernel may still hold it); but see
 * rw_forget_restored for an orphan's. */
void rw_forget_nodeid(struct cairnfs_rw *rw, uint64_t ino, uint64_t n) {
  struct rw_inode *i = rw_inode_get(rw, ino);
  if (i && i != rw->root) rw_inode_forget(rw, i, n);
}

/* Records where i was seen: parent's directory, under name. */
int rw_inode_place(struct cairnfs_rw *rw, struct rw_inode *i, struct rw_inode *parent,
                   const char *name) {
  if (i == rw->root) return 0;
  if (i->parent == parent && i->name && strcmp(i->name, name) == 0) return 0;
  char *copy = strdup(name);
  if (!copy) return -ENOMEM;
  parent->refs++;
  parent->kids++;
  struct rw_inode *old = i->parent;
  free(i->name);
  i->name = copy;
  i->parent = parent;
  if (old) inode_unref_as(rw, old, 1, true);
  return 0;
}

/* A fresh inode with no reference is dropped again (a failed request). */
void rw_inode_drop_unused(struct cairnfs_rw *rw, struct rw_inode *i) {
  if (i && i->refs == 0 && i != rw->root) {
    i->refs = 1;
    rw_inode_unref(rw, i, 1);
  }
}

/* Records i's upper object for later servers (nodetab.c). */
void rw_inode_noted(struct cairnfs_rw *rw, const struct rw_inode *i) {
  cairnfs_nodetab_note(rw->nodes, i->id, i->lower, i->indexed, i->fd);
}

const cairn_node *rw_lower_node(struct cairnfs *fs, const struct rw_inode *i) {
  return i->lower ? cairn_tree_node(fs->tree, i->lower) : NULL;
}

/* The tree directory merged below directory i (its origin), or NULL. */
const cairn_node *rw_lower_dir(struct cairnfs *fs, const struct rw_inode *i) {
  const cairn_node *n = rw_lower_node(fs, i);
  return n && S_ISDIR(n->mode) ? n : NULL;
}

bool rw_lower_has(struct cairnfs *fs, const struct rw_inode *dir, const char *name) {
  const cairn_node *ld = rw_lower_dir(fs, dir);
  return ld && cairn_tree_lookup(fs->tree, ld, name);
}

uint32_t rw_origin_at(int dirfd, const char *name) {
  char path[PBUF], buf[16];
  fd_path(path, sizeof(path), dirfd, name);
  ssize_t n = lgetxattr(path, XA_ORIGIN, buf, sizeof(buf) - 1);
  if (n <= 0) return 0;
  buf[n] = '\0';
  unsigned long v = strtoul(buf, NULL, 10);
  return v <= UINT32_MAX ? (uint32_t)v : 0;
}

/* Whether st is the object work/index/L: a name of the copy-up of lower
 * file L, which has several names. */
static bool is_index_of(struct cairnfs_rw *rw, uint32_t lower, const struct stat *st) {
  char idx[16];
  struct stat ist;
  snprintf(idx, sizeof(idx), "%" PRIu32, lower);
  return fstatat(rw->index_fd, idx, &ist, AT_SYMLINK_NOFOLLOW) == 0 && ist.st_ino == st->st_ino &&
         ist.st_dev == st->st_dev;
}

/* The entry name of directory dir in the merged view: *out (not yet
 * referenced by the kernel; inode_drop_unused if not replied), or -ENOENT. */
int rw_resolve(struct cairnfs *fs, struct rw_inode *dir, const char *name, struct rw_inode **out) {
  struct cairnfs_rw *rw = fs->rw;
  struct rw_inode *i;
  if (dir->fd >= 0) {
    struct stat st;
    if (fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (is_whiteout(&st)) return -ENOENT;
      uint32_t origin = rw_origin_at(dir->fd, name);
      uint64_t id = origin ? origin : UPPER_BASE + st.st_ino;
      i = rw_key_find(rw, id);
      if (!i && !(i = rw_key_new(rw, id, origin))) return -ENOMEM;
      if (i->fd < 0) {
        i->fd = openat(dir->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (i->fd < 0) {
          int r = -errno;
          rw_inode_drop_unused(rw, i);
          return r;
        }
        /* a name of a lower file with several names, found again after
         * the kernel forgot it: its object is work/index/ORIGIN */
        i->indexed = origin && !S_ISDIR(st.st_mode) && is_index_of(rw, origin, &st);
        rw_inode_noted(rw, i);
      }
      int r = rw_inode_place(rw, i, dir, name);
      if (r < 0) {
        rw_inode_drop_unused(rw, i);
        return r;
      }
      *out = i;
      return 0;
    }
    if (errno != ENOENT) return -errno;
  }
  const cairn_node *ld = rw_lower_dir(fs, dir);
  const cairn_dirent *de = ld ? cairn_tree_lookup(fs->tree, ld, name) : NULL;
  if (!de) return -ENOENT;
  const cairn_node *n = cairn_tree_node(fs->tree, de->ino);
  if (!n) return -EIO;
  i = rw_key_find(rw, de->ino);
  if (!i && !(i = rw_key_new(rw, de->ino, de->ino))) return -ENOMEM;
  if (i->fd < 0 && !S_ISDIR(n->mode) && n->nlink > 1) {
    char idx[16];
    snprintf(idx, sizeof(idx), "%" PRIu32, de->ino);
    int fd = openat(rw->index_fd, idx, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      i->fd = fd;
      i->indexed = true;
      rw_inode_noted(rw, i);
    }
  }
  int r = rw_inode_place(rw, i, dir, name);
  if (r < 0) {
    rw_inode_drop_unused(rw, i);
    return r;
  }
  *out = i;
  return 0;
}
