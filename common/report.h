/* SPDX-License-Identifier: Apache-2.0 */
/*
 * report.h — the one way cairn, cairn-pin and cairnfs report a failure:
 * one line "PROG: WHAT: WHY" on stderr, and the contract's exit code for
 * the error (cairn_exit_code). WHY is libcairn's message for a failure of
 * libcairn (cairn_errmsg, through report_why), strerror for a system
 * call's, or the front end's own words.
 */
#ifndef CAIRN_REPORT_H
#define CAIRN_REPORT_H

#include "cairn.h"

#include <stdarg.h>

/* The program's name, the PROG of every line: each main sets it first
 * (defined in report.c, so that nothing here uses its callers' files). */
extern const char *report_prog;

/* Reports a failure of err (a negative errno): prints "PROG: " and the
 * message fmt formats ("WHAT: WHY") as one line on stderr, unless a sink
 * takes it. Returns cairn_exit_code(err). */
int report_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int report_vfail(int err, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* Reports a usage error: "PROG: MESSAGE", then "usage: USAGE"; returns
 * CAIRN_EXIT_USAGE. */
int report_usage(const char *usage, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The WHY of a failure err of libcairn on st: st's message, or
 * strerror(-err) when it has none (or st is NULL). */
const char *report_why(const cairn_store *st, int err);

/* Prints "PROG: MSG" as one line on stderr, for a line that is not a
 * failure of ours: one that cairnfs reported, which cairn passes on as its
 * own (the exit code is cairnfs's), or a notice of pull. */
void report_notice(const char *msg);

/* A sink takes each failure's exit code and message (without "PROG: ")
 * instead of stderr, and returns 0; or declines it (-1: it goes to stderr).
 * cairnfs's daemon hands its failure to the parent waiting for its verdict
 * this way. NULL: stderr only. */
typedef int (*report_sink_fn)(int code, const char *msg);
void report_sink_set(report_sink_fn sink);

#endif
