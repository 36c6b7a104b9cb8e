/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tar_header.c — a tar header block read by its named fields, the one
 * reader of them in libcairn (the exact-layer recorder, tarsplit.c, and the
 * writer of lazily-pullable layers, store/remote/chunked_write.c), as
 * erofs-utils' lib/tar.c reads them.
 *
 * The rules, one for every caller:
 *  - a number is octal, with spaces and NULs around it and nothing else
 *    (trailing garbage is malformed, as GNU tar and Go's archive/tar say),
 *    or base-256 (its first byte's high bit; a negative one is malformed);
 *  - the checksum is the sum of the block's bytes with the checksum field
 *    as spaces, taken unsigned or signed (old writers summed signed
 *    chars), as GNU tar and libarchive accept.
 */
#include "libcairn_core.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(cn_tar_header) == CN_TAR_BLOCK, "a tar header is one block");
_Static_assert(offsetof(cn_tar_header, size) == 124, "ustar: size");
_Static_assert(offsetof(cn_tar_header, chksum) == 148, "ustar: chksum");
_Static_assert(offsetof(cn_tar_header, typeflag) == 156, "ustar: typeflag");
_Static_assert(offsetof(cn_tar_header, magic) == 257, "ustar: magic");
_Static_assert(offsetof(cn_tar_header, prefix) == 345, "ustar: prefix");
_Static_assert(offsetof(cn_tar_header, gnu.isextended) == 482, "gnu: isextended");

int cn_tar_number(const char *field, size_t len, uint64_t *v) {
  const unsigned char *f = (const unsigned char *)field;
  *v = 0;
  if (f[0] & 0x80) { /* base-256 */
    if (f[0] & 0x40) return -1; /* negative */
    uint64_t x = f[0] & 0x3f;
    for (size_t i = 1; i < len; i++) {
      if (x > (UINT64_MAX >> 8)) return -1;
      x = x << 8 | f[i];
    }
    *v = x;
    return 0;
  }
  size_t i = 0;
  while (i < len && (f[i] == ' ' || f[i] == '\0')) i++;
  for (; i < len && f[i] >= '0' && f[i] <= '7'; i++) {
    if (*v > (UINT64_MAX >> 3)) return -1;
    *v = *v << 3 | (uint64_t)(f[i] - '0');
  }
  for (; i < len; i++)
    if (f[i] != ' ' && f[i] != '\0') return -1;
  return 0;
}

bool cn_tar_block_zero(const void *block) {
  const unsigned char *b = block;
  for (size_t i = 0; i < CN_TAR_BLOCK; i++)
    if (b[i]) return false;
  return true;
}

cn_tar_sums cn_tar_checksum(const cn_tar_header *h) {
  const unsigned char *b = (const unsigned char *)h;
  size_t at = offsetof(cn_tar_header, chksum);
  cn_tar_sums s = {0, 0};
  for (size_t i = 0; i < CN_TAR_BLOCK; i++) {
    unsigned char c = i >= at && i < at + sizeof(h->chksum) ? ' ' : b[i];
    s.sum += c;
    s.signed_sum += (signed char)c;
  }
  return s;
}

bool cn_tar_checksum_ok(const cn_tar_header *h) {
  uint64_t want;
  if (CN_TAR_NUMBER(h, chksum, &want) < 0) return false;
  cn_tar_sums s = cn_tar_checksum(h);
  return want == s.sum || (int64_t)want == s.signed_sum;
}

bool cn_tar_is_meta(char typeflag) {
  return typeflag == 'x' || typeflag == 'g' || typeflag == 'L' || typeflag == 'K';
}

bool cn_tar_is_regular(char typeflag) {
  return typeflag == '0' || typeflag == '\0' || typeflag == '7';
}

bool cn_tar_posix_ustar(const cn_tar_header *h) { return memcmp(h->magic, "ustar\0", 6) == 0; }

char *cn_tar_name(const cn_tar_header *h) {
  char *s = NULL;
  /* POSIX ustar's prefix (GNU's "ustar  " has none there) */
  if (cn_tar_posix_ustar(h) && h->prefix[0]) {
    if (asprintf(&s, "%.155s/%.100s", h->prefix, h->name) < 0) s = NULL;
  } else {
    s = strndup(h->name, sizeof(h->name));
  }
  return s;
}

uint64_t cn_tar_padding(uint64_t size) {
  return (CN_TAR_BLOCK - size % CN_TAR_BLOCK) % CN_TAR_BLOCK;
}
