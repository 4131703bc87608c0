/* The fp4bench command-line tool: exit statuses, the argument cursor the
 * subcommands parse with, and the messages that end a command (usage and
 * runtime errors) or follow it (warnings). The only layer that prints on its
 * own account or exits.
 * Exit codes: 0 success; 1 a check failed (verification mismatch, FAILED
 * row, regression); 2 usage error (a bad option or value, --shape included);
 * 3 runtime error (bad file, backend or CUDA failure outside a measured row). */
#ifndef FP4_CLI_ARGS_H
#define FP4_CLI_ARGS_H

#include <stddef.h>

#include "fp4/status.h"

#define EXIT_CHECK 1
#define EXIT_USAGE 2
#define EXIT_RUNTIME 3
#define EXIT_INTERRUPTED 130 /* 128 + SIGINT, as a shell reports it */

/* Value options a command line can name once each: a name is kept only the
 * first time (a second use is an error), so this bounds the distinct value
 * options of one command (about 30 at most today), not the arguments. */
#define CLI_MAX_SEEN 64

/* Argument cursor: handles "--flag value" and "--flag=value". */
typedef struct cli_args {
    int argc;
    char **argv;
    int i;
    const char *cmd;        /* for messages: "fp4bench run" */
    const char *repeatable; /* options that add to a list when repeated,
                               space-separated ("--shape --plugin"); NULL: none */
    const char *seen[CLI_MAX_SEEN]; /* the value options met so far */
    int nseen;
} cli_args;

/* If argv[i] is flag `name` taking a value, store it in *val, advance and
 * return 1; a missing or empty value is a usage error (exits 2), and so is
 * an option given twice unless a->repeatable names it (a second value would
 * silently replace the first), and a next argument that starts with "--"
 * (an option, not the value: such a value is written "--flag=--value"). */
int cli_value(cli_args *a, const char *name, const char **val);
/* Usage error when the file an output option names (out_what out: "--json
 * x.json") is the file in_what in names (another output or an input): it
 * would be overwritten: the same path, the same file (device and inode), or
 * for a file not made yet the same name in the same resolved folder. NULL
 * or "-" (stdout/stdin) never clash. */
void cli_distinct_files(const cli_args *a, const char *out_what, const char *out, const char *in_what,
                        const char *in);
/* If argv[i] is the boolean flag `name`, advance and return 1. */
int cli_flag(cli_args *a, const char *name);
/* Usage error: "fp4bench run: <message>" and exit 2. */
void cli_usage_error(const cli_args *a, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3), noreturn))
#endif
    ;
/* Runtime error from an fp4_err: "fp4bench: <message>" and exit 3. */
void cli_die(const char *cmd, const fp4_err *err)
#if defined(__GNUC__)
    __attribute__((noreturn))
#endif
    ;
/* Parse numbers from flag values; usage error on junk. */
double cli_double(const cli_args *a, const char *flag, const char *s);
long long cli_int(const cli_args *a, const char *flag, const char *s);

/* Split the comma list s into at most max fields: copied into buf (len
 * bytes), fields[i] pointing into it. A usage error for an empty list, an
 * empty field (",4", "4,", "4,,5"), a list that does not fit buf or more than
 * max fields. Returns the field count (>= 1). */
int cli_split_list(const cli_args *a, const char *flag, const char *s, char *buf, size_t len,
                   char **fields, int max);

/* The library's warnings on stderr, one "fp4bench: warning: ..." line each
 * (and a count of those it could not keep). Nothing for NULL or none. */
void cli_print_warnings(const fp4_warnings *w);

#endif
