/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index.c — an image's merged tree as a file: STORE/index/ID, in the format
 * libcairn_tree.h describes, written once and mapped by every mount of the image.
 *
 * Invariants and why they hold:
 * - A reader never follows an offset out of the file. A full check
 *   (cn_tree_wrap; cairn_tree_build, export, fsck) reads the whole image
 *   before anything reads it: magic, version, the sizes adding up to the
 *   file's, the checksum, then every node (check_node: every offset and
 *   index it holds, its xattrs' and directory entries', every name's
 *   terminator, its entries' order) and that a walk from the root meets
 *   each directory once. A corrupt or hostile file is refused (-EBADMSG),
 *   never followed. A lazy check (cairn_tree_open: a mount, which must not
 *   read 100 MiB of index for a million entries) checks the header and
 *   the root at open, then each node the first time cairn_tree_node hands
 *   it out, which returns NULL for a node that fails: every reference a
 *   reader follows from a node it was handed was checked. (A lazy reader
 *   does not check the checksum: fsck does; a node fails alone, so a
 *   mount of a corrupt index answers what is sound and ESTALE for the
 *   rest.) The file is read-only and never rewritten in place (a new one
 *   replaces it by name), so what was checked stays what is read.
 * - An index under its name is whole: it is written to an anonymous
 *   O_TMPFILE, fsync'd, then linked under its name, and the directory is
 *   fsync'd. A crash leaves the old name or the new file, never a part.
 * - The index is derived data: losing it costs one rebuild from the
 *   stored layers (cairn_tree_build), never an image.
 */
#include "libcairn_tree.h"

#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <xxhash.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the index records are read in place: little-endian hosts only");
_Static_assert(sizeof(cairn_node) == 72 && sizeof(cairn_dirent) == 8 &&
                   sizeof(struct cn_index_xattr) == 12 && sizeof(struct cn_index_header) == 96,
               "the index layout is fixed");

/* The checksum covers every byte after its own field. */
#define SUMMED_FROM (offsetof(struct cn_index_header, checksum) + sizeof(uint64_t))

struct cairn_tree {
  void *base;
  size_t size;
  bool mapped;
  const cairn_node *nodes; /* nodes[ino - 1] */
  const cairn_dirent *dirents;
  const struct cn_index_xattr *xattrs;
  const char *strings;
  size_t n_nodes, n_dirents, n_xattrs, strings_size;
  /* Lazy trees: a bit per node, set once check_node passed (shared by
   * the serving threads: atomic). NULL when all was checked at open. */
  unsigned char *checked;
  /* A big lazy index's (index_big): a bit per chunk (WARM_SHIFT) of the file, set
   * once warm() asked for it to be read. NULL otherwise. */
  unsigned char *warmed;
  uint64_t blocks;
};

/* A mount reads an index a page here and there, each a disk read while it
 * is cold. A small one (the bench's Debian image's is 0.8 MiB) is cheaper
 * read in one go, started at open and done while the mount is set up. A
 * big one (a million entries: 113 MiB) is mapped MADV_RANDOM, and
 * check_node, which every node passes before it is handed out, asks for
 * the chunks that node's answers will read (warm): without it each cold
 * fault reads around itself as far as the disk's read-ahead goes, 8 MiB on
 * a virtio disk, and a mount's few faults read 60 MiB. */
#define INDEX_READ_WHOLE (4 << 20)
#define WARM_SHIFT 17 /* 128 KiB chunks: the kernel's default read-ahead */
/* A directory's children's nodes or names spread over more than this are
 * warmed one by one, as they are read, rather than all at once. */
#define WARM_SPAN (4 << 20)

static bool index_big(size_t size) { return size > INDEX_READ_WHOLE; }

/* Asks for the chunks of [p, p + len) that nobody asked for yet to be read
 * (MADV_WILLNEED starts the reads and does not wait for them), a run of
 * them in one request. */
