/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rw_rebase.c — rebase: a mount moved onto the image cairn commit made (rw.h says how the
 * upper is laid out and served).
 *
 * See the comment below: under mu, every inode the kernel holds keeps its
 * nodeid; the tree is swapped under tree_lock's write side; handles that
 * may write are moved onto copies in the fresh upper with no write
 * running; the old upper is dropped only once nothing refers to it.
 */
#include "rw.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- rebase: after cairn commit ------------------------------------------
 *
 * cairn commit, once the upper is a new image (its base plus the upper as
 * one layer), sets trusted.cairn.rebase = "UPPER_ID IMAGE_ID" on the
 * mount's root (only root may set trusted.*, and only who can read the
 * store's uppers/ knows the upper's random id). The server then serves
 * IMAGE's tree below a fresh, empty upper, and drops the old upper, whose
 * changes IMAGE now holds: later writes go to the fresh one.
 *
 * Under mu (no namespace request runs). Every inode the kernel holds keeps
 * its nodeid: one still
 * at its place (parent, name) in the old view becomes the new tree's entry
 * at that path (lower only, its key the new tree inode); a file not at
 * its place that keeps another name (in the upper, or the image's that the
 * view still shows: rebase_names) becomes the entry at
 * that name; one with none (unlinked, or below an unlinked directory) is
 * an orphan served from its old upper object, if it had one (a regular
 * file's kept as work/orphan.ID of the fresh upper: orphan_move, so that a
 * later server opens it again). Lookups find inodes by key; a new
 * entry whose key is a nodeid the kernel still holds for another entry
 * gets a number from 2^62 up. Read-only handles on old upper files keep
 * reading those (same bytes as committed; a later write through another
 * handle is not seen by them, as with overlayfs before 4.19). The old tree
 * stays allocated (a read may hold one of its nodes); the tree is swapped
 * under tree_lock, which lower reads hold. A handle that may write (an fd
 * on the old upper) is moved: its file is copied up into the fresh upper
 * with what the old copy holds now, and that fd dup2'ed over the handle's
 * fd number, under tree_lock, which writes hold: no write is lost. */

/* The identity (key) of dir/name in the current view, 0 if none. */
static uint64_t key_at(struct cairnfs *fs, struct rw_inode *dir, const char *name) {
  struct stat st;
  if (dir->fd >= 0 && fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (is_whiteout(&st)) return 0;
    uint32_t origin = rw_origin_at(dir->fd, name);
    return origin ? origin : UPPER_BASE + st.st_ino;
  }
  const cairn_node *ld = rw_lower_dir(fs, dir);
  const cairn_dirent *de = ld ? cairn_tree_lookup(fs->tree, ld, name) : NULL;
  return de ? de->ino : 0;
}

/* The inode of i's place in tree (new), 0 if i is not at its place. */
static uint32_t rebase_place(struct cairnfs *fs, struct rw_inode *i, const cairn_tree *tree) {
  if (i == fs->rw->root) return FUSE_ROOT_ID;
  if (i->rebase_mark) return i->rebase_lower;
  i->rebase_mark = 1;
  i->rebase_lower = 0;
  if (!i->parent || !i->name) return 0;
  uint32_t pl = rebase_place(fs, i->parent, tree);
  if (!pl || key_at(fs, i->parent, i->name) != i->key) return 0;
  const cairn_node *pn = cairn_tree_node(tree, pl);
  const cairn_dirent *de = pn && S_ISDIR(pn->mode) ? cairn_tree_lookup(tree, pn, i->name) : NULL;
  i->rebase_lower = de ? de->ino : 0;
  return i->rebase_lower;
}

/* Gives each of w (n) whose key is key, and no other name yet, path. */
static void rebase_name_found(struct rw_inode **w, size_t n, uint64_t key, const char *path) {
  for (size_t k = 0; k < n; k++)
    if (w[k]->key == key && !w[k]->rebase_path) w[k]->rebase_path = strdup(path);
}

/* The names the view shows of the tree's directory dir from the lower
 * only, at prefix: those upper (dfd; -1 for none: a lower-only directory)
 * has no entry at, whiteouts included, and below the subdirectories
 * among them, all of theirs. */
