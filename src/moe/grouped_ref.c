/* Exact grouped GEMM references for MoE (fp4/moe.h): W4A4 on top of
 * fp4_gemm_reference, and W4A16 with an exact fixed-point accumulator.
 *
 * W4A16 exactness. A finite bf16 is M * 2^E with M an integer, |M| <= 255, and
 * E in [-133, 120]; write E = bin - 133, bin in [0, 253] (bin = biased
 * exponent - 1, or 0 for subnormals). An NVFP4 weight without its global scale
 * is W * 2^-10 with W = (2*e2m1) * (512*e4m3) an integer, |W| <= 12 * 229376.
 * So every product is M * W * 2^(bin - 143), an integer times a power of two.
 * The accumulator has one int64 per 8 exponents ("limb" L = bin / 8, worth
 * 2^(8L - 143)); a term adds (M << bin % 8) * W, at most 2^36.4 in magnitude, so
 * K <= 2^20 terms fit in int64. At the end the limbs are carried into a
 * base-256 integer, multiplied by the global scale's 24-bit significand, and
 * rounded once to fp32 (nearest even, subnormals, overflow to infinity). */
#include "fp4/moe.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ACC_LIMBS 32   /* int64 accumulators: bins 0..253 in groups of 8 */
#define BIG_DIGITS 48  /* base-256 digits: the sum (< 2^305) times 2^24 fits */
#define BIN_TO_EXP 143 /* a unit of bin 0, limb 0 is 2^-143 (2^-133 bf16 * 2^-10 weight) */
#define N_TILE 32      /* output columns per W4A16 task */

/* ---- a small parallel loop ------------------------------------------------------ */

typedef struct par_loop {
    void (*body)(void *ctx, int worker, int64_t task);
    void *ctx;
    int64_t tasks;
    atomic_llong next;
} par_loop;

typedef struct par_worker_arg {
    par_loop *loop;
    int worker;
} par_worker_arg;

static void *par_worker(void *arg)
{
    const par_worker_arg *w = arg;
    for (;;) {
        const int64_t t = atomic_fetch_add(&w->loop->next, 1);
        if (t >= w->loop->tasks) break;
        w->loop->body(w->loop->ctx, w->worker, t);
    }
    return NULL;
}

/* Threads to use for `tasks` tasks: threads <= 0 means one per online core. */
static int thread_count(int threads, int64_t tasks)
{
    if (threads <= 0) {
        const long online = sysconf(_SC_NPROCESSORS_ONLN);
        threads = online > 0 ? (int)online : 1;
    }
    if (threads > 256) threads = 256;
    if ((int64_t)threads > tasks) threads = (int)(tasks > 0 ? tasks : 1);
    return threads;
}

/* Run body(ctx, worker, t) for t in [0, tasks) on `threads` threads (worker <
 * threads), the calling thread included; fewer when thread creation fails,
 * never failing itself. */
static void par_run(void (*body)(void *, int, int64_t), void *ctx, int64_t tasks, int threads)
{
    par_loop loop;
    pthread_t tids[256];
    par_worker_arg args[256];
    int started = 0;
    loop.body = body;
    loop.ctx = ctx;
    loop.tasks = tasks;
    atomic_init(&loop.next, 0);
    for (int i = 0; i < threads; i++) {
        args[i].loop = &loop;
        args[i].worker = i;
    }
    for (; started < threads - 1; started++)
        if (pthread_create(&tids[started], NULL, par_worker, &args[started + 1]) != 0) break;
    par_worker(&args[0]);
    for (int i = 0; i < started; i++) pthread_join(tids[i], NULL);
}

/* ---- checks shared by both references -------------------------------------------------- */

