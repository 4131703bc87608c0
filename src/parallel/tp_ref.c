/* The exact tensor-parallel layer reference (fp4/parallel.h, docs/PARALLEL.md).
 *
 * Each rank computes gate_up's slice (whole dot products over H: the same fp32
 * values as the unsharded GEMM), the activation, and its partial of down over a
 * K slice of I. The unsharded GEMM rounds the exact sum over all of I once, so
 * the partials must not be rounded: each rank's partial is kept as an exact
 * integer, the "all-reduce" adds integers (associative, so the sum over ranks is
 * the integer the unsharded GEMM gets over all of K), and the sum is rounded
 * once the way the unsharded reference rounds it:
 *   W4A4:  a term is (2qa)(2qb)(512sa)(512sb) * 2^-20, an int64 accumulator;
 *          the result is fp32((double)acc * 2^-20 * (double)alpha), the very
 *          expression of fp4_gemm_reference.
 *   W4A16: a term is M * W * 2^(bin - 143) (M the bf16 significand, bin its
 *          biased exponent - 1, W the integer weight), in 32 int64 limbs of 8 bins;
 *          the result is gs * sum rounded once to fp32, nearest even: the
 *          correctly rounded value, which is what the unsharded W4A16 reference
 *          computes, so both agree whatever their inner steps.
 * Work over pairs is spread on threads; each pair's row is written by one. */
#include "fp4/parallel.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parallel/par_common.h"

#define LIMBS 32      /* W4A16: int64 limbs, 8 exponents each (bins 0..253) */
#define DIGITS 48     /* base-256 digits of |sum| * 2^24 (< 2^330) */
#define BIN_UNIT 143  /* limb 0's unit is 2^-143: 2^-133 (bf16) * 2^-10 (weight) */
#define MAX_THREADS 256

static const char who[] = "tensor-parallel layer";

/* 2*e2m1 of a code: an integer in [-12, 12]. */
static const int32_t Q2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ---- rounding of the exact sums -------------------------------------------------------- */

/* sum_L acc[L] * 2^(8L - 143) * gs, rounded once to fp32 (nearest even, with
 * subnormals, overflow to infinity). gs is positive and finite. */
static float limbs_to_float(const int64_t *acc, float gs)
{
    uint32_t dig[DIGITS]; /* base 256, least significant first */
    int64_t carry = 0;
    int negative = 0;
    for (int i = 0; i < DIGITS; i++) {
        const int64_t x = (i < LIMBS ? acc[i] : 0) + carry;
        const int64_t low = ((x % 256) + 256) % 256;
        dig[i] = (uint32_t)low;
        carry = (x - low) / 256;
    }
    if (carry < 0) { /* two's complement in DIGITS digits: negate to the magnitude */
        uint32_t c = 1;
        negative = 1;
        for (int i = 0; i < DIGITS; i++) {
            const uint32_t v = (255u - dig[i]) + c;
            dig[i] = v & 255u;
            c = v >> 8;
        }
    }
    int gexp;
    const uint64_t sig = (uint64_t)ldexpf(frexpf(gs, &gexp), 24); /* gs = sig * 2^(gexp-24) */
    uint64_t c = 0;
    for (int i = 0; i < DIGITS; i++) {
        const uint64_t v = (uint64_t)dig[i] * sig + c;
        dig[i] = (uint32_t)(v & 255u);
        c = v >> 8;
    }
    const int unit = gexp - 24 - BIN_UNIT; /* the exponent of bit 0 */
    int top = DIGITS - 1;
    while (top >= 0 && dig[top] == 0) top--;
    if (top < 0) return negative ? -0.0f : 0.0f;
    int msb = 8 * top + 7;
    while (!((dig[msb / 8] >> (msb % 8)) & 1u)) msb--;
    /* keep 24 bits, fewer where the result is subnormal (its last bit is 2^-149) */
    int lsb = msb - 23;
    if (lsb + unit < -149) lsb = -149 - unit;
    uint64_t mant = 0;
    for (int b = msb; b >= lsb; b--)
        mant = (mant << 1) | (b >= 0 ? (dig[b / 8] >> (b % 8)) & 1u : 0u);
    if (lsb > 0) { /* bits below lsb decide the rounding */
        const int half = lsb - 1;
        const unsigned round = (dig[half / 8] >> (half % 8)) & 1u;
        unsigned sticky = 0;
        for (int b = 0; b < half && !sticky; b++) sticky = (dig[b / 8] >> (b % 8)) & 1u;
        if (round && (sticky || (mant & 1u))) mant++;
    }
    const double mag = ldexp((double)mant, unit + lsb); /* exact: <= 25 bits, >= 2^-149 */
    const float out = mag > (double)FLT_MAX ? INFINITY : (float)mag;
    return negative ? -out : out;
}