static void warm(const cairn_tree *t, const void *p, size_t len) {
  if (!t->warmed || len == 0) return;
  size_t off = (size_t)((const char *)p - (const char *)t->base);
  if (off >= t->size) return;
  if (len > t->size - off) len = t->size - off;
  size_t last = (off + len - 1) >> WARM_SHIFT, run = SIZE_MAX;
  for (size_t c = off >> WARM_SHIFT; c <= last + 1; c++) {
    unsigned char bit = (unsigned char)(1u << c % 8);
    bool cold = c <= last && !(__atomic_fetch_or(&t->warmed[c / 8], bit, __ATOMIC_RELAXED) & bit);
    if (cold && run == SIZE_MAX) run = c;
    if (cold || run == SIZE_MAX) continue;
    size_t from = run << WARM_SHIFT, to = c << WARM_SHIFT;
    madvise((char *)t->base + from, (to < t->size ? to : t->size) - from, MADV_WILLNEED);
    run = SIZE_MAX;
  }
}

void cn_index_seal(void *buf) {
  struct cn_index_header *h = buf;
  h->checksum = XXH3_64bits((const char *)buf + SUMMED_FROM, h->file_size - SUMMED_FROM);
}

/* The range [off, off + n * size) lies within size_total, after the header. */
static bool range_ok(uint64_t off, uint64_t n, size_t size, uint64_t total, uint64_t after) {
  return off >= after && off <= total && n <= (total - off) / size;
}

static const char *check_header(const struct cn_index_header *h, size_t size, bool sum) {
  if (size < sizeof(*h)) return "shorter than its header";
  if (memcmp(h->magic, CN_INDEX_MAGIC, sizeof(h->magic)) != 0) return "not an index (bad magic)";
  if (h->version != CN_INDEX_VERSION || h->header_size != sizeof(*h))
    return "an index of another version";
  if (h->file_size != size) return "its size is not the one its header gives (truncated?)";
  if (sum && h->checksum != XXH3_64bits((const char *)h + SUMMED_FROM, size - SUMMED_FROM))
    return "checksum mismatch";
  if (h->n_nodes == 0 || (h->nodes_off | h->dirents_off) % 8 || h->xattrs_off % 4 ||
      !range_ok(h->nodes_off, h->n_nodes, sizeof(cairn_node), size, sizeof(*h)) ||
      !range_ok(h->dirents_off, h->n_dirents, sizeof(cairn_dirent), size, sizeof(*h)) ||
      !range_ok(h->xattrs_off, h->n_xattrs, sizeof(struct cn_index_xattr), size, sizeof(*h)) ||
      !range_ok(h->strings_off, h->strings_size, 1, size, sizeof(*h)) || h->strings_size == 0)
    return "a table lies outside the file";
  const char *strings = (const char *)h + h->strings_off;
  if (strings[0] != '\0' || strings[h->strings_size - 1] != '\0')
    return "the string pool is not terminated";
  return NULL;
}

static bool str_ok(const cairn_tree *t, uint32_t off) { return off < t->strings_size; }

/* A directory's entries, then their names and nodes (a lookup reads the
 * names, readdirplus the nodes), each in one request when they lie close
 * together, as the builder writes them. Entries not yet checked are only
 * compared, never followed. */
static void warm_children(const cairn_tree *t, const cairn_dirent *c, size_t n) {
  if (!t->warmed || n == 0) return;
  warm(t, c, n * sizeof(*c));
  uint32_t name_lo = UINT32_MAX, name_hi = 0, ino_lo = UINT32_MAX, ino_hi = 0;
  for (size_t k = 0; k < n; k++) {
    if (c[k].name < name_lo) name_lo = c[k].name;
    if (c[k].name > name_hi) name_hi = c[k].name;
    if (c[k].ino < ino_lo) ino_lo = c[k].ino;
    if (c[k].ino > ino_hi) ino_hi = c[k].ino;
  }
  if (name_hi < t->strings_size && name_hi - name_lo <= WARM_SPAN)
    warm(t, t->strings + name_lo, name_hi - name_lo + 1);
  if (ino_lo > 0 && ino_hi <= t->n_nodes &&
      (uint64_t)(ino_hi - ino_lo) * sizeof(cairn_node) <= WARM_SPAN)
    warm(t, &t->nodes[ino_lo - 1], (size_t)(ino_hi - ino_lo + 1) * sizeof(cairn_node));
}

