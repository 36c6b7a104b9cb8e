/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rw_xattr.c — extended attributes of a writable mount (rw.h says how the
 * upper is laid out and served).
 *
 * trusted.cairn.* is the daemon's own: never listed or removed, set only
 * as trusted.cairn.rebase on the root, which is cairn commit's request to
 * rebase (rw_rebase.c): rw_setxattr recognises the name and calls
 * rw_rebase; and read only as trusted.cairn.upper on the root: the id of
 * the upper this mount serves now, by which cairn commit and umount know
 * the mount at a directory from another made for it earlier whose daemon
 * still serves it in another mount namespace (only root reads trusted.*;
 * the id is no secret from who can read the store's uppers/); read as
 * trusted.cairn.freeze.UPPER, .thaw.UPPER and .rebase.UPPER.IMAGE on the
 * root, cairn commit's freeze of the changes and move under it
 * (rw_freeze.c). A
 * lower-only inode's xattrs are its tree node's; setting or removing one
 * copies the inode up first. Calls act on the object through its fd's
 * /proc link (fd_path, rw.h), followed: that leads to the object itself,
 * a symlink too (not its target), whichever names it has left (none,
 * after a commit moved the mount on or an unlink of its last name while
 * the kernel holds it).
 */
#include "rw.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

/* ---- extended attributes ----------------------------------------------- */

static bool xattr_ours(const char *name) {
  return strncmp(name, XA_PREFIX, strlen(XA_PREFIX)) == 0;
}

/* cairn commit's requests, read on the root (rw_freeze.c): 1 if name
 * is none, else the answer (0 or -errno). */
static int commit_request(fuse_req_t req, struct cairnfs *fs, const char *name) {
  char upper[CAIRN_ID_LEN + 1], image[CAIRN_ID_LEN + 1];
  const char *p;
  size_t n = strlen(name);
  if (strncmp(name, XA_FREEZE, strlen(XA_FREEZE)) == 0) {
    p = name + strlen(XA_FREEZE);
    if (strlen(p) != CAIRN_ID_LEN) return -EINVAL;
    return rw_freeze(req, fs, p);
  }
  if (strncmp(name, XA_THAW, strlen(XA_THAW)) == 0) {
    p = name + strlen(XA_THAW);
    return strlen(p) == CAIRN_ID_LEN ? rw_thaw(fs, p) : -EINVAL;
  }
  if (strncmp(name, XA_REBASE_FROZEN, strlen(XA_REBASE_FROZEN)) != 0) return 1;
  p = name + strlen(XA_REBASE_FROZEN);
  if (n - strlen(XA_REBASE_FROZEN) != 2 * CAIRN_ID_LEN + 1 || p[CAIRN_ID_LEN] != '.')
    return -EINVAL;
  memcpy(upper, p, CAIRN_ID_LEN);
  upper[CAIRN_ID_LEN] = '\0';
  memcpy(image, p + CAIRN_ID_LEN + 1, CAIRN_ID_LEN + 1);
  for (const char *c = image; *c; c++)
    if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return -EINVAL;
  return rw_rebase_frozen(fs, upper, image);
}

void rw_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
  struct cairnfs *fs = fs_of(req);
  int c = ino == FUSE_ROOT_ID && xattr_ours(name) ? commit_request(req, fs, name) : 1;
  if (c != 1) {
    if (c < 0)
      fuse_reply_err(req, -c);
    else if (size == 0)
      fuse_reply_xattr(req, 0);
    else
      fuse_reply_buf(req, NULL, 0);
    return;
  }
  if (ino == FUSE_ROOT_ID && strcmp(name, XA_UPPER) == 0) {
    cairn_id id;
    LOCK(fs); /* a rebase changes it */
    snprintf(id, sizeof(id), "%s", fs->rw->id);
    UNLOCK(fs);
    size_t len = strlen(id);
    if (size == 0)
      fuse_reply_xattr(req, len);
    else if (size < len)
      fuse_reply_err(req, ERANGE);
    else
      fuse_reply_buf(req, id, len);
    return;
  }
  if (xattr_ours(name)) {
    fuse_reply_err(req, ENODATA);
    return;
  }
  LOCK(fs);
  struct rw_inode *i = rw_inode_of(fs, ino);
  if (!i) {
    UNLOCK(fs);
    fuse_reply_err(req, ESTALE);
    return;
  }
  if (i->fd < 0) { /* a tree a commit swaps out stays allocated: n outlives mu */
    const cairn_node *n = rw_lower_node(fs, i);
    const cairn_tree *t = fs->tree;
    UNLOCK(fs);
    cairnfs_reply_getxattr(req, t, n, name, size);
    return;
  }
  char path[PBUF];
  fd_path(path, sizeof(path), i->fd, NULL);
  char *buf = size ? malloc(size) : NULL;
  ssize_t n = size && !buf ? (errno = ENOMEM, -1) : getxattr(path, name, buf, size);
  int err = errno;
  UNLOCK(fs);
  if (n < 0)
    fuse_reply_err(req, err);
  else if (size == 0)
    fuse_reply_xattr(req, (size_t)n);
  else
    fuse_reply_buf(req, buf, (size_t)n);
  free(buf);
}