/* ---- the partial products -------------------------------------------------------------------- */

typedef struct tp_job {
    fp4_moe_mode mode;
    int tp;
    int64_t pairs, hidden, shard; /* shard: I / tp */
    const fp4_moe_routing *r;
    const fp4_moe_weights *shards; /* [tp]: each rank's down slices [H, I/tp] */
    const fp4_matrix *hq;          /* [tp] W4A4: each rank's quantized h slice [pairs, I/tp] */
    uint16_t *const *h16;          /* [tp] W4A16: each rank's bf16 h slice [pairs, I/tp] */
    const int32_t *scale_int;      /* [256]: 512 * e4m3(byte) */
    float *d;                      /* [pairs, H] */
    int64_t *scratch;              /* [threads, H * LIMBS] */
    int32_t *arow;                 /* [threads, shard]: a decoded activation row */
    int32_t *wrow;                 /* [threads, shard]: a decoded weight row */
    int8_t *lrow;                  /* [threads, shard] W4A16: each activation's limb */
    atomic_llong next;
} tp_job;

/* Decode row `row` of an NVFP4 matrix to w[i] = (2 e2m1) * (512 e4m3). */
static void decode_nvfp4_row(const fp4_matrix *m, int64_t row, const int32_t *scale_int,
                             int32_t *w)
{
    const int64_t k = m->cols;
    const uint8_t *codes = m->codes + (size_t)row * (size_t)(k / 2);
    const uint8_t *scales = m->scales + (size_t)row * (size_t)(k / FP4_BLOCK);
    for (int64_t i = 0; i < k; i += 2) {
        const int32_t s = scale_int[scales[i / FP4_BLOCK]];
        w[i] = Q2[codes[i / 2] & 15] * s;
        w[i + 1] = Q2[codes[i / 2] >> 4] * s;
    }
}

/* One pair: every rank's partial of every output column, summed exactly, rounded. */
static void tp_pair(tp_job *job, int worker, int64_t p)
{
    const int e = job->r->expert_ids[p];
    const int64_t hid = job->hidden, ks = job->shard;
    const int limbs = job->mode == FP4_MOE_W4A4 ? 1 : LIMBS;
    int64_t *acc = job->scratch + (size_t)worker * (size_t)hid * LIMBS;
    int32_t *a = job->arow + (size_t)worker * (size_t)ks;
    int32_t *w = job->wrow + (size_t)worker * (size_t)ks;
    memset(acc, 0, (size_t)hid * (size_t)limbs * sizeof *acc);
    for (int rank = 0; rank < job->tp; rank++) { /* the all-reduce: integer adds */
        const fp4_matrix *b = &job->shards[rank].down[e];
        if (job->mode == FP4_MOE_W4A4) {
            decode_nvfp4_row(&job->hq[rank], p, job->scale_int, a);
            for (int64_t n = 0; n < hid; n++) {
                decode_nvfp4_row(b, n, job->scale_int, w);
                int64_t sum = 0; /* |term| <= 144 * 2^35.6: K <= 2^20 of them fit (as in fp4_gemm_reference) */
                for (int64_t i = 0; i < ks; i++) sum += (int64_t)a[i] * (int64_t)w[i];
                acc[n] += sum;
            }
        } else {
            /* a bf16 value is +-(M << bin % 8) * 2^(8 * (bin / 8) - 133): a[i] holds
             * the signed shifted significand, lim[i] the limb */
            int8_t *lim = job->lrow + (size_t)worker * (size_t)ks;
            const uint16_t *x = job->h16[rank] + (size_t)p * (size_t)ks;
            for (int64_t i = 0; i < ks; i++) {
                const unsigned hb = x[i], ex = (hb >> 7) & 255u, m = hb & 127u;
                const unsigned mag = ex ? (m | 128u) : m, bin = ex ? ex - 1u : 0u;
                const int32_t v = (int32_t)(mag << (bin & 7u));
                a[i] = (hb & 0x8000u) ? -v : v;
                lim[i] = (int8_t)(bin >> 3);
            }
            for (int64_t n = 0; n < hid; n++) {
                decode_nvfp4_row(b, n, job->scale_int, w);
                int64_t *an = acc + (size_t)n * LIMBS;
                for (int64_t i = 0; i < ks; i++) an[lim[i]] += (int64_t)a[i] * (int64_t)w[i];
            }
        }
    }
    float *dp = job->d + (size_t)p * (size_t)hid;
    if (job->mode == FP4_MOE_W4A4) {
        /* every rank's hq slice and down slice keep the whole tensors' global scales */
        const float alpha = job->hq[0].global_scale * job->shards[0].down[e].global_scale;
        for (int64_t n = 0; n < hid; n++)
            dp[n] = (float)(((double)acc[n] * 0x1p-20) * (double)alpha);
    } else {
        const float gs = job->shards[0].down[e].global_scale;
        for (int64_t n = 0; n < hid; n++) dp[n] = limbs_to_float(acc + (size_t)n * LIMBS, gs);
    }
}