static void rebase_lower_names(struct cairnfs *fs, struct rw_inode **w, size_t n, uint32_t dir,
                               int dfd, const char *prefix, unsigned depth) {
  const cairn_node *dn = cairn_tree_node(fs->tree, dir);
  if (!dn || !S_ISDIR(dn->mode) || depth >= 4096) return;
  const cairn_dirent *c = cairn_tree_children(fs->tree, dn);
  for (uint32_t k = 0; k < dn->n_children; k++) {
    const char *name = cairn_tree_str(fs->tree, c[k].name);
    struct stat st;
    if (dfd >= 0 && (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT))
      continue; /* the upper's entry (its walk finds it), or hidden */
    const cairn_node *cn = cairn_tree_node(fs->tree, c[k].ino);
    char path[PATH_MAX];
    if (!cn || snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "/" : "", name) >=
                   (int)sizeof(path))
      continue;
    if (S_ISDIR(cn->mode))
      rebase_lower_names(fs, w, n, c[k].ino, -1, path, depth + 1);
    else
      rebase_name_found(w, n, c[k].ino, path);
  }
}

/* The files rebase_place found away from their place (the last name the
 * kernel saw them under removed) that still have a name in the view:
 * each gets the path of one (rebase_path), the first entry with its
 * identity below root/'s directory dfd (at prefix; merged with the tree's
 * directory merged, 0 if none): one of the upper, or (lower: some of w
 * are lower files with several names) one a merged directory shows from
 * the lower, at its place or moved there (renamed: in the upper, its
 * origin the tree's directory), and below it. A file whose last-seen name
 * goes keeps its other names, and is at one of them after the move, not
 * an orphan. */
static void rebase_names(struct cairnfs *fs, struct rw_inode **w, size_t n, bool lower, int dfd,
                         uint32_t merged, const char *prefix, unsigned depth) {
  int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
  if (!dir) {
    if (fd >= 0) close(fd);
    return;
  }
  if (lower && merged) rebase_lower_names(fs, w, n, merged, fd, prefix, depth);
  struct dirent *e;
  while ((e = readdir(dir))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    struct stat st;
    if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || is_whiteout(&st)) continue;
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "/" : "", e->d_name) >=
        (int)sizeof(path))
      continue;
    uint32_t origin = rw_origin_at(fd, e->d_name);
    if (S_ISDIR(st.st_mode)) {
      int sub =
          depth < 4096 ? openat(fd, e->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
      if (sub >= 0) rebase_names(fs, w, n, lower, sub, origin, path, depth + 1);
      if (sub >= 0) close(sub);
      continue;
    }
    rebase_name_found(w, n, origin ? origin : UPPER_BASE + st.st_ino, path);
  }
  closedir(dir);
}

/* The inode at path (from the root, '/'-separated) in tree, 0 if none. */
static uint32_t tree_at(const cairn_tree *tree, const char *path) {
  char buf[PATH_MAX], *save = NULL;
  snprintf(buf, sizeof(buf), "%s", path);
  uint32_t ino = FUSE_ROOT_ID;
  for (char *c = strtok_r(buf, "/", &save); c && ino; c = strtok_r(NULL, "/", &save)) {
    const cairn_node *dn = cairn_tree_node(tree, ino);
    const cairn_dirent *de = dn && S_ISDIR(dn->mode) ? cairn_tree_lookup(tree, dn, c) : NULL;
    ino = de ? de->ino : 0;
  }
  return ino;
}

/* Gives i (lower only in the new view) the place its rebase_path names:
 * the directories on the way resolved from the root. */
static void rebase_replace(struct cairnfs *fs, struct rw_inode *i) {
  char *path = i->rebase_path, *save = NULL;
  i->rebase_path = NULL;
  struct rw_inode *dir = fs->rw->root;
  int r = 0;
  for (char *c = strtok_r(path, "/", &save), *next; r == 0 && c; c = next) {
    next = strtok_r(NULL, "/", &save);
    struct rw_inode *x;
    if (!next) {
      r = rw_inode_place(fs->rw, i, dir, c);
    } else if ((r = rw_resolve(fs, dir, c, &x)) == 0) {
      dir = x;
    }
  }
  if (r < 0) rw_inode_drop_unused(fs->rw, dir);
  free(path);
}

/* Gives i, restored by a restarted server and not looked up since (no
 * place), the place it has in the current view, so that the move finds
 * it there: a lower-only (or indexed) one where the tree has it, an upper
 * object at its path in the upper's root/, resolved from the root. */
static void rebase_find_place(struct cairnfs *fs, struct rw_inode *i) {
  struct cairnfs_rw *rw = fs->rw;
  if (i->fd < 0 || i->indexed) {
    rw_inode_find_parent(fs, i);
    return;
  }
  char self[PBUF], path[PATH_MAX], root[PATH_MAX];
  fd_path(self, sizeof(self), i->fd, NULL);
  ssize_t n = readlink(self, path, sizeof(path) - 1);
  fd_path(self, sizeof(self), rw->root_fd, NULL);
  ssize_t m = readlink(self, root, sizeof(root) - 1);
  if (n <= 0 || m <= 0) return;
  path[n] = root[m] = '\0';
  if (strncmp(path, root, (size_t)m) != 0 || path[m] != '/') return;
  struct rw_inode *dir = rw->root, *x = NULL;
  char *save = NULL;
  for (char *c = strtok_r(path + m + 1, "/", &save), *next; c; c = next) {
    next = strtok_r(NULL, "/", &save);
    if (rw_resolve(fs, dir, c, &x) < 0) {
      rw_inode_drop_unused(rw, dir);
      return;
    }
    if (next) dir = x;
  }
  if (x && x != i) rw_inode_drop_unused(rw, x);
}

