/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd-login.c — `cairn login HOST` and `cairn logout HOST`, as podman's:
 * the credentials are checked against the registry, then kept in the
 * auth.json podman uses (cairn_login, store/remote/login.c), where pulls
 * (and podman, skopeo) find them. The password comes from the standard
 * input with --password-stdin, else from a prompt on the terminal (echo
 * off, cli_prompt); never from the command line, where ps would show it.
 */
#include "commands.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int login_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"username", required_argument, NULL, 'u'}, {"password-stdin", no_argument, NULL, 'P'},
      {"authfile", required_argument, NULL, 'a'}, {"insecure", no_argument, NULL, 'k'},
      {"cert-dir", required_argument, NULL, 'c'}, {NULL, 0, NULL, 0},
  };
  const char *user_opt = NULL;
  cairn_login_opts lo = {0};
  bool from_stdin = false;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":u:", opts, NULL)) != -1) {
    switch (o) {
    case 'u': user_opt = optarg; break;
    case 'P': from_stdin = true; break;
    case 'a': lo.authfile = optarg; break;
    case 'k': lo.insecure = true; break;
    case 'c': lo.cert_dir = optarg; break;
    default: return cli_bad_option(cmd_login.usage, argv, o, opts);
    }
  }
  if (argc - optind != 1) return report_usage(cmd_login.usage, "login: needs one registry");
  const char *host = argv[optind];
  if (from_stdin && !user_opt)
    return report_usage(cmd_login.usage, "login: --password-stdin needs --username");
  cairn_autofree char *user = NULL, *password = NULL;
  if (user_opt && !(user = strdup(user_opt)))
    return report_fail(-ENOMEM, "login: %s", strerror(ENOMEM));
  if (!user && !cli_prompt("Username", false, &user))
    return report_usage(cmd_login.usage, "login: no terminal to ask for the user name on");
  if (from_stdin ? !cli_read_line(stdin, &password) : !cli_prompt("Password", true, &password))
    return report_usage(cmd_login.usage, from_stdin ? "login: --password-stdin: nothing on stdin"
                                                    : "login: no terminal to ask for the "
                                                      "password on (use --password-stdin)");
  cairn_store *st;
  int code = cli_config(c, &lo.config);
  if (code == CAIRN_EXIT_OK) code = cli_store_open(c, CAIRN_STORE_CREATE | CLI_STORE_QUIET, &st);
  if (code != CAIRN_EXIT_OK) return code;
  int r = cairn_login(st, host, user, password, &lo);
  if (r < 0) return report_fail(r, "login: %s", report_why(st, r));
  printf("Login Succeeded!\n");
  return CAIRN_EXIT_OK;
}

static int logout_run(struct cli *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"authfile", required_argument, NULL, 'a'},
      {"all", no_argument, NULL, 'A'},
      {NULL, 0, NULL, 0},
  };
  const char *authfile = NULL;
  bool all = false;
  int o;
  optind = 1;
  while ((o = getopt_long(argc, argv, ":a", opts, NULL)) != -1) {
    if (o == 'a')
      authfile = optarg;
    else if (o == 'A')
      all = true;
    else
      return cli_bad_option(cmd_logout.usage, argv, o, opts);
  }
  if (argc - optind != (all ? 0 : 1))
    return report_usage(cmd_logout.usage, all ? "logout: --all takes no registry"
                                              : "logout: needs one registry (or --all)");
  const char *host = all ? NULL : argv[optind];
  cairn_store *st;
  int code = cli_store(c, &st);
  if (code != CAIRN_EXIT_OK) return code;
  int r = cairn_logout(st, host, authfile);
  if (r < 0) return report_fail(r, "logout: %s", report_why(st, r));
  printf("Removed login credentials for %s\n", all ? "all registries" : host);
  return CAIRN_EXIT_OK;
}

const struct cli_command cmd_login = {
    .name = "login",
    .run = login_run,
    .usage = "cairn login [-u USER [--password-stdin]] [--authfile FILE] [--insecure]\n"
             "       [--cert-dir DIR] HOST[:PORT]",
    .summary = "Log in to a registry: check the credentials, keep them in podman's auth.json.\n"
               "The registry's /v2/ must accept them; they are written to\n"
               "$REGISTRY_AUTH_FILE, else $XDG_RUNTIME_DIR/containers/auth.json, else\n"
               "/run/containers/UID/auth.json.\n"
               "Pulls read them from there (then ~/.config/containers/auth.json and\n"
               "~/.docker/config.json). Asks for what is not given on the terminal.",
    .options = "-u, --username USER\tthe user name (default: asked)\n"
               "--password-stdin\tread the password from the first line of stdin\n"
               "--authfile FILE\tthe auth.json to write (default: as above)\n"
               "--insecure\tno TLS checks; plain HTTP if the registry speaks no TLS\n"
               "--cert-dir DIR\tCA certificates (*.crt) to trust besides the system's\n",
};

const struct cli_command cmd_logout = {
    .name = "logout",
    .run = logout_run,
    .usage = "cairn logout [--authfile FILE] HOST[:PORT] | --all",
    .summary = "Remove a registry's credentials from the auth.json (exit 3 if it has none).\n"
               "The file is the one cairn login writes; --all removes every registry's.",
    .options = "--authfile FILE\tthe auth.json to edit (default: as cairn login)\n"
               "--all\tevery registry\n",
};