/* Node i (0-based): every reference it holds, and those of its xattrs
 * and directory entries, lie in the file; its entries are sorted and each
 * directory among them names it as its parent (the root is no entry). */
static const char *check_node(const cairn_tree *t, size_t i) {
  const cairn_node *n = &t->nodes[i];
  warm(t, n, sizeof(*n));
  if (!str_ok(t, n->target) || !str_ok(t, n->blob) || n->parent > t->n_nodes ||
      (S_ISDIR(n->mode) && n->parent == 0) || n->xattrs > t->n_xattrs ||
      n->n_xattrs > t->n_xattrs - n->xattrs || n->children > t->n_dirents ||
      n->n_children > t->n_dirents - n->children)
    return "a node points outside the file";
  /* What reading the node reads next: a file's blob name (open), a
   * symlink's target, its xattrs. */
  warm(t, t->strings + n->blob, 1);
  warm(t, t->strings + n->target, 1);
  warm(t, &t->xattrs[n->xattrs], n->n_xattrs * sizeof(struct cn_index_xattr));
  for (size_t k = 0; k < n->n_xattrs; k++) {
    const struct cn_index_xattr *x = &t->xattrs[n->xattrs + k];
    if (!str_ok(t, x->name) || x->value > t->strings_size || x->len > t->strings_size - x->value)
      return "an xattr points outside the file";
    warm(t, t->strings + x->name, 1);
    warm(t, t->strings + x->value, x->len);
  }
  const cairn_dirent *c = t->dirents + n->children;
  warm_children(t, c, n->n_children);
  for (size_t k = 0; k < n->n_children; k++) {
    if (!str_ok(t, c[k].name) || c[k].ino == 0 || c[k].ino > t->n_nodes)
      return "a directory entry points outside the file";
    warm(t, t->strings + c[k].name, 1);
    warm(t, &t->nodes[c[k].ino - 1], sizeof(cairn_node));
    if (t->strings[c[k].name] == '\0') return "a directory entry has no name";
    if (k > 0 && strcmp(t->strings + c[k - 1].name, t->strings + c[k].name) >= 0)
      return "a directory's entries are not sorted";
    uint32_t ino = c[k].ino;
    if (S_ISDIR(t->nodes[ino - 1].mode) && (ino == 1 || t->nodes[ino - 1].parent != i + 1))
      return "a directory is not a child of its parent";
  }
  return NULL;
}

/* Every node, once: then readers need no checks. A directory has one
 * name, in its parent, and the root none: then a walk from the root
 * visits each directory once. seen has a bit per node, zeroed. */
static const char *check_records(const cairn_tree *t, unsigned char *seen) {
  for (size_t i = 0; i < t->n_nodes; i++) {
    const char *why = check_node(t, i);
    if (why) return why;
    const cairn_dirent *c = t->dirents + t->nodes[i].children;
    for (size_t k = 0; k < t->nodes[i].n_children; k++) {
      uint32_t ino = c[k].ino;
      if (!S_ISDIR(t->nodes[ino - 1].mode)) continue;
      if (seen[ino / 8] & (1u << ino % 8)) return "a directory is not a child of its parent";
      seen[ino / 8] |= (unsigned char)(1u << ino % 8);
    }
  }
  return NULL;
}

static void release(void *buf, size_t size, bool mapped) {
  if (mapped)
    munmap(buf, size);
  else
    free(buf);
}