/* Moves handle h onto a copy of its file in the (fresh) upper. */
static int move_handle(struct cairnfs *fs, struct whandle *h) {
  struct stat st;
  if (fstat(h->fd, &st) < 0) return -errno;
  int r = rw_ensure_upper(fs, h->i);
  if (r < 0) return r;
  int flags = fcntl(h->fd, F_GETFL);
  char path[PBUF];
  fd_path(path, sizeof(path), h->fd, NULL);
  cairn_autoclose int src = open(path, O_RDONLY | O_CLOEXEC); /* h->fd may be write-only */
  if (src < 0) return -errno;
  int fd = rw_reopen(h->i, O_RDWR);
  if (fd < 0) return fd;
  r = ftruncate(fd, st.st_size) < 0 ? -errno : 0;
  for (loff_t in = 0, out = 0; r == 0 && in < st.st_size;) {
    ssize_t k = copy_file_range(src, &in, fd, &out, (size_t)(st.st_size - in), 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) r = k < 0 ? -errno : -EIO;
  }
  if (r == 0 && flags >= 0) fcntl(fd, F_SETFL, flags & (O_APPEND | O_NONBLOCK | O_NOATIME));
  if (r == 0 && dup2(fd, h->fd) < 0) r = -errno;
  close(fd);
  return r;
}

/* The old view's records of nodeids no inode here holds (restored by an
 * earlier server, dropped on a FORGET that may not have been the kernel's
 * last): they name nothing in the new view. */
static void rebase_stale(uint64_t nodeid, void *arg) {
  struct cairnfs_rw *rw = arg;
  if (nodeid != FUSE_ROOT_ID && !rw_inode_get(rw, nodeid))
    cairnfs_nodetab_stage(rw->nodes, nodeid, 0, false, -1);
}

struct nodeids {
  uint64_t *v;
  size_t n, cap;
};

static void nodeid_add(uint64_t nodeid, void *arg) {
  struct nodeids *a = arg;
  if (a->n == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 64;
    uint64_t *v = realloc(a->v, cap * sizeof(*v));
    if (!v) return;
    a->v = v;
    a->cap = cap;
  }
  a->v[a->n++] = nodeid;
}

/* Restores every nodeid the node table binds that no inode here holds
 * (those that do not restore: rebase_stale). */
static void rebase_restore_all(struct cairnfs *fs) {
  struct cairnfs_rw *rw = fs->rw;
  struct nodeids a = {0};
  cairnfs_nodetab_foreach(rw->nodes, nodeid_add, &a);
  for (size_t k = 0; k < a.n; k++)
    if (a.v[k] != FUSE_ROOT_ID && !rw_inode_get(rw, a.v[k])) rw_inode_restore(fs, a.v[k], 0);
  free(a.v);
}

/* The restored inodes no FORGET came for since (base: their count of the
 * kernel's references unknown; or records of nodeids given to keys the
 * kernel forgot since the last move) that the kernel does not hold (it forgot
 * them while a dead server ran, or a FORGET taken for fewer lookups left
 * the record, which rebase_restore_all restored): dropped with their
 * record and kept copy, so that the move makes no orphan of what the
 * kernel cannot reach, which no FORGET would ever drop. */
static void rebase_drop_unheld(struct cairnfs *fs) {
  struct cairnfs_rw *rw = fs->rw;
  struct nodeids a = {0};
  for (size_t b = 0; b < NBUCKETS; b++)
    for (struct rw_inode *i = rw->buckets[b]; i; i = i->hnext)
      if (i != rw->root && i->restored && i->base) nodeid_add(i->id, &a);
  for (size_t k = 0; k < a.n; k++) {
    struct rw_inode *i = rw_inode_get(rw, a.v[k]);
    if (!i || !i->base || rw_kernel_holds(rw, i->id)) continue;
    i->restored = false; /* its count is known now: none; the record goes with it */
    uint64_t id = i->id;
    rw_inode_forget(rw, i, UINT64_MAX);
    /* (also a nodeid given to a key the kernel forgot, which keeps its
     * record until now: rw_inode.c) */
    if (!rw_inode_get(rw, id)) cairnfs_nodetab_forget(rw->nodes, id);
  }
  free(a.v);
}

