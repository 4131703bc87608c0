/* The command line's argument helpers and its error and warning messages
 * (see cli/args.h). */
/* realpath() is X/Open's, beside the POSIX 2008 the build asks for */
#define _XOPEN_SOURCE 700
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* 1 when the space-separated list names `name` */
static int list_names(const char *list, const char *name)
{
    const size_t len = strlen(name);
    for (const char *p = list; p && (p = strstr(p, name)) != NULL; p += len)
        if ((p == list || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0')) return 1;
    return 0;
}

static void note_seen(cli_args *a, const char *name)
{
    if (list_names(a->repeatable, name)) return;
    for (int k = 0; k < a->nseen; k++)
        if (strcmp(a->seen[k], name) == 0)
            cli_usage_error(a, "%s given twice: it takes one value (a list is one value, a,b,c)",
                            name);
    if (a->nseen < CLI_MAX_SEEN) a->seen[a->nseen++] = name;
}

int cli_value(cli_args *a, const char *name, const char **val)
{
    const char *arg = a->argv[a->i];
    size_t len = strlen(name);
    if (strncmp(arg, name, len) != 0) return 0;
    if (arg[len] != '=' && arg[len] != '\0') return 0;
    note_seen(a, name);
    if (arg[len] == '=') {
        *val = arg + len + 1;
        a->i++;
        if (!**val) cli_usage_error(a, "%s needs a value, not an empty one", name);
        return 1;
    }
    if (a->i + 1 >= a->argc) cli_usage_error(a, "%s needs a value", name);
    *val = a->argv[a->i + 1];
    a->i += 2;
    /* no option takes an empty value (an empty file name, list or number) */
    if (!**val) cli_usage_error(a, "%s needs a value, not an empty one", name);
    /* "--json --quiet" lost the value, it did not mean a file named --quiet */
    if ((*val)[0] == '-' && (*val)[1] == '-' && (*val)[2] != '\0')
        cli_usage_error(a, "%s needs a value, got the option %s (%s=%s names a value that starts with --)",
                        name, *val, name, *val);
    return 1;
}

int cli_flag(cli_args *a, const char *name)
{
    if (strcmp(a->argv[a->i], name) != 0) return 0;
    a->i++;
    return 1;
}

void cli_usage_error(const cli_args *a, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", a->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see %s --help)\n", a->cmd);
    exit(EXIT_USAGE);
}

void cli_die(const char *cmd, const fp4_err *err)
{
    fprintf(stderr, "%s: error: %s\n", cmd, fp4_err_text(err));
    exit(EXIT_RUNTIME);
}

double cli_double(const cli_args *a, const char *flag, const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v))
        cli_usage_error(a, "%s: '%s' is not a number", flag, s);
    /* ERANGE: an overflow (HUGE_VAL, caught above) or an underflow, whose
     * tiny or zero result is the number asked for, as near as a double gets */
    if (errno == ERANGE && fabs(v) >= 1.0) cli_usage_error(a, "%s: '%s' is out of range", flag, s);
    return v;
}

long long cli_int(const cli_args *a, const char *flag, const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno == ERANGE)
        cli_usage_error(a, "%s: '%s' is not an integer", flag, s);
    return v;
}

int cli_split_list(const cli_args *a, const char *flag, const char *s, char *buf, size_t len,
                   char **fields, int max)
{
    int n = 0;
    if (snprintf(buf, len, "%s", s) >= (int)len) cli_usage_error(a, "%s: list too long", flag);
    if (!buf[0]) cli_usage_error(a, "%s: no value given", flag);
    for (char *p = buf;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        if (!*p) cli_usage_error(a, "%s: '%s' has an empty field", flag, s);
        if (n == max) cli_usage_error(a, "%s: at most %d values in '%s'", flag, max, s);
        fields[n++] = p;
        if (!comma) break;
        p = comma + 1;
    }
    return n;
}

void cli_print_warnings(const fp4_warnings *w)
{
    const char *p;
    int dropped;
    if (!w || w->count == 0) return;
    for (p = w->text; *p;) {
        size_t len = strcspn(p, "\n");
        fprintf(stderr, "fp4bench: warning: %.*s\n", (int)len, p);
        p += len;
        if (*p == '\n') p++;
    }
    dropped = fp4_warnings_dropped(w);
    if (dropped > 0)
        fprintf(stderr, "fp4bench: warning: %d more warning%s not kept\n", dropped,
                dropped == 1 ? "" : "s");
}

/* path with its folder resolved (links, ".", ".."): the name a file not
 * made yet will have. Malloc'ed; NULL when the folder does not resolve. */
static char *resolved_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir;
    if (!slash) {
        dir = realpath(".", NULL);
    } else if (slash == path) {
        dir = realpath("/", NULL);
    } else {
        char *folder = strndup(path, (size_t)(slash - path));
        dir = folder ? realpath(folder, NULL) : NULL;
        free(folder);
    }
    if (!dir) return NULL;
    const char *base = slash ? slash + 1 : path;
    char *name = malloc(strlen(dir) + strlen(base) + 2);
    if (name) sprintf(name, "%s/%s", dir, base);
    free(dir);
    return name;
}

static int same_file(const char *x, const char *y)
{
    struct stat sx, sy;
    if (strcmp(x, y) == 0) return 1;
    if (stat(x, &sx) == 0 && stat(y, &sy) == 0) return sx.st_dev == sy.st_dev && sx.st_ino == sy.st_ino;
    char *rx = resolved_name(x), *ry = resolved_name(y);
    const int same = rx && ry && strcmp(rx, ry) == 0;
    free(rx);
    free(ry);
    return same;
}

void cli_distinct_files(const cli_args *a, const char *out_what, const char *out, const char *in_what,
                        const char *in)
{
    if (!out || !in || strcmp(out, "-") == 0 || strcmp(in, "-") == 0) return;
    if (same_file(out, in))
        cli_usage_error(a, "%s %s is also %s %s, which it would overwrite", out_what, out, in_what, in);
}