int cn_tree_wrap(cairn_store *st, void *buf, size_t size, bool mapped, bool lazy,
                 cairn_tree **out) {
  *out = NULL;
  const struct cn_index_header *h = buf;
  const char *why = check_header(h, size, !lazy);
  cairn_tree *t = why ? NULL : calloc(1, sizeof(*t));
  /* A bit per node: zeroed pages cost no memory until a bit is set. */
  unsigned char *bits = why ? NULL : calloc(h->n_nodes / 8 + 1, 1);
  bool big = !why && lazy && mapped && index_big(size);
  unsigned char *warmed = big ? calloc((size >> WARM_SHIFT) / 8 + 1, 1) : NULL;
  if (!why && (!t || !bits || (big && !warmed))) {
    free(t);
    free(bits);
    free(warmed);
    release(buf, size, mapped);
    return cairn_fail(st, -ENOMEM, "out of memory opening the merged tree");
  }
  if (t) {
    const char *b = buf;
    *t = (cairn_tree){.base = buf,
                      .size = size,
                      .mapped = mapped,
                      .nodes = (const cairn_node *)(b + h->nodes_off),
                      .dirents = (const cairn_dirent *)(b + h->dirents_off),
                      .xattrs = (const struct cn_index_xattr *)(b + h->xattrs_off),
                      .strings = b + h->strings_off,
                      .n_nodes = h->n_nodes,
                      .n_dirents = h->n_dirents,
                      .n_xattrs = h->n_xattrs,
                      .strings_size = h->strings_size,
                      .blocks = h->blocks};
    if (lazy) {
      t->checked = bits;
      t->warmed = warmed;
      why = cairn_tree_node(t, 1) ? NULL : "the root points outside the file";
    } else {
      why = check_records(t, bits);
      free(bits);
    }
    if (!why && !S_ISDIR(t->nodes[0].mode)) why = "the root is not a directory";
  }
  if (why) {
    if (t) free(t->checked);
    free(warmed);
    free(t);
    release(buf, size, mapped);
    return cairn_fail(st, -EBADMSG, "merged tree index: %s", why);
  }
  *out = t;
  return 0;
}

static void index_path(const char *image_id, char *rel, size_t len) {
  snprintf(rel, len, "index/%s", image_id);
}

int cn_index_map(cairn_store *st, const char *image_id, bool lazy, cairn_tree **out) {
  *out = NULL;
  char rel[128];
  index_path(image_id, rel, sizeof(rel));
  cairn_autoclose int fd = cn_store_openat(st, rel, O_RDONLY, 0);
  if (fd < 0) {
    if (errno == ENOENT) return -ENOENT;
    return cairn_fail(st, -errno, "%s/%s: %s", st->dir, rel, strerror(errno));
  }
  struct stat sb;
  if (fstat(fd, &sb) < 0) return cairn_fail(st, -errno, "%s/%s: %s", st->dir, rel, strerror(errno));
  if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size < sizeof(struct cn_index_header))
    return cairn_fail(st, -EBADMSG, "%s/%s: merged tree index: shorter than its header", st->dir,
                      rel);
  /* Read whole if small, warmed chunk by chunk if big (INDEX_READ_WHOLE). */
  if (lazy && !index_big((size_t)sb.st_size)) posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
  void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return cairn_fail(st, -errno, "%s/%s: %s", st->dir, rel, strerror(errno));
  if (lazy && index_big((size_t)sb.st_size)) madvise(p, (size_t)sb.st_size, MADV_RANDOM);
  int r = cn_tree_wrap(st, p, (size_t)sb.st_size, true, lazy, out);
  if (r == -EBADMSG) {
    char why[sizeof(st->err)];
    snprintf(why, sizeof(why), "%s", st->err);
    cairn_fail(st, r, "%s/%s: %s", st->dir, rel, why);
  }
  return r;
}

bool cairn_tree_prefetch(cairn_store *st, const char *image_id) {
  char rel[128];
  index_path(image_id, rel, sizeof(rel));
  cairn_autoclose int fd = cn_store_openat(st, rel, O_RDONLY, 0);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) return false;
  /* What cn_index_map reads first: all of a small one, else the chunk
   * that holds the header and the first nodes. */
  bool whole = !index_big((size_t)sb.st_size);
  posix_fadvise(fd, 0, whole ? 0 : (off_t)1 << WARM_SHIFT, POSIX_FADV_WILLNEED);
  return true;
}

