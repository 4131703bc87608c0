/* The engine's GPU path, black-box, with fake backends built on the exact GPU
 * reference (cuda-ref): each fake computes the right answer unless it is
 * told to misbehave.
 *   - every copy is used equally by the timed batch;
 *   - two identical backends: the ratio's CI contains 1.00 (as printed);
 *   - a backend that ignores the copy index fails verification;
 *   - a backend that writes nothing fails verification;
 *   - a backend whose poison() does not poison fails;
 *   - a backend whose prepare() fails on an out-of-memory cudaMalloc, and
 *     leaves that as CUDA's last error, does not fail the next ones;
 *   - the per-replay overhead is out of the time: a fixed ~2 us kernel
 *     timed with batches of 64 and of 256 calls agrees within 1%.
 * Needs a GPU (exit 77 without one). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/engine_gpu.h"
#include "check.h"
#include "fp4/backend.h"
#include "fp4/engine.h"

#define MAX_FAKE_COPIES 1024

typedef enum fake_mode {
    FAKE_GOOD,          /* cuda-ref's answer */
    FAKE_IGNORES_COPY,  /* always computes copy 0 */
    FAKE_WRITES_NOTHING, /* run() does nothing */
    FAKE_BAD_POISON,    /* poison() leaves the output as it was */
    FAKE_SPIN,          /* cuda-ref's answer, then a 2 us timer kernel */
    FAKE_OOM            /* prepare() fails on a cudaMalloc too large for any GPU */
} fake_mode;

typedef struct fake_inst {
    const fp4_backend_ops *ref;
    void *ref_inst;
    fake_mode mode;
} fake_inst;

typedef struct fake_plan {
    fake_inst *inst;
    void *ref_plan;
    int copies;
    /* calls per copy made while the stream was being captured: the batch */
    long captured[MAX_FAKE_COPIES];
} fake_plan;

/* The plans of the last case, so the test can inspect them after the engine
 * released them (the counts are copied out at release). */
typedef struct fake_record {
    int copies;
    long captured[MAX_FAKE_COPIES];
} fake_record;

static fake_record last_record[6];

static fp4_status fake_open(fake_mode mode, void **inst, fp4_err *err)
{
    fake_inst *f = calloc(1, sizeof *f);
    if (!f) return fp4_fail(err, FP4_ERR_NOMEM, "fake: no memory");
    f->ref = fp4_backend_find("cuda-ref");
    f->mode = mode;
    fp4_status st = f->ref ? f->ref->open(&f->ref_inst, err)
                           : fp4_fail(err, FP4_ERR_UNSUPPORTED, "no cuda-ref");
    if (st != FP4_OK) {
        free(f);
        return st;
    }
    *inst = f;
    return FP4_OK;
}

static void fake_close(void *inst)
{
    fake_inst *f = inst;
    f->ref->close(f->ref_inst);
    free(f);
}

static fp4_status fake_prepare(void *inst, const fp4_gemm_problem *p, int copies, void **plan,
                               fp4_err *err)
{
    fake_inst *f = inst;
    if (copies > MAX_FAKE_COPIES) return fp4_fail(err, FP4_ERR_UNSUPPORTED, "too many copies");
    if (f->mode == FAKE_OOM) { /* 4 PiB; the error stays CUDA's last one, as a backend may leave it */
        void *huge = NULL;
        const cudaError_t e = cudaMalloc(&huge, (size_t)1 << 52);
        if (e == cudaSuccess) (void)cudaFree(huge);
        return fp4_fail(err, FP4_ERR_CUDA, "fake: cudaMalloc(4 PiB): %s", cudaGetErrorString(e));
    }
    fake_plan *fp = calloc(1, sizeof *fp);
    if (!fp) return fp4_fail(err, FP4_ERR_NOMEM, "fake: no memory");
    fp->inst = f;
    fp->copies = copies;
    fp4_status st = f->ref->prepare(f->ref_inst, p, copies, &fp->ref_plan, err);
    if (st != FP4_OK) {
        free(fp);
        return st;
    }
    *plan = fp;
    return FP4_OK;
}