/* All E weight matrices present, [n, k] alike; returns n through *n_out. */
static fp4_status check_weights(const char *who, const fp4_matrix *b, int experts, int64_t k,
                                int64_t *n_out, fp4_err *err)
{
    for (int e = 0; e < experts; e++) {
        const fp4_matrix *m = &b[e];
        if (!m->codes || !m->scales)
            return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: expert %d's weight is missing", who, e);
        if (m->cols != k || m->rows != b[0].rows || m->rows < 1)
            return fp4_fail(err, FP4_ERR_SHAPE,
                            "%s: expert %d's weight is %lldx%lld, expected %lldx%lld like expert 0 "
                            "with K=%lld",
                            who, e, (long long)m->rows, (long long)m->cols, (long long)b[0].rows,
                            (long long)k, (long long)k);
        if (!(m->global_scale > 0.0f) || !isfinite(m->global_scale))
            return fp4_fail(err, FP4_ERR_INVALID_ARG,
                            "%s: expert %d's global scale %g is not positive and finite", who, e,
                            (double)m->global_scale);
    }
    *n_out = b[0].rows;
    return FP4_OK;
}

static fp4_status check_plan(const char *who, const fp4_moe_plan *plan, fp4_err *err)
{
    if (!plan->expert_offsets || !plan->pair_index || plan->experts < 1 || plan->top_k < 1 ||
        plan->pairs != plan->tokens * plan->top_k)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: the plan is empty or inconsistent", who);
    return FP4_OK;
}

/* The A row pair p reads. */
static int64_t a_row_of(fp4_moe_a_rows a_rows, int64_t pair, int top_k)
{
    return a_rows == FP4_MOE_A_PER_TOKEN ? pair / top_k : pair;
}

static fp4_status check_a_rows(const char *who, fp4_moe_a_rows a_rows, int64_t rows,
                               const fp4_moe_plan *plan, fp4_err *err)
{
    if (a_rows != FP4_MOE_A_PER_TOKEN && a_rows != FP4_MOE_A_PER_PAIR)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: unknown A row mode %d", who, (int)a_rows);
    const int64_t want = a_rows == FP4_MOE_A_PER_TOKEN ? plan->tokens : plan->pairs;
    if (rows != want)
        return fp4_fail(err, FP4_ERR_SHAPE, "%s: A has %lld rows, expected %lld (one per %s)", who,
                        (long long)rows, (long long)want,
                        a_rows == FP4_MOE_A_PER_TOKEN ? "token" : "(token, slot) pair");
    return FP4_OK;
}

/* ---- W4A4 ---------------------------------------------------------------------------- */

fp4_status fp4_moe_grouped_ref_w4a4(const fp4_matrix *a, fp4_moe_a_rows a_rows, const fp4_matrix *b,
                                    const fp4_moe_plan *plan, float *d, int threads, fp4_err *err)
{
    static const char who[] = "grouped W4A4 reference";
    fp4_status st;
    fp4_matrix gathered = {0};
    float *tmp = NULL;
    int64_t n;
    if (!a || !b || !plan || !d || !a->codes || !a->scales)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: NULL argument", who);
    if ((st = check_plan(who, plan, err)) != FP4_OK) return st;
    if ((st = fp4_check_dims(a->rows, a->cols, err)) != FP4_OK) return st;
    if ((st = check_a_rows(who, a_rows, a->rows, plan, err)) != FP4_OK) return st;
    if ((st = check_weights(who, b, plan->experts, a->cols, &n, err)) != FP4_OK) return st;

    int32_t max_count = 0;
    for (int e = 0; e < plan->experts; e++) {
        const int32_t c = plan->expert_offsets[e + 1] - plan->expert_offsets[e];
        max_count = c > max_count ? c : max_count;
    }
    const int64_t k = a->cols, code_bytes = k / 2, scale_bytes = k / FP4_BLOCK;
    if ((st = fp4_matrix_alloc(&gathered, max_count, k, err)) != FP4_OK) return st;
    tmp = malloc((size_t)max_count * (size_t)n * sizeof *tmp);
    if (!tmp) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "%s: no memory for %d x %lld outputs", who,
                      (int)max_count, (long long)n);
        goto out;
    }
    gathered.global_scale = a->global_scale;
    for (int e = 0; e < plan->experts; e++) {
        const int32_t r0 = plan->expert_offsets[e], count = plan->expert_offsets[e + 1] - r0;
        if (count == 0) continue; /* an idle expert: no GEMM */
        for (int32_t i = 0; i < count; i++) {
            const int64_t src = a_row_of(a_rows, plan->pair_index[r0 + i], plan->top_k);
            memcpy(gathered.codes + (size_t)i * (size_t)code_bytes,
                   a->codes + (size_t)src * (size_t)code_bytes, (size_t)code_bytes);
            memcpy(gathered.scales + (size_t)i * (size_t)scale_bytes,
                   a->scales + (size_t)src * (size_t)scale_bytes, (size_t)scale_bytes);
        }
        gathered.rows = count;
        const float alpha = a->global_scale * b[e].global_scale;
        if ((st = fp4_gemm_reference(&gathered, &b[e], alpha, tmp, threads, err)) != FP4_OK)
            goto out;
        for (int32_t i = 0; i < count; i++)
            memcpy(d + (size_t)plan->pair_index[r0 + i] * (size_t)n, tmp + (size_t)i * (size_t)n,
                   (size_t)n * sizeof *d);
    }
