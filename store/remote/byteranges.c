/* SPDX-License-Identifier: Apache-2.0 */
/*
 * byteranges.c — the answer to a range request, single or
 * multipart/byteranges (libcairn_byteranges.h). A part's data is taken by the length
 * its Content-Range gives, never by searching for the boundary (file data
 * may hold any bytes); after it the delimiter must follow.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "libcairn_byteranges.h"

/* A decimal number of at most 19 digits at s[*i], advancing *i. */
static bool number(const char *s, size_t n, size_t *i, uint64_t *out) {
  uint64_t v = 0;
  size_t start = *i;
  while (*i < n && s[*i] >= '0' && s[*i] <= '9') {
    if (*i - start >= 19) return false;
    v = v * 10 + (uint64_t)(s[*i] - '0');
    (*i)++;
  }
  *out = v;
  return *i > start;
}

int cn_content_range_parse(const char *s, size_t n, uint64_t blob_size, uint64_t *off,
                           uint64_t *len) {
  size_t i = 0;
  while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
  if (n - i < 6 || strncasecmp(s + i, "bytes ", 6) != 0) return -EBADMSG;
  i += 6;
  while (i < n && s[i] == ' ') i++;
  uint64_t a, b, total;
  if (!number(s, n, &i, &a) || i >= n || s[i++] != '-' || !number(s, n, &i, &b) || i >= n ||
      s[i++] != '/')
    return -EBADMSG;
  if (i < n && s[i] == '*')
    i++;
  else if (!number(s, n, &i, &total) || total != blob_size)
    return -EBADMSG;
  while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
  if (i != n || a > b || b >= blob_size) return -EBADMSG;
  *off = a;
  *len = b - a + 1;
  return 0;
}

/* The boundary parameter of a multipart/byteranges Content-Type into out
 * (RFC 2046: 1 to 70 characters), unquoted. */
static bool boundary_of(const char *ct, char out[71]) {
  static const char mt[] = "multipart/byteranges";
  while (*ct == ' ') ct++;
  if (strncasecmp(ct, mt, sizeof mt - 1) != 0) return false;
  for (const char *p = ct + sizeof mt - 1; (p = strchr(p, ';'));) {
    p++;
    while (*p == ' ' || *p == '\t') p++;
    if (strncasecmp(p, "boundary=", 9) != 0) continue;
    p += 9;
    bool quoted = *p == '"';
    p += quoted;
    size_t n = 0;
    while (p[n] && n <= 70 && (quoted ? p[n] != '"' : (p[n] != ';' && p[n] != ' ' && p[n] != '\t')))
      n++;
    if (n == 0 || n > 70 || (quoted && p[n] != '"')) return false;
    memcpy(out, p, n);
    out[n] = '\0';
    return true;
  }
  return false;
}

static const unsigned char *find(const unsigned char *h, size_t hn, const char *needle, size_t nn) {
  return nn <= hn ? memmem(h, hn, needle, nn) : NULL;
}

int cn_byteranges_parse(const char *content_type, const char *content_range, const void *body,
                        size_t len, uint64_t blob_size, size_t max_parts, cn_byterange_fn fn,
                        void *arg, cairn_store *st) {
  const unsigned char *b = body;
  uint64_t off, n;
  char bd[71];
  if (!content_type || !boundary_of(content_type, bd)) {
    if (!content_range || !*content_range)
      return cairn_fail(st, -EBADMSG, "range reply has neither Content-Range nor a multipart body");
    if (cn_content_range_parse(content_range, strlen(content_range), blob_size, &off, &n) < 0)
      return cairn_fail(st, -EBADMSG, "range reply: bad Content-Range \"%.80s\"", content_range);
    if (n != len)
      return cairn_fail(st, -EBADMSG, "range reply: %zu bytes for a range of %llu", len,
                        (unsigned long long)n);
    if (max_parts < 1) return cairn_fail(st, -EBADMSG, "range reply: more parts than asked for");
    int r = fn(off, b, len, arg);
    return r < 0 ? r : 1;
  }
  /* "--" boundary, then CRLF and a part, or "--" and the end */
  char delim[75];
  size_t dn = (size_t)snprintf(delim, sizeof delim, "--%s", bd);
  size_t i = 0, parts = 0;
  const unsigned char *p = find(b, len, delim, dn); /* a preamble may precede */
  if (!p) return cairn_fail(st, -EBADMSG, "range reply: no multipart boundary in the body");
  i = (size_t)(p - b) + dn;
  for (;;) {
    if (len - i >= 2 && b[i] == '-' && b[i + 1] == '-') return (int)parts; /* epilogue ignored */
    while (i < len && (b[i] == ' ' || b[i] == '\t')) i++;
    if (len - i >= 2 && b[i] == '\r' && b[i + 1] == '\n')
      i += 2;
    else if (i < len && b[i] == '\n')
      i++;
    else
      return cairn_fail(st, -EBADMSG, "range reply: malformed delimiter of part %zu", parts + 1);
    /* the part's headers, up to an empty line */
    bool have = false;
    for (;;) {
      const unsigned char *eol = i < len ? memchr(b + i, '\n', len - i) : NULL;
      if (!eol) return cairn_fail(st, -EBADMSG, "range reply: part %zu is cut short", parts + 1);
      size_t ln = (size_t)(eol - (b + i)), next = (size_t)(eol - b) + 1;
      if (ln > 0 && b[i + ln - 1] == '\r') ln--;
      if (ln == 0) {
        i = next;
        break;
      }
      if (ln > 14 && strncasecmp((const char *)b + i, "Content-Range:", 14) == 0) {
        if (have ||
            cn_content_range_parse((const char *)b + i + 14, ln - 14, blob_size, &off, &n) < 0)
          return cairn_fail(st, -EBADMSG, "range reply: bad Content-Range in part %zu", parts + 1);
        have = true;
      }
      i = next;
    }
    if (!have)
      return cairn_fail(st, -EBADMSG, "range reply: part %zu has no Content-Range", parts + 1);
    if (n > len - i)
      return cairn_fail(st, -EBADMSG, "range reply: part %zu is cut short", parts + 1);
    if (++parts > max_parts)
      return cairn_fail(st, -EBADMSG, "range reply: more parts than asked for");
    int r = fn(off, b + i, (size_t)n, arg);
    if (r < 0) return r;
    i += (size_t)n;
    if (len - i >= 2 && b[i] == '\r' && b[i + 1] == '\n')
      i += 2;
    else if (i < len && b[i] == '\n')
      i++;
    else
      return cairn_fail(st, -EBADMSG, "range reply: no delimiter after part %zu", parts);
    if (len - i < dn || memcmp(b + i, delim, dn) != 0)
      return cairn_fail(st, -EBADMSG, "range reply: no delimiter after part %zu", parts);
    i += dn;
  }
}