static fp4_status fake_poison(void *plan, int copy, void *stream, fp4_err *err)
{
    fake_plan *fp = plan;
    if (fp->inst->mode == FAKE_BAD_POISON) return FP4_OK;
    return fp->inst->ref->poison(fp->ref_plan, copy, stream, err);
}

static fp4_status fake_run(void *plan, int copy, void *stream, fp4_err *err)
{
    fake_plan *fp = plan;
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)stream, &cs) == cudaSuccess &&
        cs == cudaStreamCaptureStatusActive && copy >= 0 && copy < fp->copies)
        fp->captured[copy]++;
    switch (fp->inst->mode) {
    case FAKE_WRITES_NOTHING: return FP4_OK;
    case FAKE_IGNORES_COPY: return fp->inst->ref->run(fp->ref_plan, 0, stream, err);
    case FAKE_SPIN: {
        fp4_status st = fp->inst->ref->run(fp->ref_plan, copy, stream, err);
        return st == FP4_OK ? fp4_gpu_light_phase(2.0, (cudaStream_t)stream, err) : st;
    }
    default: return fp->inst->ref->run(fp->ref_plan, copy, stream, err);
    }
}

static fp4_status fake_read(void *plan, int copy, float *d, fp4_err *err)
{
    fake_plan *fp = plan;
    return fp->inst->ref->read_output(fp->ref_plan, copy, d, err);
}

static void fake_release(void *plan)
{
    fake_plan *fp = plan;
    fake_record *rec = &last_record[fp->inst->mode];
    rec->copies = fp->copies;
    memcpy(rec->captured, fp->captured, sizeof rec->captured);
    fp->inst->ref->release(fp->ref_plan);
    free(fp);
}

#define FAKE_OPEN(mode_name, mode)                                                            \
    static fp4_status open_##mode_name(void **inst, fp4_err *err)                              \
    {                                                                                        \
        return fake_open(mode, inst, err);                                                   \
    }
FAKE_OPEN(good, FAKE_GOOD)
FAKE_OPEN(ignores, FAKE_IGNORES_COPY)
FAKE_OPEN(nothing, FAKE_WRITES_NOTHING)
FAKE_OPEN(badpoison, FAKE_BAD_POISON)
FAKE_OPEN(spin, FAKE_SPIN)
FAKE_OPEN(oom, FAKE_OOM)

#define FAKE_OPS(var, nm, open_fn)                                                            \
    static const fp4_backend_ops var = {                                                     \
        .api_version = FP4_BACKEND_API_VERSION,                                              \
        .name = nm,                                                                          \
        .summary = "test fake on cuda-ref",                                                  \
        .flags = FP4_BACKEND_GPU,                                                            \
        .math = FP4_MATH_CUDA_CORES,                                                         \
        .tol_max = 1e-6,                                                                     \
        .tol_norm = 1e-6,                                                                    \
        .open = open_fn,                                                                     \
        .close = fake_close,                                                                 \
        .prepare = fake_prepare,                                                             \
        .poison = fake_poison,                                                               \
        .run = fake_run,                                                                     \
        .read_output = fake_read,                                                            \
        .release = fake_release,                                                             \
    }
FAKE_OPS(fake_a, "fake-a", open_good);
FAKE_OPS(fake_ignores, "fake-ignores-copy", open_ignores);
FAKE_OPS(fake_nothing, "fake-writes-nothing", open_nothing);
FAKE_OPS(fake_badpoison, "fake-bad-poison", open_badpoison);
FAKE_OPS(fake_spin, "fake-spin", open_spin);
FAKE_OPS(fake_oom, "fake-oom", open_oom);
/* a second, identical backend under another name (rows are told apart by it) */
static const fp4_backend_ops fake_b = {
    .api_version = FP4_BACKEND_API_VERSION,
    .name = "fake-b",
    .summary = "test fake on cuda-ref",
    .flags = FP4_BACKEND_GPU,
    .math = FP4_MATH_CUDA_CORES,
    .tol_max = 1e-6,
    .tol_norm = 1e-6,
    .open = open_good,
    .close = fake_close,
    .prepare = fake_prepare,
    .poison = fake_poison,
    .run = fake_run,
    .read_output = fake_read,
    .release = fake_release,
};

