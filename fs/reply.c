/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reply.c — the replies every kind of mount shares (the read-only tree's,
 * the writable mount's, the ALS's): a read answered from an fd, spliced,
 * and the xattrs of a tree node.
 */
#include "cairnfs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void cairnfs_reply_fd(fuse_req_t req, int fd, off_t off, size_t size) {
  struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
  buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
  buf.buf[0].fd = fd;
  buf.buf[0].pos = off;
  fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

void cairnfs_reply_getxattr(fuse_req_t req, const cairn_tree *t, const cairn_node *n,
                            const char *name, size_t size) {
  for (size_t i = 0; n && i < n->n_xattrs; i++) {
    cairn_xattr x = cairn_tree_xattr(t, n, i);
    if (strcmp(x.name, name) != 0) continue;
    if (size == 0)
      fuse_reply_xattr(req, x.len);
    else if (size < x.len)
      fuse_reply_err(req, ERANGE);
    else
      fuse_reply_buf(req, x.value, x.len);
    return;
  }
  fuse_reply_err(req, ENODATA);
}

void cairnfs_reply_listxattr(fuse_req_t req, const cairn_tree *t, const cairn_node *n,
                             size_t size) {
  size_t total = 0;
  for (size_t i = 0; n && i < n->n_xattrs; i++) total += strlen(cairn_tree_xattr(t, n, i).name) + 1;
  if (size == 0) {
    fuse_reply_xattr(req, total);
    return;
  }
  if (size < total) {
    fuse_reply_err(req, ERANGE);
    return;
  }
  char *buf = malloc(total ? total : 1);
  if (!buf) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  size_t used = 0;
  for (size_t i = 0; n && i < n->n_xattrs; i++) {
    const char *xname = cairn_tree_xattr(t, n, i).name;
    size_t len = strlen(xname) + 1;
    memcpy(buf + used, xname, len);
    used += len;
  }
  fuse_reply_buf(req, buf, total);
  free(buf);
}