/* A nodeid the kernel may hold that no inode here knows, and what it is
 * in the new view: tree inode lower (0: nothing). */
struct lower_map {
  uint64_t nodeid;
  uint32_t lower;
};

struct unknown {
  struct lower_map *v;
  size_t n, cap;
  unsigned char *seen; /* a bit per tree inode of the old tree */
};

/* Whether old tree inode ino is marked in u (and marks it). */
static bool unknown_seen(struct unknown *u, size_t count, uint32_t ino) {
  if (ino <= FUSE_ROOT_ID || ino > count || (u->seen[ino / 8] & (1u << (ino % 8)))) return true;
  u->seen[ino / 8] |= (unsigned char)(1u << (ino % 8));
  return false;
}

/* Maps old tree inode ino to now (the new tree's inode at its path in
 * the view, 0: none) if the new tree numbers that path otherwise and no
 * inode here knows ino nor the table records it. */
static void unknown_add(struct cairnfs_rw *rw, struct unknown *u, uint32_t ino, uint32_t now) {
  if (now == ino || rw_inode_get(rw, ino) || cairnfs_nodetab_has(rw->nodes, ino)) return;
  if (u->n == u->cap) {
    size_t cap = u->cap ? 2 * u->cap : 256;
    struct lower_map *v = realloc(u->v, cap * sizeof(*v));
    if (!v) return;
    u->v = v;
    u->cap = cap;
  }
  u->v[u->n++] = (struct lower_map){.nodeid = ino, .lower = now};
}

/* The new tree's entry name in its directory to (0: none), or 0. */
static uint32_t new_at(const cairn_tree *tree, uint32_t to, const char *name) {
  const cairn_node *tn = to ? cairn_tree_node(tree, to) : NULL;
  const cairn_dirent *de = tn && S_ISDIR(tn->mode) ? cairn_tree_lookup(tree, tn, name) : NULL;
  return de ? de->ino : 0;
}

/* One directory of the view (the old one, still served), at the path the
 * new tree's directory to (0: none) has: the upper's directory dfd (-1:
 * none, lower only) over the old tree's directory merged (0: none). Each
 * lower-only entry it shows, seen first here, goes into u as the new
 * tree's inode at its path in the view (which renames of the directories
 * above it, in the upper, make another than its path in the old tree);
 * then the same below its subdirectories, upper and lower. */
static void unknown_walk(struct cairnfs *fs, const cairn_tree *tree, int dfd, uint32_t merged,
                         uint32_t to, struct unknown *u, unsigned depth) {
  struct cairnfs_rw *rw = fs->rw;
  size_t count = cairn_tree_count(fs->tree);
  if (depth >= 4096) return;
  const cairn_node *dn = merged ? cairn_tree_node(fs->tree, merged) : NULL;
  if (dn && S_ISDIR(dn->mode)) {
    const cairn_dirent *c = cairn_tree_children(fs->tree, dn);
    for (uint32_t k = 0; k < dn->n_children; k++) {
      const char *name = cairn_tree_str(fs->tree, c[k].name);
      struct stat st;
      if (dfd >= 0 && (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT))
        continue; /* the upper's entry (walked below), or hidden */
      uint32_t ino = c[k].ino;
      if (unknown_seen(u, count, ino)) continue;
      uint32_t now = new_at(tree, to, name);
      unknown_add(rw, u, ino, now);
      const cairn_node *cn = cairn_tree_node(fs->tree, ino);
      if (cn && S_ISDIR(cn->mode)) unknown_walk(fs, tree, -1, ino, now, u, depth + 1);
    }
  }
  int fd = dfd >= 0 ? openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
  if (!dir) {
    if (fd >= 0) close(fd);
    return;
  }
  struct dirent *e;
  while ((e = readdir(dir))) {
    struct stat st;
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
        fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || is_whiteout(&st))
      continue;
    uint32_t origin = rw_origin_at(fd, e->d_name);
    unknown_seen(u, count, origin); /* an upper object: the table records it */
    if (!S_ISDIR(st.st_mode)) continue;
    int sub = openat(fd, e->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) continue;
    unknown_walk(fs, tree, sub, origin, new_at(tree, to, e->d_name), u, depth + 1);
    close(sub);
  }
  closedir(dir);
}

/* The old tree's inodes the view does not show (below a directory
 * removed or renamed over, or whited out): the kernel may hold one (a
 * working directory since before the restart), which names nothing in
 * the new view, not the new tree's inode of its number. */
static void unknown_hidden(struct cairnfs *fs, const cairn_tree *tree, struct unknown *u) {
  size_t count = cairn_tree_count(fs->tree);
  for (size_t ino = FUSE_ROOT_ID + 1; ino <= count; ino++)
    if (!unknown_seen(u, count, (uint32_t)ino) && cairn_tree_node(tree, (uint32_t)ino))
      unknown_add(fs->rw, u, (uint32_t)ino, 0);
}