static const fp4_row *row_of(const fp4_report *r, const char *backend)
{
    for (int i = r->nrows - 1; i >= 0; i--)
        if (strcmp(r->rows[i].backend, backend) == 0) return &r->rows[i];
    return NULL;
}

static void base_settings(fp4_settings *set)
{
    fp4_settings_default(set);
    set->measure_ceilings = 0;
    set->warmup_ms = 50;
    set->stop.max_time_s = 1.5;
    set->stop.min_samples = 20;
    set->stop.noise_target = 0.002;
}

static void test_faults_and_pairs(void)
{
    fp4_settings set;
    fp4_report rep;
    fp4_engine *e = NULL;
    fp4_err err;
    base_settings(&set);
    snprintf(set.baseline, sizeof set.baseline, "fake-a");
    memset(&rep, 0, sizeof rep);
    CHECK(fp4_engine_create(&set, &rep, &e, &err) == FP4_OK);
    if (!e) return;
    CHECK_MSG(rep.ceil.l2.measured && rep.ceil.l2.cold,
              "coldness check: hot %.0f rotated %.0f flushed %.0f GB/s", rep.ceil.l2.hot_gbps,
              rep.ceil.l2.rotated_gbps, rep.ceil.l2.flushed_gbps);
    printf("coldness check: hot %.0f, rotated %.0f, flushed %.0f GB/s\n", rep.ceil.l2.hot_gbps,
           rep.ceil.l2.rotated_gbps, rep.ceil.l2.flushed_gbps);
    /* fake-oom first: the others are prepared after its failure */
    const fp4_backend_ops *list[] = {&fake_oom, &fake_a, &fake_b, &fake_ignores, &fake_nothing,
                                     &fake_badpoison};
    /* big enough that its copies span 3x L2 within 1024 copies */
    const fp4_case c = {{128, 512, 1024}, "fakes"};
    CHECK(fp4_engine_run_case(e, &c, 0, list, 6, &rep, NULL, NULL, &err) == FP4_OK);
    const fp4_row *oom = row_of(&rep, "fake-oom");
    CHECK_MSG(oom && oom->state == FP4_ROW_FAILED && strstr(oom->reason, "prepare") &&
                  strstr(oom->reason, "4 PiB"),
              "out of memory: %s", oom ? oom->reason : "no row");
    const fp4_row *a = row_of(&rep, "fake-a"), *b = row_of(&rep, "fake-b");
    const fp4_row *ign = row_of(&rep, "fake-ignores-copy"), *not = row_of(&rep, "fake-writes-nothing");
    const fp4_row *bp = row_of(&rep, "fake-bad-poison");
    CHECK(a && b && ign && not && bp);
    if (a && b && ign && not && bp) {
        CHECK_MSG(a->state == FP4_ROW_OK && b->state == FP4_ROW_OK, "a: %s; b: %s", a->reason, b->reason);
        /* fake-oom's error left as CUDA's last one would fail cuda-ref's launch
         * check when it computes the oracle, and the engine would fall back to
         * cpu-ref without a word: the note names the oracle */
        CHECK_MSG(strstr(a->verify_note, "vs cuda-ref") != NULL, "fake-a verified %s", a->verify_note);
        CHECK_MSG(a->copies > 2 && a->verified_copies == a->copies, "copies %d, verified %d",
                  a->copies, a->verified_copies);
        CHECK_MSG(strcmp(a->l2, "cold") == 0 && a->rotation_bytes >= 3 * rep.dev.l2_bytes,
                  "l2 %s rotation %.0f", a->l2, a->rotation_bytes);
        /* contains 1.00 at the precision the report prints (two decimals):
         * the two instances' buffers sit at different addresses, which on the
         * H200 moved such a pair by up to 0.02%, a real difference, not a
         * bias of the engine */
        CHECK_MSG(b->has_ratio && b->ratio_lo <= 1.005 && b->ratio_hi >= 0.995 &&
                      fabs(b->ratio - 1.0) <= 0.005,
                  "identical backends: ratio %.4f [%.4f, %.4f]", b->ratio, b->ratio_lo, b->ratio_hi);
        printf("identical backends: ratio %.4f [%.4f, %.4f], %d samples\n", b->ratio, b->ratio_lo,
               b->ratio_hi, b->t.count);
        CHECK_MSG(ign->state == FP4_ROW_FAILED && strstr(ign->reason, "copy 1"),
                  "ignores the copy: %s: %s", fp4_row_state_name(ign->state), ign->reason);
        CHECK_MSG(not->state == FP4_ROW_FAILED && strstr(not->reason, "NaN"),
                  "writes nothing: %s: %s", fp4_row_state_name(not->state), not->reason);
        CHECK_MSG(bp->state == FP4_ROW_FAILED && strstr(bp->reason, "poison"),
                  "bad poison: %s: %s", fp4_row_state_name(bp->state), bp->reason);
    }
    /* the timed batch: every copy equally often, a multiple of the copies */
    const fake_record *rec = &last_record[FAKE_GOOD];
    long first = rec->copies > 0 ? rec->captured[0] : 0, total = 0;
    int equal = rec->copies > 0 && first > 0;
    for (int i = 0; i < rec->copies; i++) {
        equal &= rec->captured[i] == first;
        total += rec->captured[i];
    }
    CHECK_MSG(equal, "copies %d, copy 0 captured %ld times, total %ld", rec->copies, first, total);
    if (a) CHECK_MSG(total == a->batch, "captured %ld calls, batch %d", total, a->batch);
    fp4_warnings w;
    fp4_warnings_clear(&w);
    fp4_engine_destroy(e, &w);
    CHECK_MSG(w.count == 0, "%d cleanup warnings", w.count);
    fp4_report_free(&rep);
}

