/* The collectives benchmark's host-only parts (fp4/multigpu.h): op names,
 * sizes, the bus-bandwidth formulas, the default settings, and, in a build
 * without NCCL, the answers "unsupported" of the communicator set. */
#include "fp4/multigpu.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define COLL_MAX_BYTES ((size_t)64 << 30)

static const char *const op_names[FP4_COLL_OP_COUNT] = {"all_reduce", "all_to_all"};

const char *fp4_coll_op_name(fp4_coll_op op)
{
    return (unsigned)op < FP4_COLL_OP_COUNT ? op_names[op] : "unknown";
}

int fp4_coll_op_parse(const char *name, fp4_coll_op *op)
{
    for (int i = 0; i < FP4_COLL_OP_COUNT; i++)
        if (strcmp(name, op_names[i]) == 0) {
            *op = (fp4_coll_op)i;
            return 0;
        }
    return -1;
}

int fp4_coll_parse_size(const char *text, size_t *bytes)
{
    char *end;
    unsigned long long v;
    size_t shift = 0;
    if (!text || !isdigit((unsigned char)text[0])) return -1; /* no sign, no space */
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno == ERANGE) return -1;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    default: break;
    }
    if (shift && (end[0] == 'i' || end[0] == 'I') && toupper((unsigned char)end[1]) == 'B') end += 2;
    else if (shift && toupper((unsigned char)end[0]) == 'B') end++;
    if (*end != '\0' || v == 0 || v > (COLL_MAX_BYTES >> shift)) return -1;
    *bytes = (size_t)v << shift;
    return 0;
}

size_t fp4_coll_round_bytes(fp4_coll_op op, size_t bytes, int nranks)
{
    /* all-reduce: whole bf16 elements; all-to-all: nranks chunks of whole uint32 words */
    size_t unit = op == FP4_COLL_ALL_REDUCE ? 2 : 4 * (size_t)(nranks > 0 ? nranks : 1);
    size_t units = bytes / unit;
    return (units ? units : 1) * unit;
}

double fp4_coll_bus_factor(fp4_coll_op op, int nranks)
{
    if (nranks < 1) return 0;
    /* nccl-tests (doc/PERFORMANCE.md): a ring all-reduce moves 2(n-1)/n of
     * the data over each link, an all-to-all (n-1)/n */
    if (op == FP4_COLL_ALL_REDUCE) return 2.0 * (nranks - 1) / nranks;
    return (double)(nranks - 1) / nranks;
}

void fp4_coll_settings_default(fp4_coll_settings *s)
{
    memset(s, 0, sizeof *s);
    s->iters = 20;
    s->warmup = 3;
    s->reps = 10;
    s->seed = 1;
    s->fault_rank = -1;
}

#ifndef FP4_HAVE_NCCL
/* Built without NCCL: every entry says why, nothing runs. */

static fp4_status no_nccl(fp4_err *err)
{
#if !defined(FP4_HAVE_CUDA)
    return fp4_fail(err, FP4_ERR_UNSUPPORTED, "built without CUDA, so without NCCL");
#elif defined(FP4_NCCL_DISABLED)
    return fp4_fail(err, FP4_ERR_UNSUPPORTED, "built without NCCL (FP4_ENABLE_NCCL=OFF)");
#else
    return fp4_fail(err, FP4_ERR_UNSUPPORTED,
                    "built without NCCL (not found when configured: set NCCL_ROOT, or install "
                    "nvidia-nccl-cu13, then reconfigure)");
#endif
}

const char *fp4_nccl_launcher_name(fp4_nccl_launcher l)
{
    return l == FP4_NCCL_MPI ? "mpi" : "threads";
}

int fp4_nccl_version(void)
{
    return 0;
}

fp4_status fp4_nccl_probe(const fp4_nccl_config *cfg, fp4_err *why)
{
    return no_nccl(why);
}

fp4_status fp4_nccl_comms_create(const fp4_nccl_config *cfg, fp4_nccl_comms **out, fp4_err *err)
{
    if (out) *out = NULL;
    return no_nccl(err);
}

void fp4_nccl_comms_destroy(fp4_nccl_comms *c, fp4_warnings *warn)
{
}

int fp4_nccl_comms_size(const fp4_nccl_comms *c)
{
    return 0;
}

int fp4_nccl_comms_is_root(const fp4_nccl_comms *c)
{
    return 0;
}

const fp4_nccl_info *fp4_nccl_comms_info(const fp4_nccl_comms *c)
{
    return NULL;
}

fp4_status fp4_coll_run(fp4_nccl_comms *c, fp4_coll_op op, size_t bytes, const fp4_coll_settings *set,
                        fp4_coll_row *row, fp4_err *err)
{
    return no_nccl(err);
}
#endif