out:
    fp4_matrix_free(&gathered);
    free(tmp);
    return st;
}

/* ---- W4A16: the exact accumulator ------------------------------------------------------ */

/* The sum held by acc[ACC_LIMBS] (limb L worth 2^(8L - 143)) times gs, rounded
 * once to fp32 (see the file comment). gs is finite and positive. */
static float exact_to_float(const int64_t *acc, float gs)
{
    int64_t v[BIG_DIGITS];
    uint32_t dig[BIG_DIGITS];
    int64_t carry = 0;
    int negative = 0;

    /* 1. carry into base-256 digits; a negative sum ends with carry -1 */
    for (int i = 0; i < BIG_DIGITS; i++) v[i] = i < ACC_LIMBS ? acc[i] : 0;
    for (int i = 0; i < BIG_DIGITS; i++) {
        const int64_t x = v[i] + carry;
        int64_t low = x % 256; /* x mod 256 in [0, 256) */
        if (low < 0) low += 256;
        dig[i] = (uint32_t)low;
        carry = (x - low) / 256;
    }
    if (carry < 0) { /* magnitude = 256^BIG_DIGITS - digits */
        negative = 1;
        uint32_t c = 1;
        for (int i = 0; i < BIG_DIGITS; i++) {
            const uint32_t x = (255u - dig[i]) + c;
            dig[i] = x & 255u;
            c = x >> 8;
        }
    }

    /* 2. times the 24-bit significand of gs: gs = sig * 2^gexp */
    int ex;
    const float frac = frexpf(gs, &ex); /* gs = frac * 2^ex, frac in [0.5, 1) */
    const uint64_t sig = (uint64_t)ldexpf(frac, 24);
    const int gexp = ex - 24;
    uint64_t c = 0;
    for (int i = 0; i < BIG_DIGITS; i++) {
        const uint64_t x = (uint64_t)dig[i] * sig + c;
        dig[i] = (uint32_t)(x & 255u);
        c = x >> 8;
    }

    /* 3. the value is sign * digits * 2^(gexp - 143): round to 24 bits */
    int top = BIG_DIGITS - 1;
    while (top >= 0 && dig[top] == 0) top--;
    if (top < 0) return 0.0f;
    int msb = 8 * top;
    for (uint32_t x = dig[top] >> 1; x; x >>= 1) msb++;
    const int unit = gexp - BIN_TO_EXP;    /* the exponent of bit 0 */
    const int subnormal_lsb = -149 - unit; /* the bit worth 2^-149 */
    const int lsb = msb - 23 > subnormal_lsb ? msb - 23 : subnormal_lsb;
    uint64_t mant = 0;
    for (int i = msb; i >= lsb && i >= 0; i--) mant = (mant << 1) | ((dig[i >> 3] >> (i & 7)) & 1u);
    if (lsb > 0) {
        const int rbit = lsb - 1;
        const unsigned round = (dig[rbit >> 3] >> (rbit & 7)) & 1u;
        unsigned sticky = 0;
        for (int i = 0; i < (rbit >> 3) && !sticky; i++) sticky = dig[i] != 0;
        if (!sticky) sticky = (dig[rbit >> 3] & ((1u << (rbit & 7)) - 1u)) != 0;
        if (round && (sticky || (mant & 1u))) mant++;
    }
    const int shift = lsb > 0 ? lsb : 0;
    const double mag = ldexp((double)mant, unit + shift); /* exact: mant <= 2^24 */
    const float out = mag > (double)FLT_MAX ? INFINITY : (float)mag;
    return negative ? -out : out;
}