int cn_index_write(cairn_store *st, const char *image_id, const cairn_tree *t) {
  char rel[128];
  index_path(image_id, rel, sizeof(rel));
  if (mkdirat(st->dirfd, "index", 0700) < 0 && errno != EEXIST)
    return cairn_fail(st, -errno, "%s/index: %s", st->dir, strerror(errno));
  cairn_autoclose int dfd = cn_store_openat(st, "index", O_RDONLY | O_DIRECTORY, 0);
  cairn_autoclose int fd = dfd < 0 ? -1 : openat(dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0444);
  int r = fd < 0 ? -errno : cn_write_all(fd, t->base, t->size);
  if (r == 0 && fsync(fd) < 0) r = -errno;
  char proc[64];
  snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
  for (int attempt = 0; r == 0 && attempt < 2; attempt++) {
    if (linkat(AT_FDCWD, proc, st->dirfd, rel, AT_SYMLINK_FOLLOW) == 0) break;
    if (errno != EEXIST) {
      r = -errno;
      break;
    }
    /* Another writer's index is as good as this one; a corrupt one goes. */
    cairn_tree *there;
    if (cn_index_map(st, image_id, false, &there) == 0) {
      cairn_tree_free(there);
      break;
    }
    store_errclear(st);
    if (unlinkat(st->dirfd, rel, 0) < 0 && errno != ENOENT) r = -errno;
  }
  if (r == 0 && fsync(dfd) < 0) r = -errno;
  if (r == -ENOSPC) return cn_store_fail_nospace(st);
  return r < 0 ? cairn_fail(st, r, "%s/%s: %s", st->dir, rel, strerror(-r)) : 0;
}

void cn_index_remove(cairn_store *st, const char *image_id) {
  char rel[128];
  index_path(image_id, rel, sizeof(rel));
  unlinkat(st->dirfd, rel, 0);
}

void cairn_tree_free(cairn_tree *t) {
  if (!t) return;
  release(t->base, t->size, t->mapped);
  free(t->checked);
  free(t->warmed);
  free(t);
}

size_t cairn_tree_count(const cairn_tree *t) { return t->n_nodes; }

const cairn_node *cairn_tree_node(const cairn_tree *t, uint64_t ino) {
  if (ino < 1 || ino > t->n_nodes) return NULL;
  size_t i = ino - 1;
  unsigned char bit = (unsigned char)(1u << i % 8);
  if (t->checked && !(__atomic_load_n(&t->checked[i / 8], __ATOMIC_ACQUIRE) & bit)) {
    if (check_node(t, i)) return NULL;
    __atomic_fetch_or(&t->checked[i / 8], bit, __ATOMIC_RELEASE);
  }
  return &t->nodes[i];
}

uint64_t cairn_tree_blocks(const cairn_tree *t) { return t->blocks; }

const char *cairn_tree_str(const cairn_tree *t, uint32_t off) {
  return off ? t->strings + off : NULL;
}

const cairn_dirent *cairn_tree_children(const cairn_tree *t, const cairn_node *dir) {
  return t->dirents + dir->children;
}

cairn_xattr cairn_tree_xattr(const cairn_tree *t, const cairn_node *n, size_t i) {
  const struct cn_index_xattr *x = &t->xattrs[n->xattrs + i];
  return (cairn_xattr){.name = t->strings + x->name, .value = t->strings + x->value, .len = x->len};
}

const cairn_dirent *cairn_tree_lookup(const cairn_tree *t, const cairn_node *dir,
                                      const char *name) {
  const cairn_dirent *c = cairn_tree_children(t, dir);
  size_t lo = 0, hi = dir->n_children;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int cmp = strcmp(name, t->strings + c[mid].name);
    if (cmp == 0) return &c[mid];
    if (cmp < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}