/* After a restart (this server did not hand out every nodeid the kernel
 * holds), before the switch to tree: the nodeids the kernel may hold for
 * lower-only entries that no inode here knows nor the table records are
 * the current tree's inode numbers; each whose path in the view (not in
 * the old tree: a directory above it may have been renamed) names
 * another tree inode in tree (or none) is mapped to it, so that it keeps
 * naming its file (and no new entry is handed out as it: nodetab.c's
 * names_else). A mount whose server never restarted knows every nodeid
 * it handed out. One walk of the view and the new tree, by name. */
static struct lower_map *rebase_unknown(struct cairnfs *fs, const cairn_tree *tree, size_t *n) {
  struct unknown u = {0};
  *n = 0;
  if (cairnfs_nodetab_epoch(fs->rw->nodes) <= 1) return NULL;
  if (!(u.seen = calloc(cairn_tree_count(fs->tree) / 8 + 1, 1))) return NULL;
  unknown_walk(fs, tree, fs->rw->root_fd, FUSE_ROOT_ID, FUSE_ROOT_ID, &u, 0);
  unknown_hidden(fs, tree, &u);
  free(u.seen);
  *n = u.n;
  return u.v;
}

/* Records the move (mu and tree_lock's write side held): every inode the
 * kernel may hold, as the new view has it (an upper object of the fresh
 * upper, else lower only, else an orphan kept in the fresh upper's work/, else nothing),
 * and the fresh upper. */
static void rebase_record(struct cairnfs *fs, const struct lower_map *map, size_t n_map) {
  struct cairnfs_rw *rw = fs->rw;
  if (!rw->nodes) return;
  cairnfs_nodetab_foreach(rw->nodes, rebase_stale, rw);
  for (size_t k = 0; k < n_map; k++)
    cairnfs_nodetab_stage(rw->nodes, map[k].nodeid, map[k].lower, false, -1);
  for (size_t b = 0; b < NBUCKETS; b++)
    for (struct rw_inode *i = rw->buckets[b]; i; i = i->hnext)
      if (i != rw->root)
        cairnfs_nodetab_stage(rw->nodes, i->id, i->lower, i->indexed,
                              i->lower || i->orphan ? i->fd : -1);
  cairnfs_nodetab_move(rw->nodes, rw->id);
}

/* What the move goes to, made before anything of the view changes: the
 * new image's tree and pins, and the fresh upper with its directories. */
struct rebase_target {
  cairn_tree *tree;
  cairn_pinset *pins;
  cairn_id id;
  char path[PATH_MAX];
  int lock_fd, root_fd, work_fd, index_fd;
};

/* Splits "UPPER_ID IMAGE_ID" into buf: upper and image point into it. */
static int rebase_parse(const char *value, size_t size, char buf[2 * CAIRN_ID_LEN + 2],
                        const char **upper, const char **image) {
  if (size != 2 * CAIRN_ID_LEN + 1) return -EINVAL;
  memcpy(buf, value, size);
  buf[size] = '\0';
  if (buf[CAIRN_ID_LEN] != ' ') return -EINVAL;
  buf[CAIRN_ID_LEN] = '\0';
  *upper = buf;
  *image = buf + CAIRN_ID_LEN + 1;
  return cairn_id_valid(*image) ? 0 : -EINVAL;
}

static void rebase_target_free(struct cairnfs_rw *rw, struct rebase_target *t) {
  if (t->lock_fd >= 0) cairn_upper_drop(rw->st2, t->id);
  for (int *fd = (int[]){t->lock_fd, t->root_fd, t->work_fd, t->index_fd}, k = 0; k < 4; k++)
    if (fd[k] >= 0) close(fd[k]);
  cairn_tree_free(t->tree);
  if (t->pins) cairn_pinset_release(rw->st2, t->pins);
}

/* Pins image for this server (for as long as it serves it, with the
 * purpose the supervisor's pins have), builds its tree and creates the
 * fresh upper; on failure nothing of it is left. */
