/* SPDX-License-Identifier: Apache-2.0 */
/*
 * report.c — failures as one line and an exit code: see report.h.
 *
 * common/ holds what the front ends share, cairn and cairn-pin (tools/) and
 * cairnfs (fs/): how they report a failure (here), their version
 * (version.c) and the programs beside their own binary (self.c). It is a
 * library of its own (cairn-common), below the front ends and above
 * libcairn, not part of libcairn: it writes to stderr under the program's
 * name and knows the exit codes of a command line, which libcairn (no
 * output, every global named cairn_ or cn_) leaves to its callers. Neither
 * front end includes or compiles the other's files.
 */
#include "report.h"
#include "cleanup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *report_prog = "cairn";

static report_sink_fn report_sink;

void report_sink_set(report_sink_fn sink) { report_sink = sink; }

int report_vfail(int err, const char *fmt, va_list ap) {
  int code = cairn_exit_code(err);
  cairn_autofree char *msg = NULL;
  if (vasprintf(&msg, fmt, ap) < 0) msg = NULL;
  const char *line = msg ? msg : "out of memory";
  if (!report_sink || report_sink(code, line) < 0) report_notice(line);
  return code;
}

int report_fail(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int code = report_vfail(err, fmt, ap);
  va_end(ap);
  return code;
}

int report_usage(const char *usage, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int code = report_vfail(-EINVAL, fmt, ap);
  va_end(ap);
  fprintf(stderr, "usage: %s\n", usage);
  return code;
}

const char *report_why(const cairn_store *st, int err) {
  const char *why = st ? cairn_errmsg(st) : NULL;
  return why && *why ? why : strerror(-err);
}

void report_notice(const char *msg) { fprintf(stderr, "%s: %s\n", report_prog, msg); }