typedef struct tp_worker_arg {
    tp_job *job;
    int worker;
} tp_worker_arg;

static void *tp_worker(void *arg)
{
    tp_worker_arg *wa = arg;
    for (;;) {
        const int64_t p = atomic_fetch_add(&wa->job->next, 1);
        if (p >= wa->job->pairs) break;
        tp_pair(wa->job, wa->worker, p);
    }
    return NULL;
}

static int thread_count(int threads, int64_t tasks)
{
    if (threads <= 0) {
        const long online = sysconf(_SC_NPROCESSORS_ONLN);
        threads = online > 0 ? (int)online : 1;
    }
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if ((int64_t)threads > tasks) threads = (int)(tasks > 0 ? tasks : 1);
    return threads;
}

/* Every scale of the down weights of the experts that run is a UE4M3 scale (as
 * fp4_gemm_reference requires); fills scale_int. */
static fp4_status check_down_scales(const fp4_moe_weights *w, const fp4_moe_plan *plan,
                                    int32_t *scale_int, fp4_err *err)
{
    for (int byte = 0; byte < 256; byte++) {
        const float s = fp4_e4m3_decode((uint8_t)byte);
        scale_int[byte] = (isnan(s) || s < 0.0f) ? -1 : (int32_t)(s * 512.0f);
    }
    for (int e = 0; e < w->experts; e++) {
        if (plan->expert_counts[e] == 0) continue;
        const fp4_matrix *m = &w->down[e];
        const size_t n = (size_t)m->rows * (size_t)(m->cols / FP4_BLOCK);
        for (size_t i = 0; i < n; i++)
            if (scale_int[m->scales[i]] < 0)
                return fp4_fail(err, FP4_ERR_INVALID_ARG,
                                "%s: expert %d's down scale %zu is 0x%02x: NaN or negative", who,
                                e, i, m->scales[i]);
    }
    return FP4_OK;
}

/* ---- the layer ------------------------------------------------------------------------------ */