void rw_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  struct cairnfs *fs = fs_of(req);
  LOCK(fs);
  struct rw_inode *i = rw_inode_of(fs, ino);
  char *list = NULL;
  ssize_t len = 0;
  int err = 0;
  if (!i) {
    err = ESTALE;
  } else if (i->fd < 0) {
    const cairn_node *n = rw_lower_node(fs, i);
    for (size_t k = 0; n && k < n->n_xattrs; k++)
      len += (ssize_t)strlen(cairn_tree_xattr(fs->tree, n, k).name) + 1;
    list = malloc(len ? (size_t)len : 1);
    if (!list) err = ENOMEM;
    size_t used = 0;
    for (size_t k = 0; list && n && k < n->n_xattrs; k++) {
      const char *x = cairn_tree_xattr(fs->tree, n, k).name;
      memcpy(list + used, x, strlen(x) + 1);
      used += strlen(x) + 1;
    }
  } else {
    char path[PBUF];
    fd_path(path, sizeof(path), i->fd, NULL);
    len = listxattr(path, NULL, 0);
    if (len >= 0) list = malloc((size_t)len + 1);
    if (len >= 0 && list) len = listxattr(path, list, (size_t)len);
    if (len < 0)
      err = errno;
    else if (!list)
      err = ENOMEM;
  }
  UNLOCK(fs);
  /* trusted.cairn.* is ours */
  size_t kept = 0;
  for (ssize_t k = 0; !err && k < len;) {
    size_t l = strlen(list + k) + 1;
    if (!xattr_ours(list + k)) {
      memmove(list + kept, list + k, l);
      kept += l;
    }
    k += (ssize_t)l;
  }
  if (err)
    fuse_reply_err(req, err);
  else if (size == 0)
    fuse_reply_xattr(req, kept);
  else if (size < kept)
    fuse_reply_err(req, ERANGE);
  else
    fuse_reply_buf(req, list, kept);
  free(list);
}

void rw_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
                 int flags) {
  struct cairnfs *fs = fs_of(req);
  if (ino == FUSE_ROOT_ID && strcmp(name, XA_REBASE) == 0) {
    fuse_reply_err(req, -rw_rebase(fs, value, size));
    return;
  }
  if (xattr_ours(name)) {
    fuse_reply_err(req, EPERM);
    return;
  }
  LOCK(fs);
  struct rw_inode *i = rw_inode_of(fs, ino);
  int r = i ? rw_ensure_upper(fs, i) : -ESTALE;
  if (r == 0) {
    char path[PBUF];
    fd_path(path, sizeof(path), i->fd, NULL);
    if (setxattr(path, name, value, size, flags) < 0) r = -errno;
  }
  UNLOCK(fs);
  fuse_reply_err(req, -r);
}

void rw_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name) {
  struct cairnfs *fs = fs_of(req);
  if (xattr_ours(name)) {
    fuse_reply_err(req, ENODATA);
    return;
  }
  LOCK(fs);
  struct rw_inode *i = rw_inode_of(fs, ino);
  int r = i ? rw_ensure_upper(fs, i) : -ESTALE;
  if (r == 0) {
    char path[PBUF];
    fd_path(path, sizeof(path), i->fd, NULL);
    if (removexattr(path, name) < 0) r = -errno;
  }
  UNLOCK(fs);
  fuse_reply_err(req, -r);
}
