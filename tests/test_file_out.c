/* Tests of fp4_io_out (src/io/file.h), the one way output files are written:
 * a new or regular file through a temporary renamed into place (mode as a
 * created file gets, or the old file's), symlinks followed and kept, devices
 * and FIFOs written straight into, write errors reported, and nothing but the
 * temporary ever removed. Every case runs in a temporary directory. */
#include "io/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

/* The test's scratch directory and a path inside it. */
typedef struct scratch {
    char dir[64];
    char path[8][256]; /* a ring, so a few paths can be alive at once */
    int next;
} scratch;

static const char *at(scratch *s, const char *name)
{
    char *p = s->path[s->next];
    size_t dlen = strlen(s->dir), nlen = strlen(name);
    s->next = (s->next + 1) % 8;
    if (dlen + 1 + nlen >= sizeof s->path[0]) abort(); /* the test's own names: short */
    memcpy(p, s->dir, dlen);
    p[dlen] = '/';
    memcpy(p + dlen + 1, name, nlen + 1);
    return p;
}

/* The whole content of path (NUL-terminated, malloc'ed) or NULL. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *b = f ? calloc(4096, 1) : NULL;
    if (b && fread(b, 1, 4095, f) == 0 && ferror(f)) {
        free(b);
        b = NULL;
    }
    if (f) fclose(f);
    return b;
}

static int holds(const char *path, const char *text)
{
    char *b = slurp(path);
    int same = b && strcmp(b, text) == 0;
    free(b);
    return same;
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fputs(text, f) != EOF);
    CHECK(fclose(f) == 0);
}

/* How many entries of the directory start with '.', other than . and ..:
 * the temporaries fp4_io_out makes ("dir/.name.XXXXXX"). */
static int hidden_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)))
        if (e->d_name[0] == '.' && strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(d);
    return n;
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (st.st_mode & 07777) : (mode_t)-1;
}

static void test_new_and_regular(scratch *s)
{
    fp4_err err;
    mode_t old = umask(027);
    const char *p = at(s, "new.txt");
    CHECK_MSG(fp4_io_write_text(p, "one\n", 4, &err) == FP4_OK, "%s", err.msg);
    CHECK(holds(p, "one\n"));
    CHECK_MSG(mode_of(p) == 0640, "mode %o, expected 0640 (0666 less the umask)", (unsigned)mode_of(p));
    umask(old);

    /* an existing file keeps its mode */
    CHECK(chmod(p, 0604) == 0);
    CHECK_MSG(fp4_io_write_text(p, "two\n", 4, &err) == FP4_OK, "%s", err.msg);
    CHECK(holds(p, "two\n"));
    CHECK(mode_of(p) == 0604);
    CHECK(hidden_entries(s->dir) == 0);
}

static void test_failure_keeps_the_old_file(scratch *s)
{
    fp4_err err;
    fp4_io_out out;
    const char *p = at(s, "keep.txt"), *fresh = at(s, "fresh.txt");
    put(p, "old\n");
    CHECK(fp4_io_out_open(&out, p, &err) == FP4_OK);
    if (out.f) CHECK(fputs("half of the new", out.f) != EOF);
    CHECK(fp4_io_out_finish(&out, fp4_fail(&err, FP4_ERR_FORMAT, "made up"), &err) == FP4_ERR_FORMAT);
    CHECK(strcmp(err.msg, "made up") == 0);
    CHECK(holds(p, "old\n"));
    CHECK(hidden_entries(s->dir) == 0);

    /* a new file that failed is not there at all */
    CHECK(fp4_io_out_open(&out, fresh, &err) == FP4_OK);
    CHECK(fp4_io_out_finish(&out, FP4_ERR_IO, &err) == FP4_ERR_IO);
    CHECK(access(fresh, F_OK) != 0);
    CHECK(hidden_entries(s->dir) == 0);

    /* a folder is no file: refused, left alone */
    CHECK(mkdir(at(s, "folder"), 0755) == 0);
    CHECK(fp4_io_write_text(at(s, "folder"), "x", 1, &err) == FP4_ERR_IO);
    CHECK(strstr(err.msg, "folder") != NULL);
    CHECK(rmdir(at(s, "folder")) == 0);

    /* a missing folder: nothing created */
    CHECK(fp4_io_write_text(at(s, "no/such/file"), "x", 1, &err) == FP4_ERR_IO);
    CHECK_MSG(strstr(err.msg, "cannot create") != NULL, "%s", err.msg);

    /* a file its owner made read-only is refused (root may write anything) */
    if (geteuid() != 0) {
        CHECK(chmod(p, 0444) == 0);
        CHECK(fp4_io_write_text(p, "new\n", 4, &err) == FP4_ERR_IO);
        CHECK(holds(p, "old\n"));
    }
    CHECK(remove(p) == 0);
}