fp4_status fp4_tp_layer_ref(const fp4_moe_dims *dims, const fp4_moe_weights *w, int tp,
                            const uint16_t *x_bf16, const fp4_moe_routing *r,
                            const fp4_moe_layer_opts *o, fp4_moe_layer_out *io, fp4_err *err)
{
    fp4_status st;
    fp4_err inner;
    fp4_tp_mlp_plan tpp;
    fp4_moe_plan plan = {0};
    fp4_matrix xq = {0};
    fp4_moe_weights *shards = NULL; /* [tp] */
    float **y = NULL, **h = NULL;   /* [tp] per rank: [pairs, 2I/tp], [pairs, I/tp] */
    fp4_matrix *hq = NULL;          /* [tp] */
    uint16_t **h16 = NULL;          /* [tp] */
    float *d = NULL;
    int64_t *scratch = NULL;
    int32_t *arow = NULL, *wrow = NULL;
    int8_t *lrow = NULL;
    pthread_t tids[MAX_THREADS];
    tp_worker_arg args[MAX_THREADS];
    int32_t scale_int[256];
    fp4_err_clear(&inner);

    if ((st = fp4_par_check_layer(who, dims, w, x_bf16, r, o, io, err)) != FP4_OK) return st;
    if ((st = fp4_tp_mlp_plan_build(r->tokens, dims->hidden, dims->inter, tp, FP4_PAR_FP32, &tpp,
                                    err)) != FP4_OK)
        return st;
    if ((st = fp4_moe_plan_build(r, &plan, err)) != FP4_OK) return st;
    const int64_t tokens = r->tokens, pairs = plan.pairs, hid = dims->hidden, inter = dims->inter;
    const int64_t ks = tpp.inter_shard;
    io->x_encode_scale_used = 0.0f;
    io->h_encode_scale_used = 0.0f;
    shards = calloc((size_t)tp, sizeof *shards);
    y = calloc((size_t)tp, sizeof *y);
    h = calloc((size_t)tp, sizeof *h);
    hq = calloc((size_t)tp, sizeof *hq);
    h16 = calloc((size_t)tp, sizeof *h16);
    if (!shards || !y || !h || !hq || !h16) {
        st = fp4_fail(err, FP4_ERR_NOMEM, "%s: no memory for %d ranks", who, tp);
        goto out;
    }

    /* x is replicated on every rank: each quantizes it alike (no reduction needed) */
    if (o->mode == FP4_MOE_W4A4) {
        float amax;
        if ((st = fp4_par_bf16_amax(x_bf16, tokens, hid, 0, who, &amax, err)) != FP4_OK) goto out;
        const float gs_x = fp4_par_encode_scale(o->x_encode_scale, amax);
        if ((st = fp4_quantize_bf16(x_bf16, tokens, hid, gs_x, &xq, &inner)) != FP4_OK) {
            st = fp4_par_stage_fail(err, who, "x quantization", 0, &inner);
            goto out;
        }
        io->x_encode_scale_used = gs_x;
    }

    /* per rank: the weight slices, gate_up's slice, the activation */
    float h_amax = 0.0f;
    for (int rank = 0; rank < tp; rank++) {
        fp4_moe_weights *sw = &shards[rank];
        if ((st = fp4_moe_weights_init(sw, dims->experts, err)) != FP4_OK) goto out;
        for (int e = 0; e < dims->experts; e++)
            if ((st = fp4_tp_mlp_shard(&tpp, rank, &w->gate_up[e], &w->down[e], &sw->gate_up[e],
                                       &sw->down[e], &inner)) != FP4_OK) {
                st = fp4_par_stage_fail(err, who, "weight slicing", rank, &inner);
                goto out;
            }
        if ((st = fp4_par_alloc((void **)&y[rank], pairs, 2 * ks, sizeof(float), who,
                                "gate_up's output", err)) != FP4_OK ||
            (st = fp4_par_alloc((void **)&h[rank], pairs, ks, sizeof(float), who,
                                "the activation", err)) != FP4_OK)
            goto out;
        if (o->mode == FP4_MOE_W4A4)
            st = fp4_moe_grouped_ref_w4a4(&xq, FP4_MOE_A_PER_TOKEN, sw->gate_up, &plan, y[rank],
                                          o->threads, &inner);
        else
            st = fp4_moe_grouped_ref_w4a16(x_bf16, tokens, hid, FP4_MOE_A_PER_TOKEN, sw->gate_up,
                                           &plan, y[rank], o->threads, &inner);
        if (st != FP4_OK) {
            st = fp4_par_stage_fail(err, who, "gate_up", rank, &inner);
            goto out;
        }
        /* the slice holds gate columns [0, I/tp) and the matching up columns after them */
        for (int64_t p = 0; p < pairs; p++)
            for (int64_t i = 0; i < ks; i++)
                h[rank][p * ks + i] = fp4_moe_activation(dims->act, y[rank][p * 2 * ks + i],
                                                         y[rank][p * 2 * ks + ks + i]);
        if (o->mode == FP4_MOE_W4A4) {
            float a;
            if ((st = fp4_par_f32_amax(h[rank], pairs, ks, who, &a, err)) != FP4_OK) goto out;
            h_amax = fmaxf(h_amax, a); /* the all-reduce of max a dynamic scale needs */
        }
    }

    /* per rank: h as down's input */
    const float gs_h = fp4_par_encode_scale(o->h_encode_scale, h_amax);
    for (int rank = 0; rank < tp; rank++) {
        if (o->mode == FP4_MOE_W4A4) {
            if ((st = fp4_quantize_f32(h[rank], pairs, ks, gs_h, &hq[rank], &inner)) != FP4_OK) {
                st = fp4_par_stage_fail(err, who, "h quantization", rank, &inner);
                goto out;
            }
            continue;
        }
        if ((st = fp4_par_alloc((void **)&h16[rank], pairs, ks, sizeof(uint16_t), who,
                                "h in bf16", err)) != FP4_OK)
            goto out;
        for (int64_t i = 0; i < pairs * ks; i++) {
            h16[rank][i] = fp4_bf16_from_float(h[rank][i]);
            if ((h16[rank][i] & 0x7F80u) == 0x7F80u) { /* as the W4A16 reference refuses */
                st = fp4_fail(err, FP4_ERR_INVALID_ARG,
                              "%s, down on rank %d: activation (%lld, %lld) is not finite", who,
                              rank, (long long)(i / ks), (long long)(i % ks));
                goto out;
            }
        }
    }
    if (o->mode == FP4_MOE_W4A4) io->h_encode_scale_used = gs_h;

    /* down: partials summed exactly, then rounded once */
    if ((st = check_down_scales(w, &plan, scale_int, err)) != FP4_OK) goto out;
    if ((st = fp4_par_alloc((void **)&d, pairs, hid, sizeof(float), who, "down's output", err)) !=
        FP4_OK)
        goto out;
    const int threads = thread_count(o->threads, pairs);
    if ((st = fp4_par_alloc((void **)&scratch, threads, hid * LIMBS, sizeof(int64_t), who,
                            "accumulators", err)) != FP4_OK ||
        (st = fp4_par_alloc((void **)&arow, threads, ks, sizeof(int32_t), who, "rows", err)) !=
            FP4_OK ||
        (st = fp4_par_alloc((void **)&wrow, threads, ks, sizeof(int32_t), who, "rows", err)) !=
            FP4_OK ||
        (st = fp4_par_alloc((void **)&lrow, threads, ks, sizeof(int8_t), who, "rows", err)) !=
            FP4_OK)
        goto out;
    tp_job job;
    memset(&job, 0, sizeof job);
    job.mode = o->mode;
    job.tp = tp;
    job.pairs = pairs;
    job.hidden = hid;
    job.shard = ks;
    job.r = r;
    job.shards = shards;
    job.hq = hq;
    job.h16 = h16;
    job.scale_int = scale_int;
    job.d = d;
    job.scratch = scratch;
    job.arow = arow;
    job.wrow = wrow;
    job.lrow = lrow;
    atomic_init(&job.next, 0);
    int started = 0;
    for (int i = 0; i < threads; i++) args[i] = (tp_worker_arg){&job, i};
    for (; started < threads - 1; started++)
        if (pthread_create(&tids[started], NULL, tp_worker, &args[started + 1]) != 0) break;
    tp_worker(&args[0]); /* this thread works too, and finishes alone if creation failed */
    for (int i = 0; i < started; i++) pthread_join(tids[i], NULL);

    /* the optional intermediates, put back in the unsharded layout */
    for (int rank = 0; rank < tp; rank++) {
        const int64_t g0 = (int64_t)rank * ks;
        for (int64_t p = 0; p < pairs; p++) {
            if (io->y) {
                memcpy(io->y + p * 2 * inter + g0, y[rank] + p * 2 * ks, (size_t)ks * sizeof(float));
                memcpy(io->y + p * 2 * inter + inter + g0, y[rank] + p * 2 * ks + ks,
                       (size_t)ks * sizeof(float));
            }
            if (io->h) memcpy(io->h + p * inter + g0, h[rank] + p * ks, (size_t)ks * sizeof(float));
        }
    }
    if (io->d) memcpy(io->d, d, (size_t)pairs * (size_t)hid * sizeof *d);
    st = fp4_moe_combine(d, hid, r, io->out, err);
out:
    for (int rank = 0; shards && rank < tp; rank++) fp4_moe_weights_free(&shards[rank]);
    for (int rank = 0; y && h && hq && h16 && rank < tp; rank++) {
        free(y[rank]);
        free(h[rank]);
        fp4_matrix_free(&hq[rank]);
        free(h16[rank]);
    }
    free(shards);
    free(y);
    free(h);
    free(hq);
    free(h16);
    free(d);
    free(scratch);
    free(arow);
    free(wrow);
    free(lrow);
    fp4_matrix_free(&xq);
    fp4_moe_plan_free(&plan);
    return st;
}