/* The same fixed-length call timed with 64 and with 256 calls per replay: a
 * per-replay cost left in the time would make the short batch slower. */
static double spin_median(int min_batch)
{
    fp4_settings set;
    fp4_report rep;
    fp4_engine *e = NULL;
    fp4_err err;
    double med = NAN;
    base_settings(&set);
    set.hot = 1; /* one copy: the batch is exactly min_batch */
    set.min_batch = min_batch;
    set.stop.max_time_s = 3;
    set.stop.min_samples = 50;
    memset(&rep, 0, sizeof rep);
    CHECK(fp4_engine_create(&set, &rep, &e, &err) == FP4_OK);
    if (!e) return med;
    const fp4_backend_ops *list[] = {&fake_spin};
    const fp4_case c = {{16, 64, 64}, "spin"};
    CHECK(fp4_engine_run_case(e, &c, 0, list, 1, &rep, NULL, NULL, &err) == FP4_OK);
    const fp4_row *r = row_of(&rep, "fake-spin");
    CHECK(r && r->state == FP4_ROW_OK && r->batch == min_batch);
    if (r && r->state == FP4_ROW_OK) {
        med = r->t.median;
        printf("spin: batch %d, median %.4f us (%d samples, noise %.4f)\n", r->batch, med,
               r->t.count, r->t.noise);
    }
    fp4_engine_destroy(e, NULL);
    fp4_report_free(&rep);
    return med;
}

int main(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("gpu_engine: skipped: no CUDA device\n");
        return 77;
    }
    test_faults_and_pairs();
    const double m64 = spin_median(64), m256 = spin_median(256);
    /* A per-replay cost left in the time makes the short batch slower: that
     * side is held to 1%. The long batch may be a little slower per call (an
     * H100 gave 1.6-1.9% at 512 graph nodes against 128, every run, with the
     * GPU to itself), so that side is only held to 3%. */
    CHECK_MSG(m64 / m256 - 1.0 <= 0.01 && m64 / m256 - 1.0 >= -0.03,
              "batch 64: %.4f us, batch 256: %.4f us (%.2f%%)", m64, m256,
              100.0 * (m64 / m256 - 1.0));
    return check_finish("gpu_engine");
}