static void test_symlinks(scratch *s)
{
    fp4_err err;
    struct stat st;
    char text[64];
    ssize_t n;
    CHECK(mkdir(at(s, "sub"), 0755) == 0);
    put(at(s, "sub/target"), "old\n");
    /* relative to the link's folder, not the working directory */
    CHECK(symlink("target", at(s, "sub/link")) == 0);
    CHECK(symlink("sub/link", at(s, "chain")) == 0);
    CHECK_MSG(fp4_io_write_text(at(s, "chain"), "new\n", 4, &err) == FP4_OK, "%s", err.msg);
    CHECK(holds(at(s, "sub/target"), "new\n"));
    CHECK(lstat(at(s, "chain"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(lstat(at(s, "sub/link"), &st) == 0 && S_ISLNK(st.st_mode));
    n = readlink(at(s, "sub/link"), text, sizeof text - 1);
    CHECK(n == 6 && memcmp(text, "target", 6) == 0);
    CHECK(hidden_entries(s->dir) == 0 && hidden_entries(at(s, "sub")) == 0);

    /* a dangling link names the file to create */
    CHECK(symlink("sub/made", at(s, "dangling")) == 0);
    CHECK_MSG(fp4_io_write_text(at(s, "dangling"), "made\n", 5, &err) == FP4_OK, "%s", err.msg);
    CHECK(holds(at(s, "sub/made"), "made\n"));
    CHECK(lstat(at(s, "dangling"), &st) == 0 && S_ISLNK(st.st_mode));

    /* a loop: refused, the links left as they were */
    CHECK(symlink("loop2", at(s, "loop1")) == 0);
    CHECK(symlink("loop1", at(s, "loop2")) == 0);
    CHECK(fp4_io_write_text(at(s, "loop1"), "x", 1, &err) == FP4_ERR_IO);
    CHECK(lstat(at(s, "loop1"), &st) == 0 && S_ISLNK(st.st_mode));

    /* a link to a folder: refused, the folder and the link kept */
    CHECK(symlink("sub", at(s, "to_dir")) == 0);
    CHECK(fp4_io_write_text(at(s, "to_dir"), "x", 1, &err) == FP4_ERR_IO);
    CHECK(lstat(at(s, "to_dir"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(stat(at(s, "sub"), &st) == 0 && S_ISDIR(st.st_mode));

    const char *names[] = {"to_dir", "loop1", "loop2", "dangling", "chain", "sub/link", "sub/made",
                           "sub/target"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) CHECK(remove(at(s, names[i])) == 0);
    CHECK(rmdir(at(s, "sub")) == 0);
}

static void test_fifo(scratch *s)
{
    fp4_err err;
    fp4_io_out out;
    struct stat st;
    char buf[64] = {0};
    const char *p = at(s, "fifo");
    int rd;
    CHECK(mkfifo(p, 0600) == 0);
    /* a reader first, so that opening the FIFO for writing does not wait */
    rd = open(p, O_RDONLY | O_NONBLOCK);
    CHECK(rd >= 0);
    if (rd < 0) return;
    CHECK_MSG(fp4_io_write_text(p, "through\n", 8, &err) == FP4_OK, "%s", err.msg);
    CHECK(read(rd, buf, sizeof buf - 1) == 8 && strcmp(buf, "through\n") == 0);
    CHECK(lstat(p, &st) == 0 && S_ISFIFO(st.st_mode));
    CHECK(hidden_entries(s->dir) == 0);

    /* the reader gone: the write error is reported and the FIFO stays */
    CHECK(fp4_io_out_open(&out, p, &err) == FP4_OK);
    CHECK(close(rd) == 0);
    if (out.f) CHECK(fputs("into nothing\n", out.f) != EOF);
    CHECK(fp4_io_out_finish(&out, FP4_OK, &err) == FP4_ERR_IO);
    CHECK_MSG(strstr(err.msg, "cannot write") != NULL, "%s", err.msg);
    CHECK(lstat(p, &st) == 0 && S_ISFIFO(st.st_mode));
    CHECK(remove(p) == 0);
}

int main(void)
{
    scratch s;
    memset(&s, 0, sizeof s);
    /* a write to a FIFO without a reader must be an error to report, not the end */
    signal(SIGPIPE, SIG_IGN);
    snprintf(s.dir, sizeof s.dir, "/tmp/fp4_test_file_out.XXXXXX");
    if (!mkdtemp(s.dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_new_and_regular(&s);
    test_failure_keeps_the_old_file(&s);
    test_symlinks(&s);
    test_fifo(&s);
    CHECK(remove(at(&s, "new.txt")) == 0);
    CHECK(rmdir(s.dir) == 0);
    return check_finish("test_file_out");
}