static int rebase_target_make(struct cairnfs *fs, const char *image, struct rebase_target *t) {
  struct cairnfs_rw *rw = fs->rw;
  *t = (struct rebase_target){.lock_fd = -1, .root_fd = -1, .work_fd = -1, .index_fd = -1};
  char purpose[PATH_MAX + 8];
  snprintf(purpose, sizeof(purpose), "mount %s", rw->dir);
  int r = rw->st2 ? 0 : cairn_store_open(cairn_store_dir(fs->st), &rw->st2);
  if (r == 0 && !(t->pins = cairn_pinset_new(purpose, true))) r = -ENOMEM;
  if (r == 0) r = cairn_pin_image(rw->st2, t->pins, image);
  if (r == 0) r = cairn_tree_build(rw->st2, image, &t->tree);
  cairn_tree **olds = r == 0 ? realloc(rw->old_trees, (rw->n_old_trees + 1) * sizeof(*olds)) : NULL;
  if (r == 0 && !olds) r = -ENOMEM;
  if (olds) rw->old_trees = olds;
  if (r == 0 && (r = cairn_upper_new_id(t->id)) < 0)
    cairn_fail(rw->st2, r, "getrandom: %s", strerror(-r));
  /* Said before the upper is made (listed): if this server dies before
   * the move's write to the node table, its supervisor drops that upper. */
  if (r == 0) cairnfs_report_moving(t->id);
  if (r == 0)
    r = cairn_upper_create_moved(rw->st2, image, rw->dir, rw->id, t->id, t->path, sizeof(t->path),
                                 &t->lock_fd);
  if (r == 0) {
    t->root_fd = openat(t->lock_fd, "root", O_PATH | O_DIRECTORY | O_CLOEXEC);
    t->work_fd = openat(t->lock_fd, "work", O_PATH | O_DIRECTORY | O_CLOEXEC);
    t->index_fd = openat(t->lock_fd, "work/index", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (t->root_fd < 0 || t->work_fd < 0 || t->index_fd < 0) r = -errno;
  }
  if (r < 0) rebase_target_free(rw, t);
  return r;
}

/* Inodes a restarted server restored and no lookup placed since: each
 * given the place it has in the current view. */
static void rebase_place_restored(struct cairnfs *fs) {
  struct cairnfs_rw *rw = fs->rw;
  size_t n_lost = 0;
  for (size_t b = 0; b < NBUCKETS; b++)
    for (struct rw_inode *i = rw->buckets[b]; i; i = i->hnext)
      n_lost += i != rw->root && !i->parent;
  struct rw_inode **lost = n_lost ? calloc(n_lost, sizeof(*lost)) : NULL;
  size_t k_lost = 0;
  for (size_t b = 0; lost && b < NBUCKETS; b++)
    for (struct rw_inode *i = rw->buckets[b]; i && k_lost < n_lost; i = i->hnext)
      if (i != rw->root && !i->parent) lost[k_lost++] = i;
  for (size_t k = 0; k < k_lost; k++)
    if (!lost[k]->parent) rebase_find_place(fs, lost[k]);
  free(lost);
}

/* The upper objects not at their place in tree that still have a name
 * (*n of them, returned): each given the path of another of its names
 * in the new view (rebase_names), if it has one there. */
static struct rw_inode **rebase_away(struct cairnfs *fs, const cairn_tree *tree, size_t *n) {
  struct cairnfs_rw *rw = fs->rw;
  struct rw_inode **away = NULL;
  size_t n_away = 0;
  for (size_t b = 0; b < NBUCKETS; b++) {
    for (struct rw_inode *i = rw->buckets[b]; i; i = i->hnext) {
      struct stat st;
      if (i == rw->root || i->rebase_lower || i->fd < 0 || i->key == 0 ||
          fstatat(i->fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode) ||
          (!i->indexed && st.st_nlink <= (nlink_t)i->orphan)) /* no name left */
        continue;
      struct rw_inode **a = realloc(away, (n_away + 1) * sizeof(*a));
      if (!a) break;
      away = a;
      away[n_away++] = i;
    }
  }
  bool lower = false; /* a lower file with several names among them */
  for (size_t k = 0; k < n_away; k++) lower |= away[k]->indexed && away[k]->lower;
  if (n_away) rebase_names(fs, away, n_away, lower, rw->root_fd, FUSE_ROOT_ID, "", 0);
  for (size_t k = 0; k < n_away; k++) {
    struct rw_inode *i = away[k];
    i->rebase_lower = i->rebase_path ? tree_at(tree, i->rebase_path) : 0;
    if (!i->rebase_lower) {
      free(i->rebase_path);
      i->rebase_path = NULL;
    }
  }
  *n = n_away;
  return away;
}

/* Swaps the served tree for tree (readers of the old one hold tree_lock)
 * and re-keys every inode: one at its place becomes the new tree's entry
 * there, lower only; any other an orphan, served from its old upper
 * object if it has one, nothing merged. */
static void rebase_switch(struct cairnfs *fs, cairn_tree *tree) {
  struct cairnfs_rw *rw = fs->rw;
  pthread_rwlock_wrlock(&rw->tree_lock);
  rw->old_trees[rw->n_old_trees++] = fs->tree;
  fs->tree = tree;
  pthread_rwlock_unlock(&rw->tree_lock);
  rw->rebased = true;
  if (!rw->next_id) rw->next_id = 1ULL << 62;
  rw_given_clear(rw); /* the old view's keys: the kernel holds none of them */
  for (size_t b = 0; b < NBUCKETS; b++) {
    for (struct rw_inode *i = rw->buckets[b]; i; i = i->hnext) {
      if (i == rw->root) continue;
      uint32_t l = i->rebase_lower;
      if (l) {
        if (i->fd >= 0) close(i->fd);
        i->fd = -1;
      }
      i->indexed = false;
      i->lower = l;
      rw_key_set(rw, i, l);
    }
  }
}

/* The mount's root becomes the fresh upper's, with the new image's root
 * attributes (an error is returned, the new tree is served anyway). */
static int rebase_root(struct cairnfs *fs, const struct rebase_target *t) {
  struct cairnfs_rw *rw = fs->rw;
  const cairn_node *n = cairn_tree_node(fs->tree, FUSE_ROOT_ID);
  int r = n ? rw_copy_meta(fs, 0, n, t->lock_fd, "root") : -EIO;
  close(rw->root->fd);
  rw->root->fd = dup(t->root_fd);
  if (rw->root->fd < 0 && r == 0) r = -errno;
  return r;
}

/* The fresh upper t becomes the mount's: the old one's fds closed, its id
 * returned in old. */
static void rebase_adopt(struct cairnfs_rw *rw, const char *image, const struct rebase_target *t,
                         cairn_id old) {
  snprintf(old, sizeof(cairn_id), "%s", rw->id);
  close(rw->root_fd);
  close(rw->work_fd);
  close(rw->index_fd);
  close(rw->lock_fd);
  rw->root_fd = t->root_fd;
  rw->work_fd = t->work_fd;
  rw->index_fd = t->index_fd;
  rw->lock_fd = t->lock_fd;
  snprintf(rw->id, sizeof(rw->id), "%s", t->id);
  snprintf(rw->image, sizeof(rw->image), "%s", image);
  snprintf(rw->path, sizeof(rw->path), "%s", t->path);
  rw->resumed = false;
}

/* Handles that may write: onto a copy in the fresh upper of what their
 * file holds now (writes since the commit read it included); tree_lock's
 * write side held, so no write runs meanwhile. */
static void rebase_move_handles(struct cairnfs *fs) {
  struct cairnfs_rw *rw = fs->rw;
  for (struct whandle *h = rw->whandles; h; h = h->next)
    if (h->i->lower) move_handle(fs, h); /* an orphan's stays; a failed move too */
  /* And a dead server's handles reopened here, the same way. */
  for (struct stale_fh *sf = rw->stale; sf; sf = sf->next) {
    struct rw_inode *i = sf->fd >= 0 && sf->ino ? rw_inode_get(rw, sf->ino) : NULL;
    struct whandle h = {.fd = sf->fd, .i = i};
    if (i && i->lower) move_handle(fs, &h);
  }
}

/* The upper a rebase left, its changes the new image's: unlisted at once
 * (cairn_upper_discard renames it away), its files removed by a thread of
 * its own, on a store handle of its own, after the move's answer: the
 * commit returns, and the writes its freeze held go on, without waiting
 * for an unlink of every file the upper holds. A server that dies first
 * leaves the renamed upper to gc, as a removal cut short always did. */
struct drop_job {
  char *store;
  cairn_id id;
};

static void *drop_run(void *arg) {
  struct drop_job *j = arg;
  cairn_store *st;
  if (cairn_store_open_lazy(j->store, &st) == 0) {
    cairn_upper_drop(st, j->id);
    cairn_store_close(st);
  }
  free(j->store);
  free(j);
  return NULL;
}

void rw_drop_wait(struct cairnfs_rw *rw) {
  if (!rw->dropping) return;
  pthread_join(rw->dropper, NULL);
  rw->dropping = false;
}

static void drop_later(struct cairnfs *fs, const char *old) {
  struct cairnfs_rw *rw = fs->rw;
  rw_drop_wait(rw); /* the previous rebase's, if it still runs */
  cairn_upper_discard(rw->st2, old);
  struct drop_job *j = malloc(sizeof(*j));
  char *store = strdup(cairn_store_dir(rw->st2));
  if (j && store) {
    j->store = store;
    snprintf(j->id, sizeof(j->id), "%s", old);
    if (pthread_create(&rw->dropper, NULL, drop_run, j) == 0) {
      rw->dropping = true;
      return;
    }
  }
  free(store);
  free(j);
  cairn_upper_drop(rw->st2, old); /* no thread: here, as before */
}

int rw_rebase(struct cairnfs *fs, const char *value, size_t size) {
  struct cairnfs_rw *rw = fs->rw;
  char buf[2 * CAIRN_ID_LEN + 2];
  const char *upper, *image;
  int r = rebase_parse(value, size, buf, &upper, &image);
  if (r < 0) return r;
  LOCK(fs);
  /* The kernel resends the request of a server killed after it moved the
   * mount (nodetab.c's one write) and before it answered: this server is
   * on that image already, the move is done. */
  if (strcmp(upper, rw->id) != 0 && cairnfs_resent && strcmp(image, rw->image) == 0) {
    UNLOCK(fs);
    return 0;
  }
  struct rebase_target t;
  r = strcmp(upper, rw->id) == 0 ? rebase_target_make(fs, image, &t) : -EPERM;
  if (r < 0) {
    UNLOCK(fs);
    return r;
  }
  /* Every nodeid the node table binds that this server has not restored
   * (a restarted server restores on need): the kernel may hold it (a file
   * open since before the restart, not used since), so it is moved as
   * the others are, not recorded as naming nothing. */
  rebase_restore_all(fs);
  rebase_drop_unheld(fs);
  rebase_place_restored(fs);
  /* Where each inode the kernel holds is in the new tree (the old view
   * still served), then the switch. */
  for (size_t b = 0; b < NBUCKETS; b++)
    for (struct rw_inode *i = rw->buckets[b]; i; i = i->hnext) i->rebase_mark = 0;
  for (size_t b = 0; b < NBUCKETS; b++)
    for (struct rw_inode *i = rw->buckets[b]; i; i = i->hnext) rebase_place(fs, i, t.tree);
  size_t n_away = 0;
  struct rw_inode **away = rebase_away(fs, t.tree, &n_away);
  /* The image's files held with no place in the new view: copied, for the
   * reads through the tree that the switch ends. */
  for (size_t b = 0; b < NBUCKETS; b++) {
    for (struct rw_inode *i = rw->buckets[b]; i; i = i->hnext) {
      const cairn_node *ln = i->lower ? cairn_tree_node(fs->tree, i->lower) : NULL;
      if (i != rw->root && !i->rebase_lower && i->fd < 0 && ln && S_ISREG(ln->mode))
        rw_orphan_copy(fs, i);
    }
  }
  size_t n_unknown = 0;
  struct lower_map *unknown = rebase_unknown(fs, t.tree, &n_unknown);
  rebase_switch(fs, t.tree);
  r = rebase_root(fs, &t);
  /* The files moved to another of their names: there in the new view. */
  for (size_t k = 0; k < n_away; k++)
    if (away[k]->rebase_path) rebase_replace(fs, away[k]);
  free(away);
  /* The tree's parents (rw_restart.c) are the new tree's, built on need. */
  free(rw->rparent);
  rw->rparent = NULL;
  cairn_id old;
  rebase_adopt(rw, image, &t, old);
  /* The orphans: kept in the fresh upper's work/ (the old upper goes). */
  for (size_t b = 0; b < NBUCKETS; b++)
    for (struct rw_inode *i = rw->buckets[b]; i; i = i->hnext)
      if (i != rw->root && !i->lower && i->fd >= 0) rw_orphan_move(rw, i);
  /* The fresh upper is this server's own until it dies: the supervisor
   * then takes it over, with the new image's pins (supervisor.c). */
  rw->inherited = false;
  pthread_rwlock_wrlock(&rw->tree_lock);
  rebase_move_handles(fs);
  /* Then the move is made durable for a later server (nodetab.c), still
   * with no write running: what every nodeid the kernel may hold is in
   * the new view, and the fresh upper, in one write. A server killed
   * before it is restarted on the old upper and image (which hold every
   * write so far: the old upper is dropped below, after it), and one
   * killed after it on the new ones. For a kill of the supervisor too
   * (the table dies with it): the fresh upper and the new image hold the
   * view now, the store says so (cairn_upper_mark_moved), so that of the
   * two uppers left the old one goes, as below. */
  cairn_upper_mark_moved(rw->lock_fd);
  rebase_record(fs, unknown, n_unknown);
  free(unknown);
  pthread_rwlock_unlock(&rw->tree_lock);
  /* The old image's pins go; a release deletes the annotations of its
   * pins, those of the layers both images share too, so the new set's
   * are written again. */
  if (rw->pins) {
    cairn_pinset_release(rw->st2, rw->pins);
    cairn_pin_image(rw->st2, t.pins, image);
  }
  rw->pins = t.pins;
  int upper_fd = rw->lock_fd;
  UNLOCK(fs);
  cairnfs_report_moved(image, upper_fd); /* the supervisor takes them over */
  drop_later(fs, old);                   /* its changes are the new image's now */
  return r;
}
