/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cairn.h — the public face of libcairn, the cairn layer store: this file
 * includes every header of include/cairn/, one a subsystem.
 *
 * Everything about the store lives behind this header: opening it, layers
 * and their file trees, content-addressed blobs, images and names, pins,
 * mount records, rm / gc / fsck. Front ends (tools/, fs/) only call these.
 *
 * Conventions
 * - Functions return 0 (or a count) on success and a negative errno on
 *   failure. The meaning a front end maps to exit codes:
 *     -ENOENT   not found                       (exit 3)
 *     -EBUSY    pinned or busy                   (exit 4)
 *     -EBADMSG  integrity: digest mismatch, corrupt/truncated/unsafe input
 *                                                (exit 5)
 *     -EINVAL   bad argument (bad reference, ambiguous prefix)  (exit 2)
 *     anything else                              (exit 1)
 *   A sentence for a person about the last failure (the WHY) is kept per
 *   store handle: cairn_errmsg(). It never ends in a newline. Every call
 *   that takes a handle and can fail starts by clearing it and sets it on
 *   every failure; cleanup calls (void) leave it as it is. A callback's
 *   non-zero return is passed back as it is, with whatever WHY the
 *   callback recorded (cairn_fail).
 * - Each function's comment ends with a line of its own that says what it
 *   returns: "Returns 0; -ENOENT: no such image; -EINVAL: a bad name." names
 *   the value on success and each error a caller can tell apart (the table
 *   above gives their exit codes; any call may also fail with -ENOMEM or an
 *   -errno of the system's); a pointer, bool or count says what it is and
 *   when it is NULL, false or 0. A void function has no such line.
 * - Ids are lowercase sha256 hex strings (64 chars, no "sha256:" prefix):
 *   a layer is named by its OCI diff_id, an image by the sha256 of its
 *   config.
 * - A store handle is not thread-safe (cairn_blob_open excepted); use one
 *   handle per thread.
 *   Several processes may use one store at once.
 * - A struct is a typedef of its tag's name (cairn_pin_rec is struct
 *   cairn_pin_rec), but for the three named as the function that fills
 *   them: struct cn_config_registry, struct cairn_df, struct
 *   cairn_store_info. An enum is named by its tag (enum cairn_pin_kind).
 */
#ifndef CAIRN_H
#define CAIRN_H

#include "cairn/store.h"
#include "cairn/image.h"
#include "cairn/pin.h"
#include "cairn/layer.h"
#include "cairn/lazy.h"
#include "cairn/import.h"
#include "cairn/list.h"
#include "cairn/gc.h"
#include "cairn/mount.h"
#include "cairn/pull.h"
#include "cairn/push.h"
#include "cairn/tree.h"
#include "cairn/bundle.h"
#include "cairn/login.h"
#include "cairn/upper.h"
#include "cairn/als.h"
#include "cairn/snapshot.h"

#endif