/* One activation row decoded for the accumulator: each non-zero element as
 * mval = +-(M << bin % 8) going to limb bin / 8, stored grouped by limb
 * (mval[bounds[L] .. bounds[L+1]) with their columns in col), so that the dot
 * product sums each limb in a register instead of through memory. */
static void decode_bf16_row(const uint16_t *x, int64_t k, int16_t *mval, int32_t *col,
                            int32_t *bounds)
{
    int32_t next[ACC_LIMBS];
    memset(bounds, 0, (ACC_LIMBS + 1) * sizeof *bounds);
    for (int pass = 0; pass < 2; pass++) { /* count per limb, then place */
        if (pass == 1) {
            for (int l = 0; l < ACC_LIMBS; l++) bounds[l + 1] += bounds[l];
            memcpy(next, bounds, sizeof next);
        }
        for (int64_t i = 0; i < k; i++) {
            const unsigned h = x[i], e = (h >> 7) & 255u, m = h & 127u;
            const unsigned mag = e ? (m | 128u) : m, bin = e ? e - 1u : 0u;
            if (mag == 0) continue; /* +-0 adds nothing */
            if (pass == 0) {
                bounds[(bin >> 3) + 1]++;
                continue;
            }
            const int v = (int)(mag << (bin & 7u));
            const int32_t at = next[bin >> 3]++;
            mval[at] = (int16_t)((h & 0x8000u) ? -v : v);
            col[at] = (int32_t)i;
        }
    }
}

typedef struct w4a16_job {
    const fp4_matrix *b;      /* this expert's weight [n, k] */
    int64_t n, k, count;      /* count: this expert's rows */
    const int16_t *mval;      /* [count, k] (decode_bf16_row) */
    const int32_t *col;       /* [count, k] */
    const int32_t *bounds;    /* [count, ACC_LIMBS + 1] */
    const int32_t *pairs;     /* [count]: the pair of each row */
    const int32_t *scale_int; /* [256]: 512 * e4m3(byte) */
    int32_t *w_rows;          /* [threads, k]: a worker's decoded weight row */
    float *d;                 /* [pairs, n] */
} w4a16_job;

static void w4a16_task(void *ctx, int worker, int64_t task)
{
    const w4a16_job *job = ctx;
    static const int32_t q2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    const int64_t k = job->k, n0 = task * N_TILE;
    const int64_t n1 = n0 + N_TILE < job->n ? n0 + N_TILE : job->n;
    int32_t *w = job->w_rows + (size_t)worker * (size_t)k;
    for (int64_t c = n0; c < n1; c++) {
        const uint8_t *codes = job->b->codes + (size_t)c * (size_t)(k / 2);
        const uint8_t *scales = job->b->scales + (size_t)c * (size_t)(k / FP4_BLOCK);
        for (int64_t i = 0; i < k; i += 2) {
            const int32_t s = job->scale_int[scales[i / FP4_BLOCK]];
            w[i] = q2[codes[i / 2] & 15] * s;
            w[i + 1] = q2[codes[i / 2] >> 4] * s;
        }
        for (int64_t r = 0; r < job->count; r++) {
            int64_t acc[ACC_LIMBS];
            const int16_t *mv = job->mval + (size_t)r * (size_t)k;
            const int32_t *cl = job->col + (size_t)r * (size_t)k;
            const int32_t *bd = job->bounds + (size_t)r * (ACC_LIMBS + 1);
            for (int l = 0; l < ACC_LIMBS; l++) {
                int64_t sum = 0;
                for (int32_t i = bd[l]; i < bd[l + 1]; i++) sum += (int64_t)mv[i] * w[cl[i]];
                acc[l] = sum;
            }
            job->d[(size_t)job->pairs[r] * (size_t)job->n + (size_t)c] =
                exact_to_float(acc, job->b->global_scale);
        }
    }
}

