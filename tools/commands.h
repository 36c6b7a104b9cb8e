/*
 * commands.h — the commands of `cairn`, one file each (tools/cmd-*.c):
 * each defines its struct cli_command (name, function, help).
 */
#ifndef CAIRN_COMMANDS_H
#define CAIRN_COMMANDS_H

#include "cli.h"

extern const struct cli_command cmd_import;
extern const struct cli_command cmd_images;
extern const struct cli_command cmd_layers;
extern const struct cli_command cmd_inspect;
extern const struct cli_command cmd_rm;
extern const struct cli_command cmd_gc;
extern const struct cli_command cmd_fsck;
extern const struct cli_command cmd_commit;
extern const struct cli_command cmd_export;
extern const struct cli_command cmd_pull;
extern const struct cli_command cmd_mount;
extern const struct cli_command cmd_umount;
extern const struct cli_command cmd_mounts;
extern const struct cli_command cmd_df;
extern const struct cli_command cmd_info;

#endif
