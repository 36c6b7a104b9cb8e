/*
 * commands.h — the subcommands of `cairn`, one file each (tools/cmd-*.c).
 * Each gets argv from the subcommand name on (argv[0] is the name) with
 * --store already taken out, and returns the process's exit code.
 */
#ifndef CAIRN_COMMANDS_H
#define CAIRN_COMMANDS_H

#include "cli.h"

typedef int (*cmd_fn)(struct cli *c, int argc, char **argv);

int cmd_import(struct cli *c, int argc, char **argv);
int cmd_images(struct cli *c, int argc, char **argv);
int cmd_layers(struct cli *c, int argc, char **argv);
int cmd_inspect(struct cli *c, int argc, char **argv);
int cmd_rm(struct cli *c, int argc, char **argv);
int cmd_gc(struct cli *c, int argc, char **argv);
int cmd_fsck(struct cli *c, int argc, char **argv);
int cmd_export(struct cli *c, int argc, char **argv);
int cmd_pull(struct cli *c, int argc, char **argv);
int cmd_mount(struct cli *c, int argc, char **argv);
int cmd_umount(struct cli *c, int argc, char **argv);
int cmd_mounts(struct cli *c, int argc, char **argv);

#endif