fp4_status fp4_moe_grouped_ref_w4a16(const uint16_t *a_bf16, int64_t a_rows_count, int64_t k,
                                     fp4_moe_a_rows a_rows, const fp4_matrix *b,
                                     const fp4_moe_plan *plan, float *d, int threads, fp4_err *err)
{
    static const char who[] = "grouped W4A16 reference";
    fp4_status st;
    int32_t scale_int[256];
    int16_t *mval = NULL;
    int32_t *col = NULL, *bounds = NULL, *w_rows = NULL;
    int64_t n;
    if (!a_bf16 || !b || !plan || !d)
        return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: NULL argument", who);
    if ((st = check_plan(who, plan, err)) != FP4_OK) return st;
    if ((st = fp4_check_dims(a_rows_count, k, err)) != FP4_OK) return st;
    if (k > FP4_MOE_MAX_K)
        return fp4_fail(err, FP4_ERR_SHAPE, "%s: K=%lld above 2^20, the exact limit", who,
                        (long long)k);
    if ((st = check_a_rows(who, a_rows, a_rows_count, plan, err)) != FP4_OK) return st;
    if ((st = check_weights(who, b, plan->experts, k, &n, err)) != FP4_OK) return st;
    for (int64_t r = 0; r < a_rows_count; r++)
        for (int64_t i = 0; i < k; i++)
            if ((a_bf16[(size_t)r * (size_t)k + (size_t)i] & 0x7F80u) == 0x7F80u)
                return fp4_fail(err, FP4_ERR_INVALID_ARG, "%s: activation (%lld, %lld) is %s", who,
                                (long long)r, (long long)i,
                                (a_bf16[(size_t)r * (size_t)k + (size_t)i] & 0x7Fu) ? "NaN"
                                                                                    : "infinite");
    for (int byte = 0; byte < 256; byte++) {
        const float s = fp4_e4m3_decode((uint8_t)byte);
        scale_int[byte] = (isnan(s) || s < 0.0f) ? -1 : (int32_t)(s * 512.0f);
    }
    /* only the experts that run must have valid scales, as in fp4_gemm_reference */
    for (int e = 0; e < plan->experts; e++) {
        if (plan->expert_offsets[e + 1] == plan->expert_offsets[e]) continue;
        const size_t nscales = (size_t)n * (size_t)(k / FP4_BLOCK);
        for (size_t i = 0; i < nscales; i++)
            if (scale_int[b[e].scales[i]] < 0)
                return fp4_fail(err, FP4_ERR_INVALID_ARG,
                                "%s: expert %d's scale (%lld, %lld) is 0x%02x: NaN or negative",
                                who, e, (long long)(i / (size_t)(k / FP4_BLOCK)),
                                (long long)(i % (size_t)(k / FP4_BLOCK)), b[e].scales[i]);
    }

    int32_t max_count = 0;
    for (int e = 0; e < plan->experts; e++) {
        const int32_t c = plan->expert_offsets[e + 1] - plan->expert_offsets[e];
        max_count = c > max_count ? c : max_count;
    }
    const int64_t tasks = (n + N_TILE - 1) / N_TILE;
    const int nthreads = thread_count(threads, tasks);
    mval = malloc((size_t)max_count * (size_t)k * sizeof *mval);
    col = malloc((size_t)max_count * (size_t)k * sizeof *col);
    bounds = malloc((size_t)max_count * (ACC_LIMBS + 1) * sizeof *bounds);
    w_rows = malloc((size_t)nthreads * (size_t)k * sizeof *w_rows);
    if (!mval || !col || !bounds || !w_rows) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "%s: no memory for %d rows of K=%lld", who,
                      (int)max_count, (long long)k);
        goto out;
    }
    for (int e = 0; e < plan->experts; e++) {
        const int32_t r0 = plan->expert_offsets[e], count = plan->expert_offsets[e + 1] - r0;
        if (count == 0) continue;
        for (int32_t i = 0; i < count; i++) {
            const int64_t src = a_row_of(a_rows, plan->pair_index[r0 + i], plan->top_k);
            decode_bf16_row(a_bf16 + (size_t)src * (size_t)k, k, mval + (size_t)i * (size_t)k,
                            col + (size_t)i * (size_t)k, bounds + (size_t)i * (ACC_LIMBS + 1));
        }
        w4a16_job job = {&b[e],     n,      k, count, mval, col, bounds, plan->pair_index + r0,
                         scale_int, w_rows, d};
        par_run(w4a16_task, &job, tasks, nthreads);
    }
out:
    free(mval);
    free(col);
    free(bounds);
    free(w_rows);
    return st;
}
